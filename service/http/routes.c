#include "http/routes.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/metrics.h"
#include "core/validate.h"
#include "http/handle_metrics.h"
#include "http/handle_order.h"
#include "http/handle_sku.h"
#include "http/limits.h"

/* What every route can answer besides its own. */
#define ANSWER_405                                                                                 \
    {                                                                                              \
        405, "method_not_allowed"                                                                  \
    }
#define ANSWER_BAD                                                                                 \
    {                                                                                              \
        400, "invalid_request"                                                                     \
    }
#define ANSWER_401                                                                                 \
    {                                                                                              \
        401, "unauthorized"                                                                        \
    }
#define ANSWER_503                                                                                 \
    {                                                                                              \
        503, "unavailable"                                                                         \
    }
#define ANSWER_429                                                                                 \
    {                                                                                              \
        429, "rate_limited"                                                                        \
    }
#define ANSWERS_END                                                                                \
    {                                                                                              \
        0, NULL                                                                                    \
    }

static const struct http_answer metrics_answers[] = {{200, NULL}, ANSWER_405, ANSWERS_END};

static const struct http_answer health_answers[] = {
    {200, NULL},
    {503, NULL}, /* the health body names what is down */
    ANSWER_503,  /* the service is stopping */
    ANSWER_405,
    ANSWERS_END};

static const struct http_answer place_order_answers[] = {
    {201, NULL},                     /* durable: committed */
    {202, NULL},                     /* pending; or any state in reserved mode */
    ANSWER_BAD,                      /* id, Content-Type, body, Idempotency-Key */
    ANSWER_401,                      /* no valid buyer token */
    {403, "forbidden"},              /* the body's user_id is not the token's buyer */
    {404, "unknown_sku"},            /* neither Redis nor PostgreSQL knows it */
    {409, "sold_out"},               /* also a rejected order (insufficient_stock) */
    {409, "limit_exceeded"},         /* also a rejected order (limit_exceeded) */
    {409, "sale_not_active"},        /* outside the sale window */
    {409, "order_rejected"},         /* a rejected order for another reason */
    {409, "order_cancelled"},        /* its buyer cancelled it before it was written */
    {422, "idempotency_key_reused"}, /* the key was used with another body */
    ANSWER_429,                      /* the buyer's bucket on the SKU, or the address's */
    ANSWER_503,                      /* nothing taken, being restored, or outcome open */
    {503, "store_full"},             /* Redis at its maxmemory: nothing taken */
    ANSWER_405,
    ANSWERS_END};

static const struct http_answer get_sku_answers[] = {
    {200, NULL}, ANSWER_BAD, {404, "unknown_sku"}, ANSWER_429, ANSWER_503, ANSWER_405, ANSWERS_END};

static const struct http_answer get_order_answers[] = {
    {200, NULL}, ANSWER_BAD, ANSWER_401, {404, "unknown_order"}, /* also another buyer's */
    ANSWER_429,  ANSWER_503, ANSWER_405, ANSWERS_END};

static const struct http_answer create_sku_answers[] = {
    {201, NULL}, ANSWER_BAD, ANSWER_401,          {409, "sku_exists"},
    ANSWER_429,  ANSWER_503, {503, "store_full"}, /* committed; Redis at its maxmemory did not take
                                                     it */
    ANSWER_405,  ANSWERS_END};

static const struct http_answer get_sku_admin_answers[] = {
    {200, NULL}, ANSWER_BAD, ANSWER_401, {404, "unknown_sku"},
    ANSWER_429,  ANSWER_503, ANSWER_405, ANSWERS_END};

static const struct http_answer reload_sku_answers[] = {
    {200, NULL}, ANSWER_BAD, ANSWER_401, {404, "unknown_sku"}, {409, "already_loaded"},
    ANSWER_429,  ANSWER_503, ANSWER_405, ANSWERS_END};

static const struct http_answer adjust_stock_answers[] = {{200, NULL},
                                                          ANSWER_BAD,
                                                          ANSWER_401,
                                                          {404, "unknown_sku"},
                                                          {409, "insufficient_stock"},
                                                          {422, "idempotency_key_reused"},
                                                          ANSWER_429,
                                                          ANSWER_503,
                                                          {503, "store_full"},
                                                          ANSWER_405,
                                                          ANSWERS_END};

static const struct http_answer update_sku_answers[] = {
    {200, NULL}, ANSWER_BAD, ANSWER_401, {404, "unknown_sku"},
    ANSWER_429,  ANSWER_503, ANSWER_405, ANSWERS_END};

static const struct http_answer cancel_order_answers[] = {
    {200, NULL},                    /* cancelled now, or already ("replayed") */
    ANSWER_BAD,                     /* id, or a body */
    ANSWER_401,                     /* no valid buyer token */
    {404, "unknown_order"},         /* also another buyer's */
    {409, "order_not_cancellable"}, /* paid, expired or rejected: "status" says which */
    ANSWER_429,
    ANSWER_503,
    ANSWER_405,
    ANSWERS_END};

