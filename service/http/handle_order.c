#include "http/handle_order.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/buyer_token.h"
#include "core/fmt.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/validate.h"
#include "http/limits.h"
#include "order/order_desk.h"
#include "order/order_life.h"
#include "order/order_lookup.h"

/* One order request between the handler and its outcome. */
struct order_req {
    struct http_req req;
    int64_t sku, user, qty;
};

/* An order lookup: run on a worker, answered on the loop. */
struct lookup_job {
    struct job job; /* first: the pool hands back this pointer */
    struct http_req req;
    int64_t order_id;
    int64_t buyer; /* 0: an operator's lookup, of any buyer's order */
    enum order_result res;
    json_t *out;
};

/* Appends the n bytes of s at *p. */
static void put(char **p, const char *s, size_t n)
{
    memcpy(*p, s, n);
    *p += n;
}
#define PUT(p, lit) put(p, lit, sizeof lit - 1)

/* The order's own answer: 201 confirmed, 202 otherwise.  The hot answer of a
 * sale, written by hand (no snprintf): all of it integers and fixed words,
 * nothing to escape. */
static void reply_order(const struct order_req *q, int status, const struct order_outcome *o)
{
    char body[224], *p = body;
    /* a reservation its buyer cancelled before it was written is "cancelled" */
    const char *st =
        o->d.status == ORDER_REJECTED && strcmp(o->d.reason, ORDER_REASON_CANCELLED) == 0
            ? "cancelled"
            : order_result_name(o->d.status);
    PUT(&p, "{\"order_id\":");
    p += fmt_i64(p, o->d.order_id);
    PUT(&p, ",\"status\":\"");
    put(&p, st, strlen(st));
    PUT(&p, "\",\"sku_id\":");
    p += fmt_i64(p, q->sku);
    PUT(&p, ",\"user_id\":");
    p += fmt_i64(p, q->user);
    PUT(&p, ",\"qty\":");
    p += fmt_i64(p, q->qty);
    if (o->replayed)
        PUT(&p, ",\"replayed\":true");
    PUT(&p, "}");
    http_reply_text(&q->req, status, body, (size_t)(p - body));
}

/* 409 for an order Redis reserved and the database refused (its units went back). */
static void reply_rejected(const struct order_req *q, const struct order_outcome *o)
{
    enum order_result why = order_rejection_result(o->d.reason);
    int cancelled = strcmp(o->d.reason, ORDER_REASON_CANCELLED) == 0;
    json_t *body = json_pack(
        "{s:s, s:s, s:I, s:s, s:s, s:I, s:I, s:I}", "error",
        cancelled               ? "order_cancelled"
        : why == ORDER_REJECTED ? "order_rejected"
                                : order_result_name(why),
        "detail",
        cancelled ? "the buyer cancelled this order before it was written; nothing was taken"
                  : "the database refused this order; nothing was taken",
        "order_id", (json_int_t)o->d.order_id, "status", cancelled ? "cancelled" : "rejected",
        "reason", o->d.reason, "sku_id", (json_int_t)q->sku, "user_id", (json_int_t)q->user, "qty",
        (json_int_t)q->qty);
    if (o->replayed)
        json_object_set_new(body, "replayed", json_true());
    http_reply_json(&q->req, 409, body);
}

/* 503 for a reservation whose outcome is not certain: the Idempotency-Key
 * (the buyer's, or the one made up for this request) finds out. */
static void reply_outcome_open(const struct http_req *r, const char *idem, const char *detail)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "error", "unavailable", "detail", detail,
                          "idempotency_key", idem);
    http_add_header(r, "Retry-After", "1");
    http_reply_json(r, 503, o);
}

/* The one place where order outcomes become HTTP answers (and are counted).
 * q is NULL for a lookup; 'found' is the looked-up order. */
