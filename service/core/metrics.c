#include "core/metrics.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rlock/metrics.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"

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
    [M_ORDERS_PENDING_RECORDED] = {"seckill_orders_pending_recorded_total",
                                   "durable 202 pending answers recorded in PostgreSQL first",
                                   NULL},
    [M_ORDERS_PENDING_UNRECORDED] = {"seckill_orders_pending_unrecorded_total",
                                     "durable answers that fell back to 202 but could not be "
                                     "recorded (answered 503 with the Idempotency-Key)",
                                     NULL},
    [M_ORDERS_PENDING_SETTLED] = {"seckill_orders_pending_settled_total",
                                  "recorded pending orders whose reservation Redis lost, "
                                  "decided by the settler",
                                  NULL},
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
    [M_RESERVE_CALLS] = {"seckill_reserve_calls_total",
                         "reserve script calls sent to Redis, each the orders of one SKU that "
                         "arrived in one event-loop turn (at most reserve_batch_max)",
                         NULL},
    [M_RESERVE_CALL_ORDERS] = {"seckill_reserve_call_orders_total",
                               "orders sent in reserve script calls (divided by "
                               "seckill_reserve_calls_total: orders per call)",
                               NULL},
    [M_WRITER_BATCHES_COMMITTED] = {"seckill_writer_batches_committed_total",
                                    "order batches committed (one per SKU of a transaction)", NULL},
    [M_WRITER_TRANSACTIONS] = {"seckill_writer_transactions_total",
                               "writer transactions committed, each the batches of one or more "
                               "SKUs (seckill_writer_batches_committed_total divided by this: "
                               "SKUs per commit)",
                               NULL},
    [M_WRITER_BATCHES_FAILED] = {"seckill_writer_batches_failed_total",
                                 "order batches left for replay", NULL},
    [M_FENCE_REFUSED] = {"seckill_fence_refused_total",
                         "transactions PostgreSQL refused for good for their fencing token "
                         "(a lock holder another had superseded)",
                         NULL},
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
    [M_SKU_LOADS_SUPERSEDED] = {"seckill_sku_loads_superseded_total",
                                "Rebuild loads refused because Redis held a newer epoch", NULL},
    [M_SETTLES_FENCED] = {"seckill_settles_fenced_total",
                          "Redis writes after a commit refused because a newer lock holder took "
                          "over",
                          NULL},
    [M_ADJUSTMENTS_SETTLED] = {"seckill_adjustments_settled_total",
                               "adjustment records of dead processes settled", NULL},
    [M_RECONCILE_RUNS] = {"seckill_reconcile_runs_total", "reconciliation passes", NULL},
    [M_DRIFT_SKUS] = {"seckill_drift_skus", "SKUs whose Redis and PostgreSQL disagree", NULL},
    [M_DRIFT_UNITS] = {"seckill_drift_units", "units by which Redis and PostgreSQL disagree", NULL},
    [M_STOCK_ADJUSTMENTS] = {"seckill_stock_adjustments_total", "admin stock deltas applied", NULL},
    [M_BUCKET_TRANSFERS] = {"seckill_bucket_transfers_total",
                            "moves of units into a buyer's empty bucket from the others", NULL},
    [M_BUCKET_UNITS_MOVED] = {"seckill_bucket_units_moved_total",
                              "units moved between the buckets of a SKU", NULL},
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
                               "answers not written whole within http_write_timeout_ms", NULL},
    [M_HTTP_MALFORMED] = {"seckill_http_malformed_requests_total",
                          "requests refused as malformed or ambiguous (400, 417, 431, 501)", NULL},
    [M_HTTP_BUFFER_BYTES] = {"seckill_http_connection_buffer_bytes",
                             "bytes held by the HTTP connections' read and write buffers", NULL},
#define RATE_LIMITED "seckill_rate_limited_total", "requests answered 429 (rate limited), by bucket"
    [M_RATE_LIMITED_BUYER] = {RATE_LIMITED, "scope=\"buyer\""},
    [M_RATE_LIMITED_ADDR] = {RATE_LIMITED, "scope=\"addr\""},
    [M_RATE_LIMITED_ADMIN_AUTH] = {RATE_LIMITED, "scope=\"admin_auth\""},
    [M_RATE_LIMITED_PAYMENT_AUTH] = {RATE_LIMITED, "scope=\"payment_auth\""},
