#include "order/order_desk.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/embedded.h"
#include "core/log.h"
#include "core/metrics.h"
#include "order/order_pending.h"
#include "order/order_wait.h"
#include "order/soldout.h"
#include "sku/buckets.h"
#include "sku/reconcile.h"
#include "sku/sku.h"
#include "store/redis_async.h"
#include <rlock/resp.h>

/* Parents of buckets this loop has met (sku/buckets.h), by id, open
 * addressing.  A SKU's buckets never change once it exists, so an entry is
 * never stale and never moves (orders in flight point at it); past
 * DESK_PARENTS parents the others are looked up in PostgreSQL per order. */
#define DESK_PARENTS 64
struct desk_parent {
    int64_t sku; /* 0: empty */
    int n;
    int64_t ids[VALIDATE_BUCKETS_MAX];
};

struct order_call;

struct order_desk {
    const struct cfg *cfg;
    struct event_base *base;
    struct workers *workers;
    struct redis_async *redis;
    struct order_wait *waits; /* durable mode only */
    int closing;
    uint64_t rng; /* made-up idempotency keys */
    /* The orders of this loop turn, in arrival order, sent by 'flush' once
     * the turn's other callbacks have run (see reserve()). */
    struct order_call *queue, **queue_tail;
    int queued;
    struct event *flush;
    struct order_reserve_call call; /* reused by every batch */
    struct desk_parent parents[DESK_PARENTS];
    int full;               /* the last reserve answer was Redis's OOM */
    int64_t full_logged_ms; /* when that was last logged (clock_mono_ms) */
};

/* One order in flight, from the script call to the outcome. */
struct order_call {
    struct order_desk *od;
    struct order_call *next; /* in the desk's queue, until sent */
    order_desk_fn *fn;
    void *arg;
    int64_t sku, user, qty;
    int buyers_key;                   /* idem is the buyer's own */
    const struct desk_parent *parent; /* sku is a parent: its buckets */
    struct desk_parent *own;          /* ... when the desk's table is full */
    int home, rounds;                 /* the buyer's bucket; moves into it so far */
    int noted;                        /* the sold-out flag was told (once per order) */
    int replayed;
    int64_t retry_after_ms;       /* rate limited: the script's wait */
    int64_t order_id;             /* while waiting for the writer */
    char entry[ORDER_ENTRY_MAX];  /* ... its reservation's stream entry */
    int64_t sent_ms, probe;       /* the sold-out flag's (soldout.h) */
    int64_t deadline_ms;          /* for the script (Unix ms), set when queued */
    int64_t request_deadline_ms;  /* the request's, for the workers' jobs (clock_mono_ms) */
    char idem[KEYS_IDEM_MAX + 1]; /* the buyer's key, or one made up for them */
};

/* The SKU look-up of a reservation that found the SKU missing in Redis. */
struct sku_probe {
    struct job job; /* first: the pool hands back this pointer */
    struct order_call *call;
    enum sku_result res;
    int n; /* the SKU is a parent of n buckets */
    int64_t ids[VALIDATE_BUCKETS_MAX];
};

/* One reserve.lua call: the orders of one loop turn on one SKU's keys. */
struct reserve_batch {
    int n;
    struct order_call *calls[]; /* in stream order */
};

/* A move of units into the buyer's empty bucket (sku_bucket_refill). */
struct bucket_refill {
    struct job job; /* first */
    struct order_call *call;
    enum sku_result res;
    int64_t left; /* the buckets together, when they cannot serve the order */
};

/* Tells the sold-out flag what this order learnt about its SKU's stock,
 * once: that gives back the claim soldout_check() may have handed it. */
static void note(struct order_call *oc, enum soldout_news news)
{
    if (oc->noted)
        return;
    oc->noted = 1;
    soldout_note(soldout_shared(), oc->sku, news, oc->sent_ms,
                 CFG_LIVE(oc->od->cfg, sold_out_flag_ms), oc->probe);
}

/* Gives the outcome to the caller and frees the call. */
static void finish(struct order_call *oc, enum order_result r, const struct order_decision *d)
{
    if (oc->od)
        note(oc, SOLDOUT_NEWS_NONE);
    struct order_outcome o = {.result = r,
                              .replayed = oc->replayed,
                              .idem = oc->idem,
                              .retry_after_ms = oc->retry_after_ms};
    if (d)
        o.d = *d;
    oc->fn(&o, oc->arg);
    free(oc->own);
    free(oc);
}

