#include "http/http_api.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/embedded.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/validate.h"
#include "order/order.h"
#include "order/order_wait.h"
#include "sku/reconcile.h"
#include "sku/sku.h"
#include "store/redis_async.h"

/* How often a closing loop looks whether its reservations in flight ended. */
#define SHUTDOWN_POLL_US 10000

struct http_thread {
    struct http_server *srv;
    struct event_base *base;
    struct evhttp *http;
    struct redis_async *redis;
    struct order_wait *waits; /* durable mode only */
    int closing;              /* shutting down: new orders answer 503 */
    uint64_t rng;             /* made-up idempotency keys */
    pthread_t tid;
    int started;
};

struct http_server {
    const struct cfg *cfg;
    struct workers *workers;
    size_t n;
    struct http_thread *threads;
};

/* ---- replies ----------------------------------------------------------- */

static const char *reason_phrase(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 422:
        return "Unprocessable Entity";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

/* Sends 'text' (JSON, len bytes) as the one reply of req. */
static void reply_text(struct evhttp_request *req, int code, const char *text, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Cache-Control", "no-store");
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        abort();
    /* A HEAD answer carries the headers of the GET answer, never its body. */
    if (len && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
        evbuffer_add(buf, text, len);
        evbuffer_add(buf, "\n", 1);
    }
    evhttp_send_reply(req, code, reason_phrase(code), buf);
    evbuffer_free(buf);
}

/* Sends 'body' (reference stolen) as the one reply of req. */
static void reply_json(struct evhttp_request *req, int code, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text)
        abort();
    reply_text(req, code, text ? text : "", text ? strlen(text) : 0);
    free(text);
    json_decref(body);
}

/* Prometheus text exposition: counts only, nothing secret. */
static void reply_metrics(struct evhttp_request *req)
{
    size_t len;
    char *text = metrics_render(&len);
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        abort();
    evbuffer_add(buf, text, len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", buf);
    evbuffer_free(buf);
    free(text);
}

static void reply_error(struct evhttp_request *req, int code, const char *error, const char *detail)
{
    json_t *o = json_pack("{s:s}", "error", error);
    if (detail)
        json_object_set_new(o, "detail", json_string(detail));
    reply_json(req, code, o);
}

static void reply_unavailable(struct evhttp_request *req)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
    reply_error(req, 503, "unavailable", "a backing store did not answer; try again");
}

/* ---- request helpers --------------------------------------------------- */

/* Copies the body (NUL-terminated) into a fresh buffer.  Returns NULL and
 * replies 400 when it is larger than max_body_bytes. */
static char *take_body(struct evhttp_request *req, const struct cfg *c, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    *len = evbuffer_get_length(in);
    if (*len > (size_t)c->max_body_bytes) {
        char d[96];
        snprintf(d, sizeof d, "body larger than %" PRId64 " bytes", c->max_body_bytes);
        reply_error(req, 400, "invalid_request", d);
        return NULL;
    }
    char *b = malloc(*len + 1);
    if (!b)
        abort();
    evbuffer_copyout(in, b, *len);
    b[*len] = '\0';
    return b;
}

static int require_json(struct evhttp_request *req)
{
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
    if (validate_json_content_type(ct) == 0)
        return 0;
    reply_error(req, 400, "invalid_request", "Content-Type must be application/json");
    return -1;
}

/* ---- blocking jobs ----------------------------------------------------- */

enum job_kind {
    JOB_SKU_VIEW,
    JOB_ADMIN_SKU_VIEW,
    JOB_ORDER_VIEW,
    JOB_SKU_CREATE,
    JOB_SKU_ADJUST,
    JOB_SKU_EXISTS,
    JOB_SKU_RELOAD,
    JOB_HEALTH
};

struct http_job {
    struct job job; /* first: the pool hands us back this pointer */
    enum job_kind kind;
    struct evhttp_request *req;
    int64_t id, delta;
    struct validate_sku spec;
    char reason[501];
    char idem[201]; /* admin deltas: Idempotency-Key, "" none */
    enum sku_result res;
    json_t *out;
};