static void answer(const struct http_req *r, const struct order_req *q,
                   const struct order_outcome *o, json_t *found)
{
    int durable = strcmp(http_loop_cfg(r->loop)->order_ack, "durable") == 0;
    int names_order =
        o->result == ORDER_PENDING || o->result == ORDER_CONFIRMED || o->result == ORDER_REJECTED;
    if (q && o->replayed)
        metrics_add(M_ORDERS_REPLAYED, 1);
    else if (q && names_order)
        metrics_add(M_ORDERS_ACCEPTED, 1); /* a new reservation */
    switch (o->result) {
    case ORDER_PENDING:
        reply_order(q, 202, o);
        break;
    case ORDER_CONFIRMED:
        /* reserved mode answers 202 and names the state, as it always has */
        if (durable)
            metrics_add(M_ORDERS_CONFIRMED, 1);
        reply_order(q, durable ? 201 : 202, o);
        break;
    case ORDER_REJECTED:
        if (!durable) {
            reply_order(q, 202, o);
            break;
        }
        metrics_add(M_ORDERS_REJECTED, 1);
        reply_rejected(q, o);
        break;
    case ORDER_SOLD_OUT:
        metrics_add(M_ORDERS_SOLD_OUT, 1);
        http_reply_error(r, 409, "sold_out", o->replayed ? "sold out (an earlier answer)" : NULL);
        break;
    case ORDER_LIMIT_EXCEEDED:
        metrics_add(M_ORDERS_LIMIT, 1);
        http_reply_error(r, 409, "limit_exceeded", "this order would exceed the per-user limit");
        break;
    case ORDER_SALE_NOT_ACTIVE:
        metrics_add(M_ORDERS_NOT_ACTIVE, 1);
        http_reply_error(r, 409, "sale_not_active", NULL);
        break;
    case ORDER_IDEM_MISMATCH:
        http_reply_error(r, 422, "idempotency_key_reused",
                         "this Idempotency-Key was used with a different request");
        break;
    case ORDER_SKU_UNKNOWN:
        http_reply_error(r, 404, "unknown_sku", NULL);
        break;
    case ORDER_SKU_NOT_LOADED:
        http_add_header(r, "Retry-After", "1");
        http_reply_error(r, 503, "unavailable",
                         "this SKU is being restored into Redis from the database; retry shortly");
        break;
    case ORDER_OUTCOME_LOST:
        metrics_add(M_ORDERS_UNAVAILABLE, 1);
        reply_outcome_open(r, o->idem,
                           "Redis went away while reserving: retry with this Idempotency-Key to "
                           "learn whether the order was taken");
        break;
    case ORDER_OUTCOME_TIMEOUT:
        metrics_add(M_ORDERS_UNAVAILABLE, 1);
        reply_outcome_open(r, o->idem,
                           "Redis did not answer in time: the reservation was refused past its "
                           "deadline unless Redis stalled after taking it; retry with this "
                           "Idempotency-Key to be sure");
        break;
    case ORDER_NOT_RECORDED: {
        /* reserved in Redis alone: a 202 would promise more than is true */
        char detail[224];
        snprintf(detail, sizeof detail,
                 "order %" PRId64 " was reserved, but neither did its commit come in time nor "
                 "could it be recorded; retry with this Idempotency-Key to learn its outcome",
                 o->d.order_id);
        metrics_add(M_ORDERS_UNAVAILABLE, 1);
        reply_outcome_open(r, o->idem, detail);
        break;
    }
    case ORDER_DEADLINE_PASSED: /* the script ran after we would have given up: it took nothing */
        metrics_add(M_ORDERS_EXPIRED, 1);
        metrics_add(M_ORDERS_UNAVAILABLE, 1);
        http_reply_unavailable(r);
        break;
    case ORDER_RATE_LIMITED: /* the buyer's bucket in reserve.lua: nothing taken */
        limits_reply(r, LIMITS_BUYER, o->retry_after_ms * 1000);
        break;
    case ORDER_STORE_FULL:
        if (q)
            metrics_add(M_ORDERS_UNAVAILABLE, 1);
        http_reply_store_full(r, NULL);
        break;
    case ORDER_IDS_EXHAUSTED:
    case ORDER_UNAVAILABLE:
        if (q)
            metrics_add(M_ORDERS_UNAVAILABLE, 1);
        http_reply_unavailable(r);
        break;
    case ORDER_NOT_FOUND:
        http_reply_error(r, 404, "unknown_order", NULL);
        break;
    case ORDER_FOUND:
        http_reply_json(r, 200, found);
        break;
    }
}

/* 401 for a buyer request without a valid token, with the challenge of
 * RFC 6750 (error="invalid_token" when a token was presented). */
static void reply_unauthorized(const struct http_req *r, int presented, const char *detail)
{
    metrics_add(M_BUYER_UNAUTHORIZED, 1);
    http_add_header(r, "WWW-Authenticate",
                    presented ? "Bearer realm=\"seckill\", error=\"invalid_token\""
                              : "Bearer realm=\"seckill\"");
    http_reply_error(r, 401, "unauthorized", detail);
}

/* The buyer the request's bearer token names (it says who buys, and whose
 * orders may be read).  Returns 1 with *buyer; otherwise answers 401 and
 * returns 0.  Neither the token nor the secret is ever logged. */
