/*
 * metrics: relaxed atomic counters (see rlock/metrics.h).
 */
#include "rlock/metrics.h"

#include <stdatomic.h>

static _Atomic uint64_t counters[RLOCK_M_COUNT];

void rlock_metrics_add(enum rlock_metric m, uint64_t n)
{
    if ((unsigned)m >= RLOCK_M_COUNT)
        return;
    atomic_fetch_add_explicit(&counters[m], n, memory_order_relaxed);
}

static uint64_t get(enum rlock_metric m)
{
    return atomic_load_explicit(&counters[m], memory_order_relaxed);
}

void rlock_metrics_snapshot(struct rlock_metrics *out)
{
    out->acquired = get(RLOCK_M_ACQUIRED);
    out->waited = get(RLOCK_M_WAITED);
    out->wait_ms_total = get(RLOCK_M_WAIT_MS);
    out->busy = get(RLOCK_M_BUSY);
    out->renewed = get(RLOCK_M_RENEWED);
    out->lost = get(RLOCK_M_LOST);
    out->released = get(RLOCK_M_RELEASED);
    out->release_refused = get(RLOCK_M_RELEASE_REFUSED);
}