/* xorshift64*, seeded per desk from the kernel: made-up idempotency keys are
 * scoped to their buyer, so they need to be unique, not secret. */
static uint64_t next_random(struct order_desk *od)
{
    uint64_t x = od->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    od->rng = x;
    return x * UINT64_C(0x2545F4914F6CDD1D);
}

/* "auto-" and 32 hex digits: the key of a request that came without one
 * (by hand: snprintf was 1.6k instructions of every such order). */
static void made_up_key(struct order_desk *od, char out[KEYS_IDEM_MAX + 1])
{
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "auto-", 5);
    for (int half = 0; half < 2; half++) {
        uint64_t x = next_random(od);
        for (int i = 15; i >= 0; i--, x >>= 4)
            out[5 + 16 * half + i] = hex[x & 15];
    }
    out[37] = '\0';
}

/* ---- a SKU Redis does not hold ----------------------------------------- */

static void probe_run(struct job *j, struct worker_ctx *w)
{
    struct sku_probe *p = (struct sku_probe *)j;
    struct order_call *oc = p->call;
    if (!oc->parent) { /* a parent of buckets has no keys of its own */
        p->n = sku_buckets_of(w, oc->sku, p->ids, VALIDATE_BUCKETS_MAX);
        p->res = p->n < 0 ? SKU_UNAVAILABLE : SKU_OK;
        if (p->n != 0)
            return;
    }
    p->res = sku_exists(w, oc->parent ? oc->parent->ids[oc->home] : oc->sku);
    if (p->res == SKU_OK) /* known, not in Redis: restore it now, not at the next pass */
        reconcile_kick();
}

static void reserve(struct order_call *oc);

/* The entry of parent sku, or the empty one where it would go (NULL: the
 * table is full). */
static struct desk_parent *parent_slot(struct order_desk *od, int64_t sku)
{
    for (int i = 0; i < DESK_PARENTS; i++) {
        struct desk_parent *p = &od->parents[((uint64_t)sku + (uint64_t)i) % DESK_PARENTS];
        if (p->sku == sku || p->sku == 0)
            return p;
    }
    return NULL;
}

static const struct desk_parent *parent_get(struct order_desk *od, int64_t sku)
{
    const struct desk_parent *p = parent_slot(od, sku);
    return p && p->sku == sku ? p : NULL;
}

/* Remembers that sku is a parent of buckets ids[0..n); the call's own copy
 * when the table is full. */
static const struct desk_parent *parent_put(struct order_call *oc, const int64_t *ids, int n)
{
    struct desk_parent *p = parent_slot(oc->od, oc->sku);
    if (!p) {
        if (!oc->own)
            oc->own = xmalloc(sizeof *oc->own);
        p = oc->own;
    }
    p->sku = oc->sku;
    p->n = n;
    memcpy(p->ids, ids, (size_t)n * sizeof *ids);
    return p;
}

/* Sends the order to the buyer's bucket of parent p. */
static void route(struct order_call *oc, const struct desk_parent *p)
{
    oc->parent = p;
    oc->home = sku_bucket_index(oc->user, p->n);
    reserve(oc);
}

static void probe_done(struct job *j)
{
    struct sku_probe *p = (struct sku_probe *)j;
    struct order_call *oc = p->call;
    enum sku_result res = p->res;
    if (res == SKU_OK && p->n > 0) {
        const struct desk_parent *parent = parent_put(oc, p->ids, p->n);
        free(p);
        route(oc, parent);
        return;
    }
    free(p);
    note(oc, SOLDOUT_NEWS_OPEN); /* nothing to sell here now: no flag stands for it */
    finish(oc,
           res == SKU_OK        ? ORDER_SKU_NOT_LOADED
           : res == SKU_UNKNOWN ? ORDER_SKU_UNKNOWN
                                : ORDER_UNAVAILABLE,
           NULL);
}

/* Unknown to Redis: unknown, or being restored, as PostgreSQL says. */
static void probe_sku(struct order_call *oc)
{
    struct sku_probe *p = xcalloc(1, sizeof *p);
    p->call = oc;
    p->res = SKU_UNAVAILABLE; /* unless it runs: its deadline may pass in the queue */
    p->job.run = probe_run;
    p->job.done = probe_done;
    p->job.base = oc->od->base;
    p->job.deadline_ms = oc->request_deadline_ms;
    if (workers_submit(oc->od->workers, &p->job) != 0) {
        free(p);
        finish(oc, ORDER_UNAVAILABLE, NULL);
    }
}

