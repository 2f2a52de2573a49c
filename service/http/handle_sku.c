#include "http/handle_sku.h"

#include <event2/event.h>
#include <event2/event_struct.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/validate.h"
#include "order/soldout.h"
#include "sku/sku.h"
#include "sku/sku_pages.h"
#include "store/redis_functions.h"

enum sku_op {
    OP_VIEW,
    OP_VIEW_ADMIN,
    OP_CREATE,
    OP_ADJUST,
    OP_RELOAD,
    OP_WINDOW,
    OP_LIST,
    OP_SALE
};

/* One blocking SKU operation: run on a worker, answered on the loop. */
struct sku_job {
    struct job job; /* first: the pool hands back this pointer */
    struct http_req req;
    enum sku_op op;
    int64_t id, delta;    /* OP_WINDOW: delta is the payment window */
    int64_t after, limit; /* OP_LIST, OP_SALE: the page */
    struct validate_sku spec;
    char reason[501];
    char idem[201]; /* adjustments: the Idempotency-Key, "" for none */
    enum sku_result res;
    json_t *out;
};

static void job_run(struct job *j, struct worker_ctx *w)
{
    struct sku_job *sj = (struct sku_job *)j;
    switch (sj->op) {
    case OP_VIEW:
    case OP_VIEW_ADMIN:
        sj->res = sku_view(w, sj->id, sj->op == OP_VIEW_ADMIN, &sj->out);
        break;
    case OP_CREATE:
        sj->res = sku_create(w, &sj->spec, &sj->out);
        break;
    case OP_ADJUST:
        sj->res =
            sku_adjust(w, sj->id, sj->delta, sj->reason, sj->idem[0] ? sj->idem : NULL, &sj->out);
        break;
    case OP_RELOAD:
        sj->res = sku_reload(w, sj->id, &sj->out);
        break;
    case OP_WINDOW:
        sj->res = sku_set_window(w, sj->id, sj->delta, &sj->out);
        break;
    case OP_LIST:
        sj->res = sku_list_page(w, sj->after, sj->limit, &sj->out);
        break;
    case OP_SALE:
        sj->res = sku_sale_page(w, sj->after, sj->limit, &sj->out);
        break;
    }
}

/* soldout_each's callback: marks the sale status item of a flagged SKU. */
static void mark_flagged(int64_t sku, void *arg)
{
    json_t *item;
    size_t i;
    json_array_foreach((json_t *)arg, i, item)
    {
        if (json_integer_value(json_object_get(item, "id")) == sku)
            json_object_set_new(item, "sold_out_flag", json_true());
    }
}

/* This process's own sold-out flags (order/soldout.h) on the sale status:
 * the SKUs it answers sold out without asking Redis, for sold_out_flag_ms. */
static void add_sold_out_flags(const struct http_req *r, json_t *out)
{
    json_t *items = json_object_get(out, "skus");
    json_t *item;
    size_t i;
    json_array_foreach(items, i, item)
    {
        json_object_set_new(item, "sold_out_flag", json_false());
    }
    if (CFG_LIVE(http_loop_cfg(r->loop), sold_out_flag_ms) > 0) /* reloadable */
        (void)soldout_each(soldout_shared(), clock_mono_ms(), mark_flagged, items);
}

/* The one place where SKU outcomes become HTTP answers. */
static void job_done(struct job *j)
{
    struct sku_job *sj = (struct sku_job *)j;
    const struct http_req *r = &sj->req;
    json_t *out = sj->out;
    if (j->late) /* never ran: its request's deadline passed in the queue */
        sj->res = SKU_UNAVAILABLE;
    switch (sj->res) {
    case SKU_OK:
        if (sj->op == OP_ADJUST || sj->op == OP_RELOAD) /* stock may be back: sell it here now */
            soldout_clear(soldout_shared(), sj->id);
        if (sj->op == OP_SALE)
            add_sold_out_flags(r, out);
        http_reply_json(r, sj->op == OP_CREATE ? 201 : 200, out), out = NULL;
        break;
    case SKU_UNKNOWN:
        http_reply_error(r, 404, "unknown_sku", NULL);
        break;
    case SKU_EXISTS:
        if (sj->op == OP_RELOAD)
            http_reply_error(r, 409, "already_loaded",
                             "Redis holds this SKU, nothing is in flight and it agrees with the "
                             "database");
        else
            http_reply_error(r, 409, "sku_exists", "a SKU with this id already exists");
        break;
    case SKU_INSUFFICIENT: {
        json_t *o = json_pack("{s:s, s:s}", "error", "insufficient_stock", "detail",
                              "the negative delta is larger than the stock available");
        if (out)
            json_object_update(o, out);
        http_reply_json(r, 409, o);
        break;
    }
    case SKU_NOT_LOADED:
        http_add_header(r, "Retry-After", "1");
        http_reply_error(r, 503, "unavailable",
                         "the SKU is in the database but Redis did not take it; the service "
                         "restores it by itself, retry shortly");
        break;
    case SKU_IDEM_MISMATCH:
        http_reply_error(r, 422, "idempotency_key_reused",
                         "this Idempotency-Key was used with a different request");
        break;
    case SKU_STORE_FULL:
        http_reply_store_full(r, NULL);
        break;
    case SKU_NOT_LOADED_FULL:
        http_reply_store_full(r, "the SKU is in the database, but Redis is at its maxmemory and "
                                 "did not take it; the service loads it by itself once Redis "
                                 "has room");
        break;
    case SKU_UNAVAILABLE:
        http_reply_unavailable(r);
        break;
    }
    json_decref(out);
    free(sj);
}