static int buyer_of(const struct http_req *r, int64_t *buyer)
{
    const struct cfg *c = http_loop_cfg(r->loop);
    const char *token;
    size_t len;
    if (validate_bearer_token(http_header(r, "Authorization"), &token, &len) != 0) {
        reply_unauthorized(r, 0, "a buyer bearer token is required");
        return 0;
    }
    const struct buyer_token_verifier v = {.secret = c->buyer_token_secret,
                                           .secret_len = strlen(c->buyer_token_secret),
                                           .leeway_s = c->buyer_token_leeway_s,
                                           .max_bytes = (size_t)c->max_buyer_token_bytes,
                                           .kid = c->buyer_token_kid,
                                           .next_secret = c->buyer_token_secret_next,
                                           .next_secret_len = strlen(c->buyer_token_secret_next),
                                           .next_kid = c->buyer_token_kid_next,
                                           .max_ttl_s = c->buyer_token_max_ttl_s};
    enum buyer_token_result res = buyer_token_verify(&v, token, len, (int64_t)time(NULL), buyer);
    if (res == BUYER_TOKEN_OK)
        return 1;
    log_debug("%s: buyer token refused: %s", r->route ? r->route : "?",
              buyer_token_result_name(res));
    reply_unauthorized(r, 1,
                       res == BUYER_TOKEN_EXPIRED ? "the buyer token has expired"
                                                  : "the buyer token is not valid");
    return 0;
}

static void on_placed(const struct order_outcome *o, void *arg)
{
    struct order_req *q = arg;
    answer(&q->req, q, o, NULL);
    free(q);
}

void handle_order_place(struct http_req *r, int64_t sku)
{
    const struct cfg *c = http_loop_cfg(r->loop);
    int64_t buyer;
    if (!buyer_of(r, &buyer))
        return;
    size_t len;
    char *body = http_take_json(r, &len);
    if (!body)
        return;
    char detail[160];
    int64_t user, qty;
    int bad =
        validate_order_body(body, len, c->max_qty_per_order, &user, &qty, detail, sizeof detail);
    free(body);
    if (bad) {
        metrics_add(M_ORDERS_INVALID, 1);
        http_reply_error(r, 400, "invalid_request", detail);
        return;
    }
    /* The buyer is who the token names; a body that names someone else is
     * an attempt to buy as them (or a front end's bug), never silently fixed. */
    if (user != 0 && user != buyer) {
        metrics_add(M_BUYER_FORBIDDEN, 1);
        http_reply_error(r, 403, "forbidden", "user_id is not the buyer the token names");
        return;
    }
    user = buyer;
    const char *idem = http_header(r, "Idempotency-Key");
    if (idem && validate_idempotency_key(idem, (size_t)c->max_idempotency_key_bytes, detail,
                                         sizeof detail) != 0) {
        http_reply_error(r, 400, "invalid_request", detail);
        return;
    }
    struct order_req *q = xmalloc(sizeof *q);
    *q = (struct order_req){.req = *r, .sku = sku, .user = user, .qty = qty};
    struct order_request rq = {
        .sku = sku, .user = user, .qty = qty, .idem = idem, .deadline_ms = r->deadline_ms};
    /* the loop's state is its order desk (daemon/main.c wires them) */
    order_desk_place(http_loop_state(r->loop), &rq, on_placed, q);
}

static void lookup_run(struct job *j, struct worker_ctx *w)
{
    struct lookup_job *lj = (struct lookup_job *)j;
    int64_t buyer = lj->buyer;
    lj->res = buyer ? ORDER_FOUND : order_buyer_of(w, lj->order_id, &buyer);
    if (lj->res == ORDER_FOUND)
        lj->res = order_lookup(w, lj->order_id, buyer, &lj->out);
}

static void lookup_done(struct job *j)
{
    struct lookup_job *lj = (struct lookup_job *)j;
    /* late: never ran, its request's deadline passed in the queue */
    struct order_outcome o = {.result = j->late ? ORDER_UNAVAILABLE : lj->res};
    answer(&lj->req, NULL, &o, lj->out); /* takes lj->out */
    free(lj);
}

static void lookup_submit(const struct http_req *r, int64_t order_id, int64_t buyer)
{
    struct lookup_job *lj = xcalloc(1, sizeof *lj);
    lj->req = *r;
    lj->order_id = order_id;
    lj->buyer = buyer;
    lj->job.run = lookup_run;
    lj->job.done = lookup_done;
    if (http_submit(r, &lj->job, buyer == 0) != 0)
        free(lj);
}

void handle_order_get(struct http_req *r, int64_t order_id)
{
    int64_t buyer;
    if (!buyer_of(r, &buyer))
        return;
    lookup_submit(r, order_id, buyer);
}