/* ---- the reservation ----------------------------------------------------- */

static int64_t target_of(const struct order_call *oc);

/* A durable order whose commit did not come in time, being recorded in
 * PostgreSQL before its buyer is told "pending" (order_pending.h). */
struct pending_job {
    struct job job; /* first: the pool hands back this pointer */
    struct order_call *call;
    struct order_pending_rec rec;
    int rc;
};

static void record_run(struct job *j, struct worker_ctx *w)
{
    struct pending_job *p = (struct pending_job *)j;
    p->rc = order_pending_record(w, &p->rec);
}

/* Recorded: "202 pending" now holds whatever Redis loses.  Not recorded
 * (PostgreSQL down, or the pool refused: shutting down): the reservation
 * lives in Redis alone, so the answer promises no more than a 503 whose
 * Idempotency-Key settles the outcome. */
static void record_done(struct job *j)
{
    struct pending_job *p = (struct pending_job *)j;
    struct order_call *oc = p->call;
    int rc = p->rc;
    free(p);
    struct order_decision pending = {.order_id = oc->order_id, .status = ORDER_PENDING};
    snprintf(pending.entry, sizeof pending.entry, "%s", oc->entry);
    if (rc != 0) {
        metrics_add(M_ORDERS_PENDING_UNRECORDED, 1);
        log_warn("order %" PRId64 ": no commit within order_ack_wait_ms and not recorded as "
                 "pending; answered 503 with its Idempotency-Key",
                 oc->order_id);
        finish(oc, ORDER_NOT_RECORDED, &pending);
        return;
    }
    metrics_add(M_ORDERS_PENDING_RECORDED, 1);
    finish(oc, ORDER_PENDING, &pending);
}

static void record_pending(struct order_call *oc)
{
    struct pending_job *p = xcalloc(1, sizeof *p);
    p->call = oc;
    p->rec = (struct order_pending_rec){.order_id = oc->order_id,
                                        .sku = target_of(oc),
                                        .user = oc->user,
                                        .qty = oc->qty,
                                        .idem = oc->buyers_key ? oc->idem : NULL};
    snprintf(p->rec.entry, sizeof p->rec.entry, "%s", oc->entry);
    p->rc = -1; /* unless it runs: its deadline may pass in the queue */
    p->job.run = record_run;
    p->job.done = record_done;
    p->job.base = oc->od->base;
    p->job.deadline_ms = oc->request_deadline_ms;
    if (workers_submit(oc->od->workers, &p->job) != 0)
        record_done(&p->job);
}

/* order_wait's answer: the writer's decision, or NULL when it did not come
 * within order_ack_wait_ms: the order is recorded as pending first (the rare
 * slow path), so that the 202 holds. */
static void on_decided(const struct order_decision *d, void *arg)
{
    struct order_call *oc = arg;
    if (!d) {
        record_pending(oc);
        return;
    }
    finish(oc, d->status, d);
}

/* Durable mode waits for a pending order's commit; reserved mode answers now. */
static void settle(struct order_call *oc, const struct order_decision *d)
{
    if (d->status != ORDER_PENDING || !oc->od->waits) {
        finish(oc, d->status, d);
        return;
    }
    oc->order_id = d->order_id;
    snprintf(oc->entry, sizeof oc->entry, "%s", d->entry);
    order_wait_add(oc->od->waits, d->order_id, d->entry, on_decided, oc);
}

/* ---- a bucket that cannot serve the order -------------------------------- */

static void refill_run(struct job *j, struct worker_ctx *w)
{
    struct bucket_refill *f = (struct bucket_refill *)j;
    struct order_call *oc = f->call;
    f->res =
        sku_bucket_refill(w, oc->sku, oc->parent->ids, oc->parent->n, oc->home, oc->qty, &f->left);
}