#undef RATE_LIMITED
    [M_METRICS_SCRAPE_ERRORS] = {"seckill_metrics_scrape_errors_total",
                                 "reads of the per-SKU gauges of /metrics that failed because "
                                 "Redis or PostgreSQL did (the scrapes until the next read leave "
                                 "them out)",
                                 NULL},
    [M_METRICS_REFRESHES] = {"seckill_metrics_refreshes_total",
                             "reads of the per-SKU gauges of /metrics from Redis and PostgreSQL "
                             "(one at a time, at most one per metrics_refresh_ms)",
                             NULL},
#define TRANSITIONS "seckill_order_transitions_total", "orders that changed state, by transition"
    [M_ORDERS_TO_CONFIRMED] = {TRANSITIONS, "from=\"pending\",to=\"confirmed\""},
    [M_ORDERS_TO_REJECTED] = {TRANSITIONS, "from=\"pending\",to=\"rejected\""},
    [M_ORDERS_CANCELLED_PENDING] = {TRANSITIONS, "from=\"pending\",to=\"cancelled\""},
    [M_ORDERS_PAID] = {TRANSITIONS, "from=\"confirmed\",to=\"paid\""},
    [M_ORDERS_CANCELLED] = {TRANSITIONS, "from=\"confirmed\",to=\"cancelled\""},
    [M_ORDERS_EXPIRED_UNPAID] = {TRANSITIONS, "from=\"confirmed\",to=\"expired\""},
#undef TRANSITIONS
    [M_UNITS_RETURNED] = {"seckill_units_returned_total",
                          "units of cancelled and expired orders given back to skus.stock", NULL},
    [M_RETURNS_SETTLED] = {"seckill_returns_settled_total",
                           "returned orders whose units Redis got back (order_release.lua)", NULL},
    [M_RETURNS_SETTLED_LATE] = {"seckill_returns_settled_late_total",
                                "returns a process died before giving to Redis, settled by another "
                                "transaction",
                                NULL},
    [M_SWEEPS] = {"seckill_expiry_sweeps_total", "expiry sweeps run by this process", NULL},
#define STORE_UP "seckill_store_up", "1 when the latest health probe of the store answered, else 0"
    [M_STORE_UP_REDIS] = {STORE_UP, "store=\"redis\""},
    [M_STORE_UP_POSTGRES] = {STORE_UP, "store=\"postgres\""},
#undef STORE_UP
#define PROBE_FAILURES                                                                             \
    "seckill_store_probe_failures_total", "health probes that found the store down (no answer "    \
                                          "within health_timeout_ms, or an error)"
    [M_STORE_PROBE_FAILURES_REDIS] = {PROBE_FAILURES, "store=\"redis\""},
    [M_STORE_PROBE_FAILURES_POSTGRES] = {PROBE_FAILURES, "store=\"postgres\""},
#undef PROBE_FAILURES
#define RELOADS "seckill_config_reloads_total", "config reloads (SIGHUP), by result"
    [M_CONFIG_RELOADS_OK] = {RELOADS, "result=\"ok\""},
    [M_CONFIG_RELOADS_REFUSED] = {RELOADS, "result=\"refused\""},
#undef RELOADS
    [M_CONFIG_RELOAD_LAST_OK] = {"seckill_config_last_reload_success_timestamp_seconds",
                                 "Unix time of the last config reload that was applied (0: none "
                                 "since start)",
                                 NULL},
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
    return m == M_DRIFT_SKUS || m == M_DRIFT_UNITS || m == M_HTTP_CONNECTIONS_OPEN ||
           m == M_HTTP_BUFFER_BYTES || m == M_STORE_UP_REDIS || m == M_STORE_UP_POSTGRES ||
           m == M_CONFIG_RELOAD_LAST_OK;
}

/* ---- histograms ------------------------------------------------------- */

/* Bucket upper bounds (inclusive, Prometheus's "le"), in the family's unit:
 * microseconds for durations (50 us to 10 s, 1-2.5-5 steps), entries for
 * batch sizes (up to writer_batch's maximum). */
#define HIST_BOUNDS_MAX 17
static const int64_t duration_bounds[HIST_BOUNDS_MAX] = {
    50,    100,    250,    500,    1000,    2500,    5000,    10000,   25000,
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
static const int64_t batch_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};