static void job_run(struct job *j, struct worker_ctx *w)
{
    struct http_job *hj = (struct http_job *)j;
    switch (hj->kind) {
    case JOB_SKU_VIEW:
        hj->res = sku_view(w, hj->id, 0, &hj->out);
        break;
    case JOB_ADMIN_SKU_VIEW:
        hj->res = sku_view(w, hj->id, 1, &hj->out);
        break;
    case JOB_ORDER_VIEW:
        hj->res = order_view(w, hj->id, &hj->out);
        break;
    case JOB_SKU_CREATE:
        hj->res = sku_create(w, &hj->spec, &hj->out);
        break;
    case JOB_SKU_ADJUST:
        hj->res =
            sku_adjust(w, hj->id, hj->delta, hj->reason, hj->idem[0] ? hj->idem : NULL, &hj->out);
        break;
    case JOB_SKU_EXISTS:
        hj->res = sku_exists(w, hj->id);
        if (hj->res == SKU_OK) /* known, not in Redis: restore it now, not at the next pass */
            reconcile_kick();
        break;
    case JOB_SKU_RELOAD:
        hj->res = sku_reload(w, hj->id, &hj->out);
        break;
    case JOB_HEALTH:
        hj->res = sku_health(w, &hj->out);
        break;
    }
}

/* The one place where business outcomes of blocking jobs become HTTP answers. */
static void job_done(struct job *j)
{
    struct http_job *hj = (struct http_job *)j;
    struct evhttp_request *req = hj->req;
    json_t *out = hj->out;
    const char *unknown = hj->kind == JOB_ORDER_VIEW ? "unknown_order" : "unknown_sku";
    switch (hj->res) {
    case SKU_OK:
        if (hj->kind == JOB_SKU_EXISTS) { /* a known SKU that Redis has not loaded */
            evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
            reply_error(req, 503, "unavailable",
                        "this SKU is being restored into Redis from the database; retry shortly");
        } else {
            reply_json(req, hj->kind == JOB_SKU_CREATE ? 201 : 200, out), out = NULL;
        }
        break;
    case SKU_UNKNOWN:
        reply_error(req, 404, unknown, NULL);
        break;
    case SKU_EXISTS:
        if (hj->kind == JOB_SKU_RELOAD)
            reply_error(req, 409, "already_loaded",
                        "Redis holds this SKU, nothing is in flight and it agrees with the "
                        "database");
        else
            reply_error(req, 409, "sku_exists", "a SKU with this id already exists");
        break;
    case SKU_INSUFFICIENT: {
        json_t *o = json_pack("{s:s, s:s}", "error", "insufficient_stock", "detail",
                              "the negative delta is larger than the stock available");
        if (out)
            json_object_update(o, out);
        reply_json(req, 409, o);
        break;
    }
    case SKU_NOT_LOADED:
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        reply_error(req, 503, "unavailable",
                    "the SKU is in the database but Redis did not take it; the service "
                    "restores it by itself, retry shortly");
        break;
    case SKU_IDEM_MISMATCH:
        reply_error(req, 422, "idempotency_key_reused",
                    "this Idempotency-Key was used with a different request");
        break;
    case SKU_UNAVAILABLE:
        if (hj->kind == JOB_HEALTH && out)
            reply_json(req, 503, out), out = NULL;
        else
            reply_unavailable(req);
        break;
    }
    json_decref(out);
    free(hj);
}

static void submit(struct http_thread *th, struct evhttp_request *req, struct http_job *hj)
{
    hj->job.run = job_run;
    hj->job.done = job_done;
    hj->job.base = th->base;
    hj->job.urgent =
        hj->kind != JOB_SKU_VIEW && hj->kind != JOB_ORDER_VIEW && hj->kind != JOB_SKU_EXISTS;
    hj->req = req;
    if (workers_submit(th->srv->workers, &hj->job) != 0) {
        free(hj);
        reply_unavailable(req);
    }
}