static void refill_done(struct job *j)
{
    struct bucket_refill *f = (struct bucket_refill *)j;
    struct order_call *oc = f->call;
    enum sku_result res = f->res;
    int64_t left = f->left;
    free(f);
    if (res == SKU_OK) {
        oc->rounds++;
        reserve(oc); /* units were moved into the bucket (or came): ask again */
        return;
    }
    if (res == SKU_INSUFFICIENT) { /* every bucket together: sold out */
        note(oc, left == 0 ? SOLDOUT_NEWS_EMPTY : SOLDOUT_NEWS_OPEN);
        finish(oc, ORDER_SOLD_OUT, NULL);
        return;
    }
    /* Redis or PostgreSQL failed, or the locks were busy; or Redis is full */
    finish(oc, res == SKU_STORE_FULL ? ORDER_STORE_FULL : ORDER_UNAVAILABLE, NULL);
}

/* The buyer's bucket is short of the order: move units into it from the
 * others (on a worker: locks and a transaction), then ask again. */
static void refill(struct order_call *oc)
{
    struct bucket_refill *f = xcalloc(1, sizeof *f);
    f->call = oc;
    f->res = SKU_UNAVAILABLE; /* unless it runs: its deadline may pass in the queue */
    f->job.run = refill_run;
    f->job.done = refill_done;
    f->job.base = oc->od->base;
    f->job.deadline_ms = oc->request_deadline_ms;
    if (workers_submit(oc->od->workers, &f->job) != 0) {
        free(f);
        finish(oc, ORDER_UNAVAILABLE, NULL);
    }
}

/* Order oc's part of reserve.lua's reply (NULL when none came: st says
 * why), on the loop. */
static void reserved(struct order_call *oc, const redisReply *r, enum redis_async_status st)
{
    if (st == REDIS_ASYNC_LOST || st == REDIS_ASYNC_TIMEOUT) {
        finish(oc, st == REDIS_ASYNC_LOST ? ORDER_OUTCOME_LOST : ORDER_OUTCOME_TIMEOUT, NULL);
        return;
    }
    struct order_reply rep;
    order_parse_reply(r, &rep);
    if (oc->parent && rep.result == ORDER_SOLD_OUT && !rep.replayed) {
        /* the bucket's sold_out is not the SKU's: a move, then a new try;
         * after bucket_refill_rounds of them, others keep emptying it */
        if (oc->rounds < oc->od->cfg->bucket_refill_rounds)
            refill(oc);
        else
            finish(oc, ORDER_UNAVAILABLE, NULL);
        return;
    }
    if (rep.result == ORDER_SKU_NOT_LOADED) {
        probe_sku(oc); /* it may be a parent of buckets: the probe tells the flag */
        return;
    }
    note(oc, soldout_news_of(&rep));
    oc->replayed = rep.replayed;
    oc->retry_after_ms = rep.retry_after_ms;
    switch (rep.result) {
    case ORDER_PENDING:
    case ORDER_CONFIRMED:
    case ORDER_REJECTED:
        settle(oc, &rep.d);
        return;
    case ORDER_IDS_EXHAUSTED:
        log_error("sku %" PRId64 ": the epoch has no order ids left", oc->sku);
        break;
    case ORDER_STORE_FULL: /* logged by on_reserved when Redis fills up */
        break;
    case ORDER_UNAVAILABLE: /* not sent, or an error reply (logged once per call): nothing taken */
        if (r && r->type != REDIS_REPLY_ERROR)
            log_error("reserve.lua: unexpected answer");
        if (rlock_reply_kind(r) == RLOCK_REPLY_NO_FUNCTION)
            reconcile_kick(); /* Redis lost the functions (an empty restart): heal now */
        break;
    default:
        break;
    }
    finish(oc, rep.result, NULL);
}

/* reserve.lua's reply to one batch, on the loop: each order gets its own
 * element; a transport failure or an error reply (the script refuses before
 * its first write) is every order's outcome. */
static void on_reserved(redisReply *r, enum redis_async_status st, void *arg)
{
    struct reserve_batch *b = arg;
    struct order_desk *od = b->calls[0]->od;
    if (rlock_reply_kind(r) == RLOCK_REPLY_OOM) {
        /* Near its bound Redis flips between full and not as keys come
         * and go: one line per full_retry_after_s at most, not per flip. */
        int64_t now = clock_mono_ms();
        if (!od->full && now - od->full_logged_ms >= od->cfg->full_retry_after_s * 1000) {
            log_warn("Redis is at its maxmemory: orders are answered 503 store_full, nothing "
                     "taken, until it has room");
            od->full_logged_ms = now;
        }
        od->full = 1;
    } else if (r && r->type == REDIS_REPLY_ERROR) {
        log_error("reserve.lua: %s", r->str);
    } else if (r && (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)b->n)) {
        log_error("reserve.lua: unexpected answer to %d orders", b->n);
    }
    if (r && od->full && rlock_reply_kind(r) != RLOCK_REPLY_OOM)
        od->full = 0; /* Redis answered: it had room for this call */
    for (int i = 0; i < b->n; i++)
        reserved(b->calls[i], order_reserve_reply_at(r, b->n, i), st);
    free(b);
}

