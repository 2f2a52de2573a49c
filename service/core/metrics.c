#include "core/metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rlock/metrics.h>

static atomic_long counters[M_COUNT];

/* Counters sharing a name (consecutive entries) are one metric with labels. */
static const struct {
    const char *name, *help, *labels;
} info[M_COUNT] = {
    [M_ORDERS_ACCEPTED] = {"seckill_orders_accepted_total", "orders reserved in Redis", NULL},
    [M_ORDERS_CONFIRMED] = {"seckill_orders_confirmed_total", "orders answered 201 (committed)",
                            NULL},
    [M_ORDERS_REJECTED] = {"seckill_orders_rejected_total",
                           "reserved orders the database refused (409 with order id)", NULL},
    [M_ORDERS_ACK_TIMEOUTS] = {"seckill_orders_ack_timeouts_total",
                               "durable answers that fell back to 202 pending", NULL},
    [M_ORDERS_REPLAYED] = {"seckill_orders_replayed_total", "idempotent repeats answered again",
                           NULL},
    [M_ORDERS_SOLD_OUT] = {"seckill_orders_sold_out_total", "orders refused: sold out", NULL},
    [M_ORDERS_SOLD_OUT_LOCAL] = {"seckill_orders_sold_out_local_total",
                                 "orders refused sold out from this process's sold-out flag "
                                 "(sold_out_flag_ms), without Redis; also in "
                                 "seckill_orders_sold_out_total",
                                 NULL},
    [M_ORDERS_LIMIT] = {"seckill_orders_limit_exceeded_total", "orders refused: per-user limit",
                        NULL},
    [M_ORDERS_NOT_ACTIVE] = {"seckill_orders_sale_not_active_total", "orders outside the sale",
                             NULL},
    [M_ORDERS_INVALID] = {"seckill_orders_invalid_total", "malformed order requests (400)", NULL},
    [M_BUYER_UNAUTHORIZED] = {"seckill_buyer_unauthorized_total",
                              "buyer requests without a valid buyer token (401)", NULL},
    [M_BUYER_FORBIDDEN] = {"seckill_buyer_forbidden_total",
                           "orders whose user_id is not the token's buyer (403)", NULL},
    [M_ORDERS_UNAVAILABLE] = {"seckill_orders_unavailable_total", "orders answered 503", NULL},
    [M_ORDERS_EXPIRED] = {"seckill_orders_expired_total",
                          "reservations refused by Redis after their deadline", NULL},
    [M_ORDERS_LATE_RESERVED] = {"seckill_orders_late_reserved_total",
                                "reservations whose reply came after the buyer's 503 (Redis "
                                "stalled between running the script and replying)",
                                NULL},
    [M_WRITER_BATCHES_COMMITTED] = {"seckill_writer_batches_committed_total",
                                    "order batches committed", NULL},
    [M_WRITER_BATCHES_FAILED] = {"seckill_writer_batches_failed_total",
                                 "order batches left for replay", NULL},
    [M_WRITER_ORDERS_CONFIRMED] = {"seckill_writer_orders_confirmed_total", "orders confirmed",
                                   NULL},
    [M_WRITER_ORDERS_REJECTED] = {"seckill_writer_orders_rejected_total",
                                  "orders refused by the database guard", NULL},
    [M_WRITER_ORDERS_RECLAIMED] = {"seckill_writer_orders_reclaimed_total",
                                   "stream entries reclaimed from idle writers", NULL},
    [M_WRITER_ID_CONFLICTS] = {"seckill_writer_order_id_conflicts_total",
                               "order ids reused after Redis lost writes (needs a reload)", NULL},
    [M_WRITER_DEAD_LETTERS] = {"seckill_writer_dead_letters_total",
                               "stream entries moved to a dead-letter stream", NULL},
    [M_WRITER_REAPPLIED] = {"seckill_writer_reapplied_total",
                            "orders taken again from a Redis rebuilt without them", NULL},
    [M_SKU_RELOADS] = {"seckill_sku_reloads_total", "SKUs rebuilt in Redis from PostgreSQL", NULL},
    [M_ADJUSTMENTS_SETTLED] = {"seckill_adjustments_settled_total",
                               "adjustment records of dead processes settled", NULL},
    [M_RECONCILE_RUNS] = {"seckill_reconcile_runs_total", "reconciliation passes", NULL},
    [M_DRIFT_SKUS] = {"seckill_drift_skus", "SKUs whose Redis and PostgreSQL disagree", NULL},
    [M_DRIFT_UNITS] = {"seckill_drift_units", "units by which Redis and PostgreSQL disagree", NULL},
    [M_STOCK_ADJUSTMENTS] = {"seckill_stock_adjustments_total", "admin stock deltas applied", NULL},
    [M_REDIS_TIMEOUTS] = {"seckill_redis_timeouts_total", "async Redis commands timed out", NULL},
    [M_HTTP_UNDECLARED] = {"seckill_http_undeclared_answers_total",
                           "answers not in their route's declared list (docs/openapi.json)", NULL},
    [M_HTTP_CONNECTIONS_OPEN] = {"seckill_http_connections_open", "HTTP connections open", NULL},
    [M_HTTP_REFUSED_GLOBAL] = {"seckill_http_connections_refused_total",
                               "connections closed at once: http_max_connections reached", NULL},
    [M_HTTP_REFUSED_PER_ADDR] = {"seckill_http_connections_refused_per_addr_total",
                                 "connections closed at once: http_max_connections_per_addr "
                                 "reached",
                                 NULL},
    [M_HTTP_REQUEST_TIMEOUTS] = {"seckill_http_request_timeouts_total",
                                 "requests not complete within http_request_timeout_ms (408)",
                                 NULL},
    [M_HTTP_WRITE_TIMEOUTS] = {"seckill_http_write_timeouts_total",
                               "replies the client did not read within http_write_timeout_ms",
                               NULL},
    [M_HTTP_MALFORMED] = {"seckill_http_malformed_requests_total",
                          "requests refused as malformed or ambiguous (400, 417, 431, 501)", NULL},
#define RATE_LIMITED "seckill_rate_limited_total", "requests answered 429 (rate limited), by bucket"
    [M_RATE_LIMITED_BUYER] = {RATE_LIMITED, "scope=\"buyer\""},
    [M_RATE_LIMITED_ADDR] = {RATE_LIMITED, "scope=\"addr\""},
    [M_RATE_LIMITED_ADMIN_AUTH] = {RATE_LIMITED, "scope=\"admin_auth\""},
#undef RATE_LIMITED
};

void metrics_add(enum metric m, long n)
{
    atomic_fetch_add_explicit(&counters[m], n, memory_order_relaxed);
}

void metrics_set(enum metric m, long v)
{
    atomic_store_explicit(&counters[m], v, memory_order_relaxed);
}

static int is_gauge(int m)
{
    return m == M_DRIFT_SKUS || m == M_DRIFT_UNITS || m == M_HTTP_CONNECTIONS_OPEN;
}

char *metrics_render(size_t *len)
{
    size_t cap = 256 * (M_COUNT + 8);
    char *out = malloc(cap);
    if (!out)
        abort();
    size_t n = 0;
    for (int i = 0; i < M_COUNT; i++) {
        int w = 0;
        if (i == 0 || strcmp(info[i].name, info[i - 1].name) != 0)
            w = snprintf(out + n, cap - n, "# HELP %s %s\n# TYPE %s %s\n", info[i].name,
                         info[i].help, info[i].name, is_gauge(i) ? "gauge" : "counter");
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
        w = snprintf(out + n, cap - n, "%s%s%s%s %ld\n", info[i].name, info[i].labels ? "{" : "",
                     info[i].labels ? info[i].labels : "", info[i].labels ? "}" : "",
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