static struct http_job *new_job(enum job_kind kind, int64_t id)
{
    struct http_job *hj = calloc(1, sizeof *hj);
    if (!hj)
        abort();
    hj->kind = kind;
    hj->id = id;
    return hj;
}

/* ---- the order path (async Redis, no worker) ----------------------------- */

struct order_call {
    struct http_thread *th;
    struct evhttp_request *req;
    int64_t sku, user, qty;
    int replayed; /* the answer repeats an earlier request's (same Idempotency-Key) */
    char idem[KEYS_IDEM_MAX + 1]; /* the buyer's Idempotency-Key, or one made up for them */
};

/* The order's own answer: 201 confirmed, 202 pending.  The hot answer of a
 * sale, formatted directly: all of it integers and fixed text. */
static void reply_order(struct order_call *oc, int code, int64_t order_id, const char *status)
{
    char body[224];
    int n = snprintf(body, sizeof body,
                     "{\"order_id\":%" PRId64 ",\"status\":\"%s\",\"sku_id\":%" PRId64
                     ",\"user_id\":%" PRId64 ",\"qty\":%" PRId64 "%s}",
                     order_id, status, oc->sku, oc->user, oc->qty,
                     oc->replayed ? ",\"replayed\":true" : "");
    reply_text(oc->req, code, body, (size_t)n);
}

/* 409 for an order Redis reserved and the database refused (its units went back). */
static void reply_rejected(struct order_call *oc, const struct order_decision *d)
{
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:s, s:I, s:I, s:I}", "error", order_rejection_error(d->reason),
        "detail", "the database refused this order; nothing was taken", "order_id",
        (json_int_t)d->order_id, "status", "rejected", "reason", d->reason, "sku_id",
        (json_int_t)oc->sku, "user_id", (json_int_t)oc->user, "qty", (json_int_t)oc->qty);
    if (oc->replayed)
        json_object_set_new(o, "replayed", json_true());
    reply_json(oc->req, 409, o);
}

/* Answers with what is known of an order: durable mode says confirmed 201,
 * rejected 409, pending 202; reserved mode answers 202 and names the state,
 * as it always has.  Frees oc. */
static void reply_decision(struct order_call *oc, const struct order_decision *d)
{
    if (!oc->th->waits) {
        reply_order(oc, 202, d->order_id,
                    d->status == ORDER_CONFIRMED  ? "confirmed"
                    : d->status == ORDER_REJECTED ? "rejected"
                                                  : "pending");
        free(oc);
        return;
    }
    switch (d->status) {
    case ORDER_CONFIRMED:
        metrics_add(M_ORDERS_CONFIRMED, 1);
        reply_order(oc, 201, d->order_id, "confirmed");
        break;
    case ORDER_REJECTED:
        metrics_add(M_ORDERS_REJECTED, 1);
        reply_rejected(oc, d);
        break;
    case ORDER_PENDING:
        reply_order(oc, 202, d->order_id, "pending");
        break;
    }
    free(oc);
}

struct pending_order {
    struct order_call *oc;
    int64_t order_id;
};

/* order_wait's answer: the writer's decision, or NULL when it did not come
 * within order_ack_wait_ms (an honest 202 pending). */
static void on_decided(const struct order_decision *d, void *arg)
{
    struct pending_order *po = arg;
    struct order_decision pending = {.order_id = po->order_id, .status = ORDER_PENDING};
    reply_decision(po->oc, d ? d : &pending);
    free(po);
}

/* Durable mode waits for a pending order's commit; reserved mode answers now. */
static void answer_order(struct order_call *oc, const struct order_decision *d)
{
    struct order_wait *ow = oc->th->waits;
    if (d->status != ORDER_PENDING || !ow) {
        reply_decision(oc, d);
        return;
    }
    struct pending_order *po = malloc(sizeof *po);
    if (!po)
        abort();
    *po = (struct pending_order){oc, d->order_id};
    order_wait_add(ow, d->order_id, d->entry, on_decided, po);
}

/* 503 for a reservation whose outcome is not certain: the connection broke
 * after the script was sent (Redis may have run it), or no reply came in time
 * (the script refuses past its deadline, unless Redis stalled between running
 * it and replying).  The Idempotency-Key (the buyer's, or the one the service
 * made up for this request) finds out. */