static const struct http_answer pay_order_answers[] = {
    {200, NULL},                   /* paid now, or already with this payment_ref ("replayed") */
    ANSWER_BAD,                    /* id, Content-Type, body */
    ANSWER_401,                    /* the admin token */
    {404, "unknown_order"},        /* no such order */
    {409, "order_not_payable"},    /* not confirmed, or its window passed: "status" says */
    {409, "payment_ref_conflict"}, /* paid under another ref, or the ref paid another order */
    ANSWER_429,
    ANSWER_503,
    ANSWER_405,
    ANSWERS_END};

static const struct http_answer list_answers[] = {{200, NULL}, ANSWER_BAD, /* after, limit */
                                                  ANSWER_401,  ANSWER_429, ANSWER_503,
                                                  ANSWER_405,  ANSWERS_END};

static const struct http_answer get_order_admin_answers[] = {
    {200, NULL}, ANSWER_BAD, ANSWER_401, {404, "unknown_order"},
    ANSWER_429,  ANSWER_503, ANSWER_405, ANSWERS_END};

static const struct http_answer cancel_order_admin_answers[] = {
    {200, NULL},                    /* cancelled now, or already ("replayed") */
    ANSWER_BAD,                     /* id, or a body */
    ANSWER_401,                     /* the admin token */
    {404, "unknown_order"},         /* no such order */
    {409, "order_not_cancellable"}, /* paid, expired or rejected: "status" says which */
    ANSWER_429,
    ANSWER_503,
    ANSWER_405,
    ANSWERS_END};

const struct http_answer routes_unrouted_answers[] = {
    {404, "not_found"},
    ANSWER_401, /* anything under /admin/ needs the token first */
    ANSWER_429, /* ... and its address must have failed attempts left */
    ANSWERS_END};

#define ROUTE(m, p) .method = m, .path = p, .label = m " " p

/* The order route first: it is most of a sale's traffic. */
const struct routes_route routes_table[] = {
    {ROUTE("POST", "/api/v1/skus/{sku_id}/orders"), .operation = "placeOrder", .buyer = 1,
     .addr_limited = 1, .listeners = ROUTES_PUBLIC, .handle = handle_order_place,
     .answers = place_order_answers},
    {ROUTE("GET", "/api/v1/skus/{sku_id}"), .operation = "getSku", .addr_limited = 1,
     .listeners = ROUTES_PUBLIC, .handle = handle_sku_get, .answers = get_sku_answers},
    {ROUTE("GET", "/api/v1/orders/{order_id}"), .operation = "getOrder", .buyer = 1,
     .addr_limited = 1, .listeners = ROUTES_PUBLIC, .handle = handle_order_get,
     .answers = get_order_answers},
    {ROUTE("POST", "/api/v1/orders/{order_id}/cancel"), .operation = "cancelOrder", .buyer = 1,
     .addr_limited = 1, .listeners = ROUTES_PUBLIC, .handle = handle_order_cancel,
     .answers = cancel_order_answers},
    {ROUTE("POST", "/admin/v1/orders/{order_id}/payment"), .operation = "payOrder", .admin = 1,
     .listeners = ROUTES_INTERNAL, .payment = 1, .handle = handle_order_pay,
     .answers = pay_order_answers},
    {ROUTE("GET", "/admin/v1/orders/{order_id}"), .operation = "getOrderAdmin", .admin = 1,
     .listeners = ROUTES_INTERNAL, .handle = handle_order_get_admin,
     .answers = get_order_admin_answers},
    {ROUTE("POST", "/admin/v1/orders/{order_id}/cancel"), .operation = "cancelOrderAdmin",
     .admin = 1, .listeners = ROUTES_INTERNAL, .handle = handle_order_cancel_admin,
     .answers = cancel_order_admin_answers},
    {ROUTE("POST", "/admin/v1/skus"), .operation = "createSku", .admin = 1,
     .listeners = ROUTES_INTERNAL, .handle = handle_sku_create, .answers = create_sku_answers},
    {ROUTE("GET", "/admin/v1/skus"), .operation = "listSkus", .admin = 1,
     .listeners = ROUTES_INTERNAL, .handle = handle_sku_list, .answers = list_answers},
    {ROUTE("GET", "/admin/v1/sale"), .operation = "getSaleStatus", .admin = 1,
     .listeners = ROUTES_INTERNAL, .handle = handle_sku_sale, .answers = list_answers},
    {ROUTE("GET", "/admin/v1/skus/{sku_id}"), .operation = "getSkuAdmin", .admin = 1,
     .listeners = ROUTES_INTERNAL, .handle = handle_sku_get_admin,
     .answers = get_sku_admin_answers},
    {ROUTE("PATCH", "/admin/v1/skus/{sku_id}"), .operation = "updateSku", .admin = 1,
     .listeners = ROUTES_INTERNAL, .handle = handle_sku_update, .answers = update_sku_answers},
    {ROUTE("POST", "/admin/v1/skus/{sku_id}/reload"), .operation = "reloadSku", .admin = 1,
     .listeners = ROUTES_INTERNAL, .handle = handle_sku_reload, .answers = reload_sku_answers},
    {ROUTE("POST", "/admin/v1/skus/{sku_id}/stock-adjustments"), .operation = "adjustStock",
     .admin = 1, .listeners = ROUTES_INTERNAL, .handle = handle_sku_adjust,
     .answers = adjust_stock_answers},
    {ROUTE("GET", "/healthz"), .operation = "getHealth",
     .listeners = ROUTES_PUBLIC | ROUTES_INTERNAL, .handle = handle_sku_health,
     .answers = health_answers},
    {ROUTE("GET", "/metrics"), .operation = "getMetrics", .listeners = ROUTES_INTERNAL,
     .handle = handle_metrics_get, .answers = metrics_answers},
};
const size_t routes_count = sizeof routes_table / sizeof routes_table[0];