static struct sku_job *new_job(const struct http_req *r, enum sku_op op, int64_t id)
{
    struct sku_job *sj = xcalloc(1, sizeof *sj);
    sj->req = *r;
    sj->op = op;
    sj->id = id;
    sj->job.run = job_run;
    sj->job.done = job_done;
    return sj;
}

/* Buyer lookups wait behind admin jobs: a flood of them must not starve
 * operators. */
static void submit(struct sku_job *sj)
{
    if (http_submit(&sj->req, &sj->job, sj->op != OP_VIEW) != 0)
        free(sj);
}

void handle_sku_get(struct http_req *r, int64_t sku)
{
    submit(new_job(r, OP_VIEW, sku));
}

void handle_sku_get_admin(struct http_req *r, int64_t sku)
{
    submit(new_job(r, OP_VIEW_ADMIN, sku));
}

void handle_sku_reload(struct http_req *r, int64_t sku)
{
    submit(new_job(r, OP_RELOAD, sku));
}

/* A paged view: the query's after and limit checked (400 otherwise). */
static void submit_page(struct http_req *r, enum sku_op op, int64_t default_limit,
                        int64_t max_limit)
{
    struct sku_job *sj = new_job(r, op, 0);
    char detail[160];
    if (validate_page_query(http_query(r), default_limit, max_limit, &sj->after, &sj->limit, detail,
                            sizeof detail) != 0) {
        free(sj);
        http_reply_error(r, 400, "invalid_request", detail);
        return;
    }
    submit(sj);
}

void handle_sku_list(struct http_req *r, int64_t unused)
{
    (void)unused;
    submit_page(r, OP_LIST, SKU_LIST_PAGE_DEFAULT, SKU_LIST_PAGE_MAX);
}

void handle_sku_sale(struct http_req *r, int64_t unused)
{
    (void)unused;
    submit_page(r, OP_SALE, SKU_SALE_PAGE_DEFAULT, SKU_SALE_PAGE_MAX);
}

/* ---- GET /healthz: the probe threads' latest result, at once -------------- */

/* Not on the worker pool and never waiting on a store: slow jobs filling the
 * pool, or a scrape storm, must not hold up the load balancer's checks. */