static void reply_outcome_unknown(struct order_call *oc, const char *detail)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "error", "unavailable", "detail", detail,
                          "idempotency_key", oc->idem);
    evhttp_add_header(evhttp_request_get_output_headers(oc->req), "Retry-After", "1");
    reply_json(oc->req, 503, o);
}

/* Maps reserve.lua's answer to the buyer's answer, in one switch.  Runs on
 * the loop; owns and frees oc. */
static void on_reserved(redisReply *r, enum redis_async_status st, void *arg)
{
    struct order_call *oc = arg;
    struct evhttp_request *req = oc->req;
    if (st == REDIS_ASYNC_LOST || st == REDIS_ASYNC_TIMEOUT) {
        metrics_add(M_ORDERS_UNAVAILABLE, 1);
        reply_outcome_unknown(oc, st == REDIS_ASYNC_LOST
                                      ? "Redis went away while reserving: retry with this "
                                        "Idempotency-Key to learn whether the order was taken"
                                      : "Redis did not answer in time: the reservation was "
                                        "refused past its deadline unless Redis stalled after "
                                        "taking it; retry with this Idempotency-Key to be sure");
        free(oc);
        return;
    }
    struct order_reply rep;
    order_parse_reply(r, &rep);
    enum order_verdict v = rep.verdict;
    if (v == ORDER_REFUSED_AGAIN) { /* the first refusal, again */
        metrics_add(M_ORDERS_REPLAYED, 1);
        v = rep.again;
        oc->replayed = 1;
    }
    switch (v) {
    case ORDER_RESERVED:
        metrics_add(M_ORDERS_ACCEPTED, 1);
        answer_order(oc, &rep.d);
        return;
    case ORDER_REPLAYED:
        metrics_add(M_ORDERS_REPLAYED, 1);
        oc->replayed = 1;
        answer_order(oc, &rep.d);
        return;
    case ORDER_SOLD_OUT:
        metrics_add(M_ORDERS_SOLD_OUT, 1);
        reply_error(req, 409, "sold_out", oc->replayed ? "sold out (an earlier answer)" : NULL);
        break;
    case ORDER_LIMIT_EXCEEDED:
        metrics_add(M_ORDERS_LIMIT, 1);
        reply_error(req, 409, "limit_exceeded", "this order would exceed the per-user limit");
        break;
    case ORDER_NOT_ACTIVE:
        metrics_add(M_ORDERS_NOT_ACTIVE, 1);
        reply_error(req, 409, "sale_not_active", NULL);
        break;
    case ORDER_IDEM_MISMATCH:
        reply_error(req, 422, "idempotency_key_reused",
                    "this Idempotency-Key was used with a different request");
        break;
    case ORDER_NOT_LOADED:
        /* Unknown to Redis: 404 if PostgreSQL does not know it either, else
         * 503 while the service restores it. */
        submit(oc->th, req, new_job(JOB_SKU_EXISTS, oc->sku));
        break;
    case ORDER_EXPIRED: /* the script ran after we would have given up: it took nothing */
        metrics_add(M_ORDERS_EXPIRED, 1);
        metrics_add(M_ORDERS_UNAVAILABLE, 1);
        reply_unavailable(req);
        break;
    case ORDER_EXHAUSTED:
        log_error("sku %" PRId64 ": the epoch has no order ids left", oc->sku);
        metrics_add(M_ORDERS_UNAVAILABLE, 1);
        reply_unavailable(req);
        break;
    case ORDER_REFUSED_AGAIN:
    case ORDER_FAILED:
        if (r && r->type == REDIS_REPLY_ERROR)
            log_error("reserve.lua: %s", r->str);
        else if (r)
            log_error("reserve.lua: unexpected answer");
        metrics_add(M_ORDERS_UNAVAILABLE, 1);
        reply_unavailable(req); /* not sent, or an error reply: nothing was taken */
        break;
    }
    free(oc);
}