static const struct family {
    const char *name, *help;
    const int64_t *bounds;
    size_t nbounds;
    int seconds; /* samples are microseconds, shown as seconds */
} families[MF_COUNT] = {
    [MF_HTTP_REQUEST] = {"seckill_http_request_duration_seconds",
                         "HTTP requests by route (operationId; unrouted: no route's path, "
                         "protocol: refused by the parser or cut by a deadline) and status "
                         "code, from the request's first byte to its answer queued",
                         duration_bounds, HIST_BOUNDS_MAX, 1},
    [MF_REDIS_COMMAND] = {"seckill_redis_command_duration_seconds",
                          "async Redis commands of the order path by script, from sent to reply "
                          "read (replies after a timeout included; timeouts without a reply are "
                          "seckill_redis_timeouts_total)",
                          duration_bounds, HIST_BOUNDS_MAX, 1},
    [MF_WRITER_BATCH] = {"seckill_writer_batch_duration_seconds",
                         "order writer batches, from the stream read returning to the batch "
                         "written (or failed)",
                         duration_bounds, HIST_BOUNDS_MAX, 1},
    [MF_WRITER_BATCH_ORDERS] = {"seckill_writer_batch_orders", "stream entries per writer batch",
                                batch_bounds, sizeof batch_bounds / sizeof batch_bounds[0], 0},
};

/* Each histogram keeps HIST_SHARDS copies of its counters, each on cache lines
 * of its own, and a thread always adds to the same copy: the HTTP loops and
 * writers rarely write to one line, which would bounce between their cores.
 * A scrape sums the copies. */
#define HIST_SHARDS 4
#define CACHE_LINE 64

struct hist_shard {
    /* counts[i]: samples in (bounds[i-1], bounds[i]]; counts[nbounds]: above the last */
    _Alignas(CACHE_LINE) atomic_ulong counts[HIST_BOUNDS_MAX + 1];
    atomic_ulong sum;
};

struct metrics_hist {
    struct hist_shard shards[HIST_SHARDS];
    const int64_t *bounds;
    size_t nbounds;
    enum metrics_family family;
    char labels[METRICS_LABELS_MAX];
};

/* The writer's two come first, made here: they exist in every scrape. */
#define WRITER_BATCH_HIST 0
#define WRITER_BATCH_ORDERS_HIST 1
static struct metrics_hist hists[METRICS_HISTS_MAX] = {
    [WRITER_BATCH_HIST] = {.bounds = duration_bounds,
                           .nbounds = HIST_BOUNDS_MAX,
                           .family = MF_WRITER_BATCH},
    [WRITER_BATCH_ORDERS_HIST] = {.bounds = batch_bounds,
                                  .nbounds = sizeof batch_bounds / sizeof batch_bounds[0],
                                  .family = MF_WRITER_BATCH_ORDERS},
};
static atomic_size_t nhists = 2; /* published with release once an entry is filled in */
static pthread_mutex_t hists_mu = PTHREAD_MUTEX_INITIALIZER;

struct metrics_hist *metrics_hist_get(enum metrics_family f, const char *labels)
{
    struct metrics_hist *h = NULL;
    pthread_mutex_lock(&hists_mu);
    size_t n = atomic_load_explicit(&nhists, memory_order_relaxed);
    for (size_t i = 0; i < n && !h; i++)
        if (hists[i].family == f && strcmp(hists[i].labels, labels) == 0)
            h = &hists[i];
    if (!h && n < METRICS_HISTS_MAX && strlen(labels) < METRICS_LABELS_MAX) {
        h = &hists[n];
        h->family = f;
        h->bounds = families[f].bounds;
        h->nbounds = families[f].nbounds;
        snprintf(h->labels, sizeof h->labels, "%s", labels);
        atomic_store_explicit(&nhists, n + 1, memory_order_release);
    } else if (!h) {
        log_error("metrics: no room for histogram %s{%s}", families[f].name, labels);
    }
    pthread_mutex_unlock(&hists_mu);
    return h;
}

static atomic_uint next_shard;
static _Thread_local int my_shard = -1;

void metrics_hist_observe(struct metrics_hist *h, int64_t v)
{
    if (!h)
        return;
    if (v < 0)
        v = 0;
    if (my_shard < 0) /* a thread's first sample: threads take the copies in turn */
        my_shard =
            (int)(atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % HIST_SHARDS);
    size_t i = 0;
    while (i < h->nbounds && v > h->bounds[i]) /* most samples stop in the first few */
        i++;
    struct hist_shard *sh = &h->shards[my_shard];
    atomic_fetch_add_explicit(&sh->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->sum, (unsigned long)v, memory_order_relaxed);
}