/* The SKU whose keys order oc's reservation runs on. */
static int64_t target_of(const struct order_call *oc)
{
    return oc->parent ? oc->parent->ids[oc->home] : oc->sku;
}

/* Sends the orders of batch b (all on target's keys) in one reserve.lua
 * call.  The script's deadline is the earliest of theirs. */
static void send_batch(struct order_desk *od, int64_t target, struct reserve_batch *b)
{
    const struct cfg *c = od->cfg;
    struct order_reserve_call *rc = &od->call;
    int64_t deadline = b->calls[0]->deadline_ms;
    for (int i = 1; i < b->n; i++)
        if (b->calls[i]->deadline_ms < deadline)
            deadline = b->calls[i]->deadline_ms;
    int64_t auto_ttl = c->idempotency_auto_ttl_s < c->idempotency_ttl_s ? c->idempotency_auto_ttl_s
                                                                        : c->idempotency_ttl_s;
    order_reserve_begin(rc, target, c->idempotency_ttl_s, auto_ttl, deadline);
    order_reserve_limit(rc, CFG_LIVE(c, rate_buyer_orders_per_min),
                        CFG_LIVE(c, rate_buyer_orders_burst));
    order_reserve_refusal_ttl(rc, c->refusal_ttl_s);
    for (int i = 0; i < b->n; i++) {
        const struct order_call *oc = b->calls[i];
        /* the same order again after a move is not another order: no token */
        order_reserve_add(rc, oc->user, oc->qty, oc->idem, oc->buyers_key, oc->parent ? oc->sku : 0,
                          oc->rounds == 0);
    }
    order_reserve_argv(rc);
    metrics_add(M_RESERVE_CALLS, 1);
    metrics_add(M_RESERVE_CALL_ORDERS, b->n);
    redis_async_script(od->redis, &script_reserve, rc->nkeys, rc->nargs, rc->argv, NULL,
                       on_reserved, b);
}

/* End of the loop turn: the queued orders go out, those on one SKU's keys
 * together (in arrival order, at most reserve_batch_max a call), so a
 * storm of orders costs Redis one script run per SKU and turn, and a lone
 * order waits for nothing but the callbacks already due. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct order_desk *od = arg;
    struct order_call *rest = od->queue;
    od->queue = NULL;
    od->queue_tail = &od->queue;
    od->queued = 0;
    int max = (int)od->cfg->reserve_batch_max;
    while (rest) {
        int64_t target = target_of(rest);
        struct reserve_batch *b = xmalloc(sizeof *b + (size_t)max * sizeof b->calls[0]);
        b->n = 0;
        for (struct order_call **p = &rest; *p && b->n < max;) {
            if (target_of(*p) == target) {
                b->calls[b->n++] = *p;
                *p = (*p)->next;
            } else {
                p = &(*p)->next;
            }
        }
        send_batch(od, target, b);
    }
}

/* Queues the order for reserve.lua, on its SKU or on the buyer's bucket of
 * it, to be sent at the end of this loop turn (on_flush).  Past the deadline
 * (Redis clock) the script takes nothing: the outcome is reported at
 * redis_timeout_ms after sending, so a refusal never hides a reservation. */
static void reserve(struct order_call *oc)
{
    struct order_desk *od = oc->od;
    if (od->closing || !od->redis) {
        finish(oc, ORDER_UNAVAILABLE, NULL);
        return;
    }
    const struct cfg *c = od->cfg;
    oc->deadline_ms = clock_wall_ms() + c->redis_timeout_ms - c->reserve_deadline_margin_ms;
    oc->next = NULL;
    *od->queue_tail = oc;
    od->queue_tail = &oc->next;
    /* the first order of the turn schedules the flush: active events run
     * after those already due in this pass of the loop, never on a timer */
    if (od->queued++ == 0)
        event_active(od->flush, EV_TIMEOUT, 1);
}

/* A reserve reply that came after its buyer was told the outcome is open:
 * Redis stalled between running the script and replying.  The order is real;
 * its buyer has the Idempotency-Key that finds it.  Counted, so that it is
 * never silent. */
