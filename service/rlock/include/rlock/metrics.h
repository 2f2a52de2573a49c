/*
 * rlock_metrics: process-wide counters kept by the lock library, for the
 * daemon to export (e.g. as Prometheus counters).  Every lock kind (simple,
 * multi, reentrant, fair; sync and async) counts into the same set.
 *
 * Counters only grow.  Updates are relaxed atomic additions, so counting
 * costs next to nothing and never takes a lock; a snapshot is a set of
 * individually exact values, not one consistent cut across all of them.
 */
#ifndef RLOCK_METRICS_H
#define RLOCK_METRICS_H

#include <stdint.h>

enum rlock_metric {
    RLOCK_M_ACQUIRED,        /* acquisitions that succeeded (each reentry counts) */
    RLOCK_M_WAITED,          /* of those, how many found the lock busy at first and waited */
    RLOCK_M_WAIT_MS,         /* total ms spent waiting for busy locks, successful or not */
    RLOCK_M_BUSY,            /* acquisitions that gave up: still busy when wait_ms ran out */
    RLOCK_M_RENEWED,         /* successful watchdog renewals */
    RLOCK_M_LOST,            /* locks found lost (by a renewal or an expired lease) */
    RLOCK_M_RELEASED,        /* releases that removed or decremented our hold */
    RLOCK_M_RELEASE_REFUSED, /* releases refused: not the owner, or the lock had expired */
    RLOCK_M_COUNT
};

struct rlock_metrics {
    uint64_t acquired;
    uint64_t waited;
    uint64_t wait_ms_total;
    uint64_t busy;
    uint64_t renewed;
    uint64_t lost;
    uint64_t released;
    uint64_t release_refused;
};

/* Adds n to counter m (thread-safe, lock-free).  Out-of-range m is ignored. */
void rlock_metrics_add(enum rlock_metric m, uint64_t n);

/* Copies the current counters into *out.  Thread-safe; cannot fail. */
void rlock_metrics_snapshot(struct rlock_metrics *out);

#endif /* RLOCK_METRICS_H */