/* ---- latency histograms, one per route and status code ---------------- */

/* The most answers one route lists (the order route's 14 and the end). */
#define ROUTE_ANSWERS_MAX 24
/* route_hists[i][j]: the histogram of routes_table[i].answers[j], shared by
 * the answers of one status (route="<operationId>",code="<status>"). */
static struct metrics_hist
    *route_hists[sizeof routes_table / sizeof routes_table[0]][ROUTE_ANSWERS_MAX];
static struct metrics_hist *unrouted_hists[ROUTE_ANSWERS_MAX]; /* route="unrouted" */
static pthread_once_t hists_once = PTHREAD_ONCE_INIT;

static void hists_for(struct metrics_hist **out, const char *route, const struct http_answer *a)
{
    for (size_t j = 0; a[j].status; j++) {
        if (j + 1 >= ROUTE_ANSWERS_MAX)
            abort(); /* a route table edit outgrew ROUTE_ANSWERS_MAX: raise it */
        char labels[METRICS_LABELS_MAX];
        snprintf(labels, sizeof labels, "route=\"%s\",code=\"%d\"", route, a[j].status);
        out[j] = metrics_hist_get(MF_HTTP_REQUEST, labels);
    }
}

/* Every series exists before the first answer: a scrape shows them all at 0. */
static void hists_make(void)
{
    for (size_t i = 0; i < routes_count; i++)
        hists_for(route_hists[i], routes_table[i].operation, routes_table[i].answers);
    hists_for(unrouted_hists, "unrouted", routes_unrouted_answers);
}

/* One segment of a path: its bytes, inside the path. */
struct segment {
    const char *at;
    size_t len;
};

/* Splits path into at most ROUTES_MAX_SEGMENTS segments (empty ones dropped);
 * returns the count, or -1 if there are more or one is too long. */
static int split_path(const char *path, struct segment seg[ROUTES_MAX_SEGMENTS])
{
    int n = 0;
    const char *p = path;
    while (*p == '/')
        p++;
    while (*p) {
        size_t len = strcspn(p, "/");
        if (n == ROUTES_MAX_SEGMENTS || len >= ROUTES_SEGMENT_BYTES)
            return -1;
        seg[n].at = p;
        seg[n].len = len;
        n++;
        p += len;
        while (*p == '/')
            p++;
    }
    return n;
}

/* Whether the n segments match route t's template; *param gets the index of
 * its "{…}" segment (-1 when it has none). */
static int path_matches(const struct routes_route *t, const struct segment *seg, int n, int *param)
{
    const char *p = t->path;
    *param = -1;
    for (int i = 0; i < n; i++) {
        if (*p != '/')
            return 0;
        p++;
        size_t len = strcspn(p, "/");
        if (p[0] == '{')
            *param = i;
        else if (len != seg[i].len || memcmp(p, seg[i].at, len) != 0)
            return 0;
        p += len;
    }
    return *p == '\0';
}

