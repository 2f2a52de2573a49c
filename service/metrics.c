#include "metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

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
    size_t cap = 256 * M_COUNT;
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
    *len = n;
    return out;
}
