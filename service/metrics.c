#include "metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "rlock_metrics.h"

static atomic_long counters[M_COUNT];

static const struct {
    const char *name, *help;
} info[M_COUNT] = {
    [M_ORDERS_ACCEPTED] = {"seckill_orders_accepted_total", "orders reserved (202)"},
    [M_ORDERS_REPLAYED] = {"seckill_orders_replayed_total", "idempotent repeats answered 202"},
    [M_ORDERS_SOLD_OUT] = {"seckill_orders_sold_out_total", "orders refused: sold out"},
    [M_ORDERS_LIMIT] = {"seckill_orders_limit_exceeded_total", "orders refused: per-user limit"},
    [M_ORDERS_NOT_ACTIVE] = {"seckill_orders_sale_not_active_total", "orders outside the sale"},
    [M_ORDERS_INVALID] = {"seckill_orders_invalid_total", "malformed order requests (400)"},
    [M_ORDERS_UNAVAILABLE] = {"seckill_orders_unavailable_total", "orders answered 503"},
    [M_WRITER_BATCHES_COMMITTED] = {"seckill_writer_batches_committed_total",
                                    "order batches committed"},
    [M_WRITER_BATCHES_FAILED] = {"seckill_writer_batches_failed_total",
                                 "order batches left for replay"},
    [M_WRITER_ORDERS_CONFIRMED] = {"seckill_writer_orders_confirmed_total", "orders confirmed"},
    [M_WRITER_ORDERS_REJECTED] = {"seckill_writer_orders_rejected_total",
                                  "orders refused by the database guard"},
    [M_WRITER_ORDERS_RECLAIMED] = {"seckill_writer_orders_reclaimed_total",
                                   "stream entries reclaimed from idle writers"},
    [M_WRITER_ID_CONFLICTS] = {"seckill_writer_order_id_conflicts_total",
                               "order ids reused after Redis lost writes (needs a reload)"},
    [M_STOCK_ADJUSTMENTS] = {"seckill_stock_adjustments_total", "admin stock deltas applied"},
    [M_REDIS_TIMEOUTS] = {"seckill_redis_timeouts_total", "async Redis commands timed out"},
};

void metrics_add(enum metric m, long n)
{
    atomic_fetch_add_explicit(&counters[m], n, memory_order_relaxed);
}

char *metrics_render(size_t *len)
{
    size_t cap = 256 * (M_COUNT + 8);
    char *out = malloc(cap);
    if (!out)
        abort();
    size_t n = 0;
    for (int i = 0; i < M_COUNT; i++) {
        int w = snprintf(out + n, cap - n, "# HELP %s %s\n# TYPE %s counter\n%s %ld\n",
                         info[i].name, info[i].help, info[i].name, info[i].name,
                         atomic_load_explicit(&counters[i], memory_order_relaxed));
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    /* The lock library keeps its own counters. */
    struct rlock_metrics lm;
    rlock_metrics_snapshot(&lm);
    const struct {
        const char *name, *help;
        uint64_t v;
    } locks[] = {
        {"seckill_lock_acquired_total", "lock acquisitions", lm.acquired},
        {"seckill_lock_waited_total", "acquisitions that waited for a busy lock", lm.waited},
        {"seckill_lock_wait_ms_total", "milliseconds spent waiting for locks", lm.wait_ms_total},
        {"seckill_lock_busy_total", "acquisitions that gave up on a busy lock", lm.busy},
        {"seckill_lock_renewed_total", "watchdog renewals", lm.renewed},
        {"seckill_lock_lost_total", "locks found lost while held", lm.lost},
        {"seckill_lock_released_total", "lock releases", lm.released},
        {"seckill_lock_release_refused_total", "releases refused (not the owner)",
         lm.release_refused},
    };
    for (size_t i = 0; i < sizeof locks / sizeof locks[0]; i++) {
        int w =
            snprintf(out + n, cap - n, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", locks[i].name,
                     locks[i].help, locks[i].name, locks[i].name, (unsigned long long)locks[i].v);
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    *len = n;
    return out;
}