static int method_matches(const struct routes_route *t, const char *method)
{
    if (strcmp(t->method, "GET") != 0)
        return strcmp(method, t->method) == 0;
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

enum routes_verdict routes_match(const char *method, const char *path, struct routes_match *m)
{
    struct segment seg[ROUTES_MAX_SEGMENTS];
    int n = method && path ? split_path(path, seg) : -1;
    const struct routes_route *found = NULL, *same_path = NULL;
    int param = -1;
    for (size_t i = 0; n >= 0 && i < routes_count && !found; i++) {
        int p;
        if (!path_matches(&routes_table[i], seg, n, &p))
            continue;
        if (!same_path)
            same_path = &routes_table[i];
        if (method_matches(&routes_table[i], method))
            found = &routes_table[i], param = p;
    }
    *m = (struct routes_match){
        .route = found ? found : same_path,
        .admin_area = n >= 1 && seg[0].len == 5 && memcmp(seg[0].at, "admin", 5) == 0,
    };
    /* Allow lists every method of the path (a path may have several routes). */
    for (size_t i = 0; !found && same_path && i < routes_count; i++) {
        int p;
        if (!path_matches(&routes_table[i], seg, n, &p))
            continue;
        const char *add =
            strcmp(routes_table[i].method, "GET") == 0 ? "GET, HEAD" : routes_table[i].method;
        size_t len = strlen(m->allow);
        snprintf(m->allow + len, sizeof m->allow - len, "%s%s", len ? ", " : "", add);
    }
    if (found && param >= 0)
        m->param = seg[param].at, m->param_len = seg[param].len;
    return found ? ROUTES_FOUND : same_path ? ROUTES_WRONG_METHOD : ROUTES_NO_ROUTE;
}

/* 405 for a path we serve with another method. */
static void method_not_allowed(struct http_req *r, const char *allow)
{
    http_add_header(r, "Allow", allow);
    http_reply_error(r, 405, "method_not_allowed", NULL);
}

/* Returns 1 when the request carries the admin token (or the payment
 * token, for the one route t it may call), else answers 401 (a failure,
 * charged to the address's bucket of the route's kind) or 429 (that bucket
 * is empty).  The tokens are compared first, in constant time, and the
 * right one is served whatever failed before it from its address: a
 * bystander's wrong tokens must not lock the operator or the payment system
 * out. */
static int admin_ok(struct http_req *r, const struct routes_route *t, enum routes_verdict v)
{
    const struct cfg *c = http_loop_cfg(r->loop);
    const char *auth = http_header(r, "Authorization");
    int payment_route = v == ROUTES_FOUND && t && t->payment;
    if (validate_bearer(auth, c->admin_token))
        return 1;
    if (payment_route && c->payment_token[0] && validate_bearer(auth, c->payment_token))
        return 1;
    enum limits_scope scope = payment_route ? LIMITS_PAYMENT_AUTH : LIMITS_ADMIN_AUTH;
    int64_t wait = limits_auth_failed(r, scope);
    if (wait) {
        limits_reply(r, scope, wait);
        return 0;
    }
    http_add_header(r, "WWW-Authenticate", "Bearer realm=\"seckill-admin\"");
    http_reply_error(r, 401, "unauthorized", "a valid admin bearer token is required");
    return 0;
}

void routes_dispatch(struct http_req *r)
{
    struct routes_match m;
    enum routes_verdict v = routes_match(http_method_name(http_method(r)), http_path(r), &m);
    const struct routes_route *t = m.route;
    pthread_once(&hists_once, hists_make);
    /* A listener answers only its own routes: on the public one, /metrics
     * and (unless admin_on_public) the whole admin area do not exist, token
     * or not, so no token is ever tried there. */
    unsigned here = http_req_internal(r) ? ROUTES_INTERNAL : ROUTES_PUBLIC;
    int admin_here = here == ROUTES_INTERNAL || http_loop_cfg(r->loop)->admin_on_public;
    if ((m.admin_area && !admin_here) ||
        (t && !(t->listeners & here) && !(t->admin && admin_here))) {
        v = ROUTES_NO_ROUTE;
        t = NULL;
    }
    r->answers = t ? t->answers : routes_unrouted_answers;
    r->answer_hists = t ? route_hists[t - routes_table] : unrouted_hists;
    r->route = t ? t->label : NULL;
    /* The admin area asks for the token before it says what exists. */
    if (m.admin_area && admin_here && !admin_ok(r, t, v))
        return;
    if (v == ROUTES_NO_ROUTE) {
        http_reply_error(r, 404, "not_found", NULL);
        return;
    }
    if (v == ROUTES_WRONG_METHOD) {
        method_not_allowed(r, m.allow);
        return;
    }
    /* Before anything touches a store: even a bad id costs a token. */
    if (t->addr_limited && !limits_addr_pass(r))
        return;
    int64_t id = 0;
    if (m.param && validate_id_segment(m.param, m.param_len, &id) != 0) {
        char d[96];
        const char *name = strchr(t->path, '{') + 1;
        snprintf(d, sizeof d, "%.*s must be an integer between 1 and 2^63-1",
                 (int)strcspn(name, "}"), name);
        http_reply_error(r, 400, "invalid_request", d);
        return;
    }
    t->handle(r, id);
}