/* xorshift64*, seeded per loop from the kernel: made-up idempotency keys are
 * scoped to their buyer, so they need to be unique, not secret. */
static uint64_t next_random(struct http_thread *th)
{
    uint64_t x = th->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    th->rng = x;
    return x * UINT64_C(0x2545F4914F6CDD1D);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A reserve reply that came after its buyer was told 503: Redis stalled
 * between running the script and replying.  The order is real; its buyer has
 * the Idempotency-Key that finds it.  Counted, so that it is never silent. */
static void on_late_reply(redisReply *r, void *arg)
{
    (void)arg;
    struct order_reply rep;
    order_parse_reply(r, &rep);
    if (rep.verdict != ORDER_RESERVED)
        return;
    metrics_add(M_ORDERS_LATE_RESERVED, 1);
    log_warn("order %" PRId64 " was reserved, but its reply came after the buyer's 503 (Redis "
             "stalled); the Idempotency-Key in that 503 finds it",
             rep.d.order_id);
}

static void handle_order(struct http_thread *th, struct evhttp_request *req, int64_t sku)
{
    const struct cfg *c = th->srv->cfg;
    if (require_json(req) != 0)
        return;
    size_t len;
    char *body = take_body(req, c, &len);
    if (!body)
        return;
    char detail[160];
    int64_t user, qty;
    int bad =
        validate_order_body(body, len, c->max_qty_per_order, &user, &qty, detail, sizeof detail);
    free(body);
    if (bad) {
        metrics_add(M_ORDERS_INVALID, 1);
        reply_error(req, 400, "invalid_request", detail);
        return;
    }
    const char *idem = evhttp_find_header(evhttp_request_get_input_headers(req), "Idempotency-Key");
    if (idem && validate_idempotency_key(idem, (size_t)c->max_idempotency_key_bytes, detail,
                                         sizeof detail) != 0) {
        reply_error(req, 400, "invalid_request", detail);
        return;
    }
    if (!th->redis || th->closing) { /* shutting down */
        reply_unavailable(req);
        return;
    }
    /* Past this instant (Redis clock) the script takes nothing: we answer 503
     * at redis_timeout_ms, so a 503 never hides a reservation. */
    struct order_call *oc = calloc(1, sizeof *oc);
    if (!oc)
        abort();
    *oc = (struct order_call){.th = th, .req = req, .sku = sku, .user = user, .qty = qty};
    /* Without a key of the buyer's, the reservation gets one made up here, so
     * that an answer lost with a broken connection can still be found. */
    if (idem)
        snprintf(oc->idem, sizeof oc->idem, "%s", idem);
    else
        snprintf(oc->idem, sizeof oc->idem, "auto-%016" PRIx64 "%016" PRIx64, next_random(th),
                 next_random(th));
    struct order_reserve_call rc;
    order_reserve_prepare(&rc, sku, user, qty, oc->idem, idem != NULL, c->idempotency_ttl_s,
                          wall_ms() + c->redis_timeout_ms - c->reserve_deadline_margin_ms);
    redis_async_script(th->redis, &script_reserve, ORDER_RESERVE_NKEYS, ORDER_RESERVE_NARGS,
                       rc.argv, NULL, on_reserved, oc);
}

/* ---- admin ------------------------------------------------------------- */

static int require_admin(struct http_thread *th, struct evhttp_request *req)
{
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (validate_bearer(auth, th->srv->cfg->admin_token))
        return 0;
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                      "Bearer realm=\"seckill-admin\"");
    reply_error(req, 401, "unauthorized", "a valid admin bearer token is required");
    return -1;
}

static void handle_sku_create(struct http_thread *th, struct evhttp_request *req)
{
    if (require_json(req) != 0)
        return;
    size_t len;
    char *body = take_body(req, th->srv->cfg, &len);
    if (!body)
        return;
    struct http_job *hj = new_job(JOB_SKU_CREATE, 0);
    char detail[160];
    int bad = validate_sku_body(body, len, &hj->spec, detail, sizeof detail);
    free(body);
    if (bad) {
        free(hj);
        reply_error(req, 400, "invalid_request", detail);
        return;
    }
    submit(th, req, hj);
}