static void on_late_reply(redisReply *r, void *arg)
{
    (void)arg;
    size_t n = r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
    for (size_t i = 0; i < n; i++) { /* one element per order of the batch */
        struct order_reply rep;
        order_parse_reply(r->element[i], &rep);
        if (rep.result != ORDER_PENDING || rep.replayed)
            continue;
        metrics_add(M_ORDERS_LATE_RESERVED, 1);
        log_warn("order %" PRId64 " was reserved, but its reply came after the buyer's 503 "
                 "(Redis stalled); the Idempotency-Key in that 503 finds it",
                 rep.d.order_id);
    }
}

void order_desk_place(struct order_desk *od, const struct order_request *rq, order_desk_fn *fn,
                      void *arg)
{
    /* A SKU found sold out a moment ago is answered here, without Redis; the
     * buyer's own key goes to Redis, where its earlier answer is. */
    int64_t now = clock_mono_ms(), probe = 0;
    if (od && !od->closing && !rq->idem &&
        soldout_check(soldout_shared(), rq->sku, now, CFG_LIVE(od->cfg, sold_out_flag_ms),
                      &probe) == SOLDOUT_FLAGGED) {
        metrics_add(M_ORDERS_SOLD_OUT_LOCAL, 1);
        fn(&(struct order_outcome){.result = ORDER_SOLD_OUT}, arg);
        return;
    }
    struct order_call *oc = xcalloc(1, sizeof *oc);
    *oc = (struct order_call){.od = od,
                              .fn = fn,
                              .arg = arg,
                              .sku = rq->sku,
                              .user = rq->user,
                              .qty = rq->qty,
                              .buyers_key = rq->idem != NULL,
                              .request_deadline_ms = rq->deadline_ms,
                              .sent_ms = now,
                              .probe = probe};
    if (!od || od->closing || !od->redis) {
        finish(oc, ORDER_UNAVAILABLE, NULL);
        return;
    }
    if (rq->idem)
        snprintf(oc->idem, sizeof oc->idem, "%s", rq->idem);
    else
        made_up_key(od, oc->idem);
    const struct desk_parent *parent = parent_get(od, rq->sku);
    if (parent)
        route(oc, parent);
    else
        reserve(oc);
}

/* ---- the desk ------------------------------------------------------------ */

struct order_desk *order_desk_new(struct event_base *base, const struct cfg *c, struct workers *ws,
                                  char *err, size_t errlen)
{
    struct order_desk *od = xcalloc(1, sizeof *od);
    od->cfg = c;
    od->base = base;
    od->workers = ws;
    od->queue_tail = &od->queue;
    od->flush = event_new(base, -1, 0, on_flush, od);
    if (!od->flush)
        abort();
    if (getentropy(&od->rng, sizeof od->rng) != 0 || od->rng == 0)
        od->rng = (uint64_t)time(NULL) * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)(uintptr_t)od;
    od->redis = redis_async_new(base, c, err, errlen);
    if (od->redis)
        redis_async_on_late(od->redis, on_late_reply, od);
    if (od->redis && strcmp(c->order_ack, "durable") == 0)
        od->waits = order_wait_new(base, c, err, errlen);
    if (!od->redis || (!od->waits && strcmp(c->order_ack, "durable") == 0)) {
        order_desk_free(od);
        return NULL;
    }
    return od;
}

void order_desk_close(struct order_desk *od)
{
    od->closing = 1;
}

int order_desk_pending(const struct order_desk *od)
{
    return od && od->redis ? redis_async_pending(od->redis) + od->queued : 0;
}

void order_desk_free(struct order_desk *od)
{
    if (!od)
        return;
    /* Scripts still in flight are answered first (their callbacks may hand
     * orders to the waiters), then the waiters learn their order is pending. */
    od->closing = 1; /* none of them asks again */
    /* orders queued for this turn were never sent: nothing taken */
    struct order_call *q = od->queue;
    od->queue = NULL;
    od->queued = 0;
    while (q) {
        struct order_call *next = q->next;
        finish(q, ORDER_UNAVAILABLE, NULL);
        q = next;
    }
    event_free(od->flush);
    order_reserve_free(&od->call);
    redis_async_free(od->redis);
    od->redis = NULL;
    order_wait_free(od->waits);
    od->waits = NULL;
    free(od);
}