void handle_sku_health(struct http_req *r, int64_t unused)
{
    (void)unused;
    struct health_report rep[HEALTH_STORES];
    http_health_read(r, rep);
    const struct health_report *rd = &rep[HEALTH_REDIS], *pg = &rep[HEALTH_POSTGRES];
    /* A cluster with a master down still sells the SKUs of the others: a
     * load balancer must not take the instance out for it. */
    int redis_ok = rd->probed && rd->up > 0, pg_ok = pg->probed && pg->up > 0;
    const char *redis = !redis_ok ? "down" : rd->total == rd->up ? "ok" : "degraded";
    json_t *o = json_pack("{s:s, s:s, s:s}", "status", redis_ok && pg_ok ? "ok" : "unavailable",
                          "redis", redis, "postgres", pg_ok ? "ok" : "down");
    if (rd->probed && rd->cluster)
        json_object_set_new(o, "redis_masters_down", json_integer(rd->total - rd->up));
    /* Without its functions Redis answers but runs nothing of the service. */
    enum rlock_library_state lib = redis_functions_state();
    if (lib != RLOCK_LIBRARY_CURRENT)
        json_object_set_new(o, "redis_functions", json_string(redis_functions_state_str(lib)));
    int lib_ok = lib != RLOCK_LIBRARY_MISSING;
    if (!lib_ok)
        json_object_set_new(o, "status", json_string("unavailable"));
    if (!rd->probed || !pg->probed) {
        const struct cfg *c = http_loop_cfg(r->loop);
        char d[200];
        snprintf(d, sizeof d,
                 "%s%s%s did not answer a probe within health_timeout_ms (%" PRId64
                 " ms) in the last %" PRId64 " ms",
                 rd->probed ? "" : "redis", !rd->probed && !pg->probed ? " and " : "",
                 pg->probed ? "" : "postgres", c->health_timeout_ms,
                 c->health_probe_interval_ms + c->health_timeout_ms);
        json_object_set_new(o, "detail", json_string(d));
    } else if (!redis_ok || !pg_ok) {
        /* the probe's own wait (health_timeout_ms) ended first, or the store
         * refused: either way it did not answer in time */
        char d[160];
        snprintf(d, sizeof d, "%s%s%s did not answer in time or refused the probe",
                 redis_ok ? "" : "redis", !redis_ok && !pg_ok ? " and " : "",
                 pg_ok ? "" : "postgres");
        json_object_set_new(o, "detail", json_string(d));
    } else if (!lib_ok) {
        json_object_set_new(o, "detail",
                            json_string("redis lost the service's functions: seckilld migrate, or "
                                        "redis_functions_url, loads them again"));
    }
    http_reply_json(r, redis_ok && pg_ok && lib_ok ? 200 : 503, o);
}

/* Checks a job's JSON body into sj (a validate_*_body); on a bad one returns
 * non-zero with the reason in detail. */
typedef int body_check_fn(struct sku_job *sj, const struct http_req *r, const char *body,
                          size_t len, char *detail, size_t detlen);

/* The opening of every admin write: r's JSON body checked by 'check' into a
 * new job of 'op' on 'id'.  Returns the job, for submit(); NULL once r is
 * answered (400: no JSON body, or one 'check' refused). */
static struct sku_job *job_with_body(struct http_req *r, enum sku_op op, int64_t id,
                                     body_check_fn *check)
{
    size_t len;
    char *body = http_take_json(r, &len);
    if (!body)
        return NULL;
    struct sku_job *sj = new_job(r, op, id);
    char detail[160];
    int bad = check(sj, r, body, len, detail, sizeof detail);
    free(body);
    if (bad) {
        free(sj);
        http_reply_error(r, 400, "invalid_request", detail);
        return NULL;
    }
    return sj;
}

static int check_create(struct sku_job *sj, const struct http_req *r, const char *body, size_t len,
                        char *detail, size_t detlen)
{
    (void)r;
    return validate_sku_body(body, len, &sj->spec, detail, detlen);
}

void handle_sku_create(struct http_req *r, int64_t unused)
{
    (void)unused;
    struct sku_job *sj = job_with_body(r, OP_CREATE, 0, check_create);
    if (sj)
        submit(sj);
}

/* The Idempotency-Key first, then the body. */
static int check_adjust(struct sku_job *sj, const struct http_req *r, const char *body, size_t len,
                        char *detail, size_t detlen)
{
    const struct cfg *c = http_loop_cfg(r->loop);
    const char *idem = http_header(r, "Idempotency-Key");
    if (idem &&
        validate_idempotency_key(idem, (size_t)c->max_idempotency_key_bytes, detail, detlen) != 0)
        return -1;
    snprintf(sj->idem, sizeof sj->idem, "%s", idem ? idem : "");
    return validate_adjust_body(body, len, &sj->delta, sj->reason, sizeof sj->reason, detail,
                                detlen);
}

void handle_sku_adjust(struct http_req *r, int64_t sku)
{
    struct sku_job *sj = job_with_body(r, OP_ADJUST, sku, check_adjust);
    if (sj)
        submit(sj);
}

static int check_window(struct sku_job *sj, const struct http_req *r, const char *body, size_t len,
                        char *detail, size_t detlen)
{
    (void)r;
    return validate_window_body(body, len, &sj->delta, detail, detlen);
}

void handle_sku_update(struct http_req *r, int64_t sku)
{
    struct sku_job *sj = job_with_body(r, OP_WINDOW, sku, check_window);
    if (sj)
        submit(sj);
}