static void handle_sku_adjust(struct http_thread *th, struct evhttp_request *req, int64_t sku)
{
    if (require_json(req) != 0)
        return;
    size_t len;
    char *body = take_body(req, th->srv->cfg, &len);
    if (!body)
        return;
    struct http_job *hj = new_job(JOB_SKU_ADJUST, sku);
    char detail[160];
    const char *idem = evhttp_find_header(evhttp_request_get_input_headers(req), "Idempotency-Key");
    if (idem && validate_idempotency_key(idem, (size_t)th->srv->cfg->max_idempotency_key_bytes,
                                         detail, sizeof detail) != 0) {
        free(body);
        free(hj);
        reply_error(req, 400, "invalid_request", detail);
        return;
    }
    snprintf(hj->idem, sizeof hj->idem, "%s", idem ? idem : "");
    int bad = validate_adjust_body(body, len, &hj->delta, hj->reason, sizeof hj->reason, detail,
                                   sizeof detail);
    free(body);
    if (bad) {
        free(hj);
        reply_error(req, 400, "invalid_request", detail);
        return;
    }
    submit(th, req, hj);
}

/* ---- routing ----------------------------------------------------------- */

/* Splits path into at most 'max' segments; returns the count, or -1 if too many. */
static int split_path(const char *path, char seg[][64], int max)
{
    int n = 0;
    const char *p = path;
    while (*p == '/')
        p++;
    while (*p) {
        size_t len = strcspn(p, "/");
        if (n == max || len >= 64)
            return -1;
        memcpy(seg[n], p, len);
        seg[n][len] = '\0';
        n++;
        p += len;
        while (*p == '/')
            p++;
    }
    return n;
}

static int method_is(struct evhttp_request *req, enum evhttp_cmd_type want)
{
    enum evhttp_cmd_type got = evhttp_request_get_command(req);
    /* HEAD is GET without a body (reply_json leaves it out). */
    if (got == want || (want == EVHTTP_REQ_GET && got == EVHTTP_REQ_HEAD))
        return 1;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                      want == EVHTTP_REQ_GET ? "GET, HEAD" : "POST");
    reply_error(req, 405, "method_not_allowed", NULL);
    return 0;
}

/* Parses an id path segment or answers 400/404. */
static int path_id(struct evhttp_request *req, const char *s, int64_t *id, const char *what)
{
    if (validate_id_segment(s, strlen(s), id) == 0)
        return 0;
    char d[96];
    snprintf(d, sizeof d, "%s must be an integer between 1 and 2^63-1", what);
    reply_error(req, 400, "invalid_request", d);
    return -1;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct http_thread *th = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    char seg[6][64];
    int n = path ? split_path(path, seg, 6) : -1;
    int64_t id;
#define IS(i, s) (strcmp(seg[i], s) == 0)
    if (n == 1 && IS(0, "metrics")) {
        if (method_is(req, EVHTTP_REQ_GET))
            reply_metrics(req);
    } else if (n == 1 && IS(0, "healthz")) {
        if (method_is(req, EVHTTP_REQ_GET))
            submit(th, req, new_job(JOB_HEALTH, 0));
    } else if (n >= 3 && IS(0, "api") && IS(1, "v1")) {
        if (n == 5 && IS(2, "skus") && IS(4, "orders")) {
            if (method_is(req, EVHTTP_REQ_POST) && path_id(req, seg[3], &id, "sku_id") == 0)
                handle_order(th, req, id);
        } else if (n == 4 && IS(2, "skus")) {
            if (method_is(req, EVHTTP_REQ_GET) && path_id(req, seg[3], &id, "sku_id") == 0)
                submit(th, req, new_job(JOB_SKU_VIEW, id));
        } else if (n == 4 && IS(2, "orders")) {
            if (method_is(req, EVHTTP_REQ_GET) && path_id(req, seg[3], &id, "order_id") == 0)
                submit(th, req, new_job(JOB_ORDER_VIEW, id));
        } else {
            reply_error(req, 404, "not_found", NULL);
        }
    } else if (n >= 3 && IS(0, "admin") && IS(1, "v1") && IS(2, "skus")) {
        if (require_admin(th, req) != 0)
            return;
        if (n == 3) {
            if (method_is(req, EVHTTP_REQ_POST))
                handle_sku_create(th, req);
        } else if (n == 4) {
            if (method_is(req, EVHTTP_REQ_GET) && path_id(req, seg[3], &id, "sku_id") == 0)
                submit(th, req, new_job(JOB_ADMIN_SKU_VIEW, id));
        } else if (n == 5 && IS(4, "reload")) {
            if (method_is(req, EVHTTP_REQ_POST) && path_id(req, seg[3], &id, "sku_id") == 0)
                submit(th, req, new_job(JOB_SKU_RELOAD, id));
        } else if (n == 5 && IS(4, "stock-adjustments")) {
            if (method_is(req, EVHTTP_REQ_POST) && path_id(req, seg[3], &id, "sku_id") == 0)
                handle_sku_adjust(th, req, id);
        } else {
            reply_error(req, 404, "not_found", NULL);
        }
    } else {
        reply_error(req, 404, "not_found", NULL);
    }
#undef IS
}