/* Bucket b of h (not cumulative), or its sum for b == -1, over the copies. */
static uint64_t hist_total(struct metrics_hist *h, int b)
{
    uint64_t t = 0;
    for (int i = 0; i < HIST_SHARDS; i++)
        t += atomic_load_explicit(b < 0 ? &h->shards[i].sum : &h->shards[i].counts[b],
                                  memory_order_relaxed);
    return t;
}

void metrics_writer_batch(int64_t started_us, size_t entries)
{
    metrics_hist_observe(&hists[WRITER_BATCH_HIST], clock_mono_us() - started_us);
    metrics_hist_observe(&hists[WRITER_BATCH_ORDERS_HIST], (int64_t)entries);
}

/* ---- rendering ---------------------------------------------------------- */

/* A growing output buffer (one per scrape). */
struct out {
    char *p;
    size_t n, cap;
};

__attribute__((format(printf, 2, 3))) static void out_printf(struct out *o, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (w < 0)
            abort();
        if ((size_t)w < o->cap - o->n) {
            o->n += (size_t)w;
            return;
        }
        o->cap = o->cap * 2 + (size_t)w;
        o->p = xrealloc(o->p, o->cap);
    }
}

static void out_head(struct out *o, const char *name, const char *help, const char *type)
{
    out_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* v (microseconds, or a count) as a Prometheus number: seconds without
 * trailing zeros ("0.00025", "2.5", "10"). */
static void number(char *buf, size_t cap, uint64_t v, int seconds)
{
    if (!seconds) {
        snprintf(buf, cap, "%" PRIu64, v);
        return;
    }
    int w = snprintf(buf, cap, "%" PRIu64 ".%06" PRIu64, v / 1000000, v % 1000000);
    if (w <= 0 || (size_t)w >= cap)
        return;
    char *e = buf + w - 1;
    while (*e == '0')
        *e-- = '\0';
    if (*e == '.')
        *e = '\0';
}

static void render_hists(struct out *o)
{
    size_t n = atomic_load_explicit(&nhists, memory_order_acquire);
    for (int f = 0; f < MF_COUNT; f++) {
        const struct family *fam = &families[f];
        int headed = 0;
        for (size_t i = 0; i < n; i++) {
            struct metrics_hist *h = &hists[i];
            if (h->family != (enum metrics_family)f)
                continue;
            if (!headed)
                out_head(o, fam->name, fam->help, "histogram");
            headed = 1;
            const char *sep = h->labels[0] ? "," : "";
            uint64_t cum = 0;
            char le[32];
            for (size_t b = 0; b <= h->nbounds; b++) {
                cum += hist_total(h, (int)b);
                if (b < h->nbounds)
                    number(le, sizeof le, (uint64_t)h->bounds[b], fam->seconds);
                else
                    snprintf(le, sizeof le, "+Inf");
                out_printf(o, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", fam->name, h->labels, sep,
                           le, cum);
            }
            char sum[32];
            number(sum, sizeof sum, hist_total(h, -1), fam->seconds);
            const char *lb = h->labels[0] ? "{" : "", *rb = h->labels[0] ? "}" : "";
            out_printf(o, "%s_sum%s%s%s %s\n%s_count%s%s%s %" PRIu64 "\n", fam->name, lb, h->labels,
                       rb, sum, fam->name, lb, h->labels, rb, cum);
        }
    }
}

/* One gauge family over the SKUs that have it. */
static void render_sku_gauge(struct out *o, const struct metrics_sku *s, size_t n, const char *name,
                             const char *help, int which)
{
    out_head(o, name, help, "gauge");
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        int ms = 0; /* v is milliseconds, shown as seconds */
        switch (which) {
        case 0:
            if (!s[i].has_stream)
                continue;
            v = s[i].stream_length;
            break;
        case 1:
            if (!s[i].has_stream)
                continue;
            v = s[i].stream_lag;
            break;
        case 2:
            if (!s[i].has_available)
                continue;
            v = s[i].stock_available;
            break;
        case 3:
            v = s[i].stock_db;
            break;
        case 5:
            v = s[i].sale_open;
            break;
        case 6:
            if (!s[i].has_stream)
                continue;
            v = s[i].oldest_age_ms;
            ms = 1;
            break;
        default:
            if (!s[i].has_available)
                continue;
            v = s[i].stock_db - s[i].stock_available;
            break;
        }
        char num[32];
        if (ms)
            number(num, sizeof num, (uint64_t)(v > 0 ? v : 0) * 1000, 1);
        else
            snprintf(num, sizeof num, "%" PRId64, v);
        if (s[i].parent) /* a stock bucket: sum by (parent) gives the SKU buyers see */
            out_printf(o, "%s{sku=\"%" PRId64 "\",parent=\"%" PRId64 "\"} %s\n", name, s[i].sku,
                       s[i].parent, num);
        else
            out_printf(o, "%s{sku=\"%" PRId64 "\"} %s\n", name, s[i].sku, num);
    }
}