void handle_order_get_admin(struct http_req *r, int64_t order_id)
{
    lookup_submit(r, order_id, 0);
}

/* ---- the order's life: cancel (buyer) and pay (admin), on a worker ------- */

struct life_job {
    struct job job; /* first: the pool hands back this pointer */
    struct http_req req;
    int64_t order_id, buyer; /* buyer 0: the payment callback */
    int cancel;              /* a cancel: the buyer's (buyer set) or an operator's */
    char payment_ref[VALIDATE_PAYMENT_REF_MAX + 1];
    enum life_result res;
    json_t *out;
};

static void life_run(struct job *j, struct worker_ctx *w)
{
    struct life_job *lj = (struct life_job *)j;
    if (!lj->cancel) {
        lj->res = order_pay(w, lj->order_id, lj->payment_ref, &lj->out);
        return;
    }
    /* An operator cancels as the order's buyer would: the same rules, the
     * same idempotent answer ("replayed"). */
    int64_t buyer = lj->buyer;
    enum order_result who = buyer ? ORDER_FOUND : order_buyer_of(w, lj->order_id, &buyer);
    lj->res = who == ORDER_FOUND       ? order_cancel(w, lj->order_id, buyer, &lj->out)
              : who == ORDER_NOT_FOUND ? LIFE_NOT_FOUND
                                       : LIFE_UNAVAILABLE;
}

/* The one place where lifecycle outcomes become HTTP answers. */
static void life_done(struct job *j)
{
    struct life_job *lj = (struct life_job *)j;
    const struct http_req *r = &lj->req;
    int cancel = lj->cancel;
    if (j->late) /* never ran: its request's deadline passed in the queue */
        lj->res = LIFE_UNAVAILABLE;
    switch (lj->res) {
    case LIFE_OK:
    case LIFE_REPLAYED:
        if (lj->out) {
            http_reply_json(r, 200, lj->out);
            lj->out = NULL;
        } else { /* paid, then the re-read failed: a retry answers "replayed" */
            http_reply_unavailable(r);
        }
        break;
    case LIFE_NOT_FOUND:
        http_reply_error(r, 404, "unknown_order", NULL);
        break;
    case LIFE_WRONG_STATE: {
        json_t *o = json_pack("{s:s, s:s}", "error",
                              cancel ? "order_not_cancellable" : "order_not_payable", "detail",
                              cancel ? "only a pending order, or a confirmed one within its "
                                       "payment window, can be cancelled"
                                     : "only a confirmed order within its payment window can be "
                                       "paid");
        json_object_update(o, lj->out); /* its "status" */
        http_reply_json(r, 409, o);
        break;
    }
    case LIFE_REF_CONFLICT:
        http_reply_error(r, 409, "payment_ref_conflict",
                         "the order was paid under another payment_ref, or this payment_ref paid "
                         "another order");
        break;
    case LIFE_UNAVAILABLE:
        http_reply_unavailable(r);
        break;
    }
    json_decref(lj->out);
    free(lj);
}

static void life_submit(const struct http_req *r, struct life_job *lj)
{
    lj->req = *r;
    lj->job.run = life_run;
    lj->job.done = life_done;
    if (http_submit(r, &lj->job, lj->buyer == 0) != 0) /* operators' and payments' first */
        free(lj);
}

/* A cancel of order_id as 'buyer' (0: an operator's, of any buyer's order). */
static void cancel_submit(struct http_req *r, int64_t order_id, int64_t buyer)
{
    if (http_body_len(r) != 0) {
        http_reply_error(r, 400, "invalid_request", "a cancel takes no body");
        return;
    }
    struct life_job *lj = xcalloc(1, sizeof *lj);
    lj->order_id = order_id;
    lj->buyer = buyer;
    lj->cancel = 1;
    life_submit(r, lj);
}

void handle_order_cancel(struct http_req *r, int64_t order_id)
{
    int64_t buyer;
    if (buyer_of(r, &buyer))
        cancel_submit(r, order_id, buyer);
}

void handle_order_cancel_admin(struct http_req *r, int64_t order_id)
{
    cancel_submit(r, order_id, 0);
}

void handle_order_pay(struct http_req *r, int64_t order_id)
{
    size_t len;
    char *body = http_take_json(r, &len);
    if (!body)
        return;
    struct life_job *lj = xcalloc(1, sizeof *lj);
    char detail[160];
    int bad = validate_payment_body(body, len, lj->payment_ref, detail, sizeof detail);
    free(body);
    if (bad) {
        free(lj);
        http_reply_error(r, 400, "invalid_request", detail);
        return;
    }
    lj->order_id = order_id;
    life_submit(r, lj);
}