/* ---- threads ----------------------------------------------------------- */

static void *loop_main(void *arg)
{
    struct http_thread *th = arg;
    event_base_loop(th->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* Opens the listening socket on "host:port" with our own backlog (libevent's
 * default of 128 overflows when a sale opens thousands of connections at
 * once, and the overflow retries only after a second).  Returns the
 * non-blocking socket, or -1 with err set. */
static evutil_socket_t listen_on(const char *addr, int backlog, char *err, size_t errlen)
{
    const char *colon = strrchr(addr, ':');
    char host[256];
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host || !colon[1]) {
        snprintf(err, errlen, "http_addr must be host:port, not \"%s\"", addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                    .ai_socktype = SOCK_STREAM,
                                    .ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_NUMERICSERV};
    struct evutil_addrinfo *ai = NULL;
    if (evutil_getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai) {
        snprintf(err, errlen, "http_addr \"%s\" does not resolve", addr);
        return -1;
    }
    evutil_socket_t fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    int ok = fd >= 0 && evutil_make_listen_socket_reuseable(fd) == 0 &&
             bind(fd, ai->ai_addr, (socklen_t)ai->ai_addrlen) == 0 && listen(fd, backlog) == 0 &&
             evutil_make_socket_nonblocking(fd) == 0 && evutil_make_socket_closeonexec(fd) == 0;
    evutil_freeaddrinfo(ai);
    if (!ok) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(errno));
        if (fd >= 0)
            evutil_closesocket(fd);
        return -1;
    }
    return fd;
}

static int thread_init(struct http_thread *th, struct http_server *s, char *err, size_t errlen)
{
    const struct cfg *c = s->cfg;
    th->srv = s;
    if (getentropy(&th->rng, sizeof th->rng) != 0 || th->rng == 0)
        th->rng = (uint64_t)time(NULL) * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)(uintptr_t)th;
    th->base = event_base_new();
    th->http = th->base ? evhttp_new(th->base) : NULL;
    if (!th->http) {
        snprintf(err, errlen, "cannot create the HTTP event loop");
        return -1;
    }
    /* libevent's own limits sit above ours so that our 400 answers with a JSON
     * body; beyond them libevent closes or answers 413 without reading more. */
    evhttp_set_max_body_size(th->http, (ev_ssize_t)c->max_body_bytes * 4);
    evhttp_set_max_headers_size(th->http, (ev_ssize_t)c->max_header_bytes);
    evhttp_set_timeout(th->http, (int)c->http_timeout_s);
    evhttp_set_allowed_methods(th->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                             EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(th->http, on_request, th);
    th->redis = redis_async_new(th->base, c, err, errlen);
    if (th->redis)
        redis_async_on_late(th->redis, on_late_reply, th);
    if (th->redis && strcmp(c->order_ack, "durable") == 0)
        th->waits = order_wait_new(th->base, c, err, errlen);
    return th->redis && (th->waits || strcmp(c->order_ack, "durable") != 0) ? 0 : -1;
}