static void render_skus(struct out *o, const struct metrics_sku *s, size_t n)
{
    render_sku_gauge(o, s, n, "seckill_sku_stream_length",
                     "entries in the SKU's order stream (XLEN): reserved orders not yet written "
                     "and acknowledged",
                     0);
    render_sku_gauge(o, s, n, "seckill_sku_stream_lag",
                     "entries of the SKU's order stream the writers' group has not acknowledged: "
                     "XINFO GROUPS pending (delivered, not acknowledged) plus lag (not yet "
                     "delivered)",
                     1);
    render_sku_gauge(o, s, n, "seckill_sku_stock_available",
                     "units buyers can still reserve (Redis); absent while Redis does not hold "
                     "the SKU",
                     2);
    render_sku_gauge(o, s, n, "seckill_sku_stock_db", "units not yet sold (PostgreSQL skus.stock)",
                     3);
    render_sku_gauge(o, s, n, "seckill_sku_inflight_units",
                     "units reserved in Redis and not yet written: skus.stock minus the Redis "
                     "stock (I2; read in that order, so an order written between the two reads "
                     "is never missed); negative means Redis holds more than the database",
                     4);
    render_sku_gauge(o, s, n, "seckill_sku_sale_open",
                     "1 while the SKU's sale window holds (PostgreSQL's clock), else 0", 5);
    render_sku_gauge(o, s, n, "seckill_sku_stream_oldest_age_seconds",
                     "age of the oldest entry of the SKU's order stream (acknowledged entries are "
                     "deleted: the oldest order not yet written), by its id's time; 0 when empty",
                     6);
}

char *metrics_render_skus(const struct metrics_sku *skus, size_t n, const int64_t *sold_out,
                          size_t nsold_out, size_t *len)
{
    struct out o = {.cap = 65536};
    o.p = xmalloc(o.cap);
    for (int i = 0; i < M_COUNT; i++) {
        if (i == 0 || strcmp(info[i].name, info[i - 1].name) != 0)
            out_head(&o, info[i].name, info[i].help, is_gauge(i) ? "gauge" : "counter");
        out_printf(&o, "%s%s%s%s %ld\n", info[i].name, info[i].labels ? "{" : "",
                   info[i].labels ? info[i].labels : "", info[i].labels ? "}" : "",
                   atomic_load_explicit(&counters[i], memory_order_relaxed));
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
        {"seckill_lock_busy_total", "acquisitions that gave up on a busy lock", lm.busy},
        {"seckill_lock_renewed_total", "watchdog renewals", lm.renewed},
        {"seckill_lock_lost_total", "locks found lost while held", lm.lost},
        {"seckill_lock_released_total", "lock releases", lm.released},
        {"seckill_lock_release_refused_total", "releases refused (not the owner)",
         lm.release_refused},
    };
    for (size_t i = 0; i < sizeof locks / sizeof locks[0]; i++) {
        out_head(&o, locks[i].name, locks[i].help, "counter");
        out_printf(&o, "%s %" PRIu64 "\n", locks[i].name, locks[i].v);
    }
    /* In seconds, the base unit (promtool refuses "ms" in a name). */
    char wait_s[32];
    number(wait_s, sizeof wait_s, lm.wait_ms_total * 1000, 1);
    out_head(&o, "seckill_lock_wait_seconds_total", "seconds spent waiting for locks", "counter");
    out_printf(&o, "seckill_lock_wait_seconds_total %s\n", wait_s);
    render_hists(&o);
    if (n > 0)
        render_skus(&o, skus, n);
    out_head(&o, "seckill_sku_sold_out_flag",
             "1 while this instance answers the SKU's orders sold out without asking Redis "
             "(sold_out_flag_ms)",
             "gauge");
    for (size_t i = 0; i < nsold_out; i++)
        out_printf(&o, "seckill_sku_sold_out_flag{sku=\"%" PRId64 "\"} 1\n", sold_out[i]);
    *len = o.n;
    return o.p;
}

char *metrics_render(size_t *len)
{
    return metrics_render_skus(NULL, 0, NULL, 0, len);
}