struct http_server *http_server_start(const struct cfg *c, struct workers *ws, char *err,
                                      size_t errlen)
{
    evutil_socket_t fd = listen_on(c->http_addr, (int)c->http_backlog, err, errlen);
    if (fd < 0)
        return NULL;
    struct http_server *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->cfg = c;
    s->workers = ws;
    s->n = (size_t)c->http_threads;
    s->threads = calloc(s->n, sizeof *s->threads);
    if (!s->threads)
        abort();
    for (size_t i = 0; i < s->n; i++) {
        struct http_thread *th = &s->threads[i];
        if (thread_init(th, s, err, errlen) != 0)
            goto fail;
        /* Every loop accepts on the one socket; each evhttp closes its own copy. */
        evutil_socket_t mine = i + 1 < s->n ? dup(fd) : fd;
        if (mine < 0 || evhttp_accept_socket(th->http, mine) != 0) {
            snprintf(err, errlen, "cannot share the listening socket");
            if (mine >= 0)
                evutil_closesocket(mine);
            if (mine == fd)
                fd = -1;
            goto fail;
        }
        if (mine == fd)
            fd = -1; /* handed over to the last loop */
    }
    for (size_t i = 0; i < s->n; i++) {
        if (pthread_create(&s->threads[i].tid, NULL, loop_main, &s->threads[i]) != 0) {
            snprintf(err, errlen, "cannot start HTTP thread");
            goto fail;
        }
        s->threads[i].started = 1;
    }
    return s;
fail:
    if (fd >= 0)
        evutil_closesocket(fd);
    http_server_stop(s);
    return NULL;
}

/* Last step of a loop: buyers still waiting for a commit learn that their
 * order is pending, the Redis clients go, and the loop exits. */
static void close_loop(struct http_thread *th)
{
    struct redis_async *ra = th->redis;
    th->redis = NULL;
    redis_async_free(ra);
    struct order_wait *ow = th->waits;
    th->waits = NULL;
    order_wait_free(ow);
    event_base_loopexit(th->base, NULL);
}

/* While the loop shuts down, reservations already sent get their real answer
 * (each is bounded by its own redis_timeout_ms timer): answering 503 to one
 * the script may still take would break "a 503 took nothing". */
static void drain_tick(evutil_socket_t fd, short what, void *arg)
{
    struct http_thread *th = arg;
    (void)fd;
    (void)what;
    if (redis_async_pending(th->redis) == 0) {
        close_loop(th);
        return;
    }
    struct timeval tick = {0, SHUTDOWN_POLL_US};
    if (event_base_once(th->base, -1, EV_TIMEOUT, drain_tick, th, &tick) != 0)
        close_loop(th);
}

/* Runs on the loop's own thread: from now on new orders answer 503 at once. */
static void shutdown_on_loop(evutil_socket_t fd, short what, void *arg)
{
    struct http_thread *th = arg;
    th->closing = 1;
    drain_tick(fd, what, arg);
}

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    struct timeval now = {0, 0};
    for (size_t i = 0; i < s->n; i++)
        if (s->threads[i].started && event_base_once(s->threads[i].base, -1, EV_TIMEOUT,
                                                     shutdown_on_loop, &s->threads[i], &now) != 0)
            event_base_loopexit(s->threads[i].base, NULL);
    for (size_t i = 0; i < s->n; i++) {
        struct http_thread *th = &s->threads[i];
        if (th->started)
            pthread_join(th->tid, NULL);
        redis_async_free(th->redis); /* only if the loop never ran */
        th->redis = NULL;
        order_wait_free(th->waits);
        th->waits = NULL;
        /* Last: frees the connections and any request nobody answers any more. */
        if (th->http)
            evhttp_free(th->http);
        if (th->base)
            event_base_free(th->base);
    }
    free(s->threads);
    free(s);
}
