#include "order/order_life.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/embedded.h"
#include "core/fault.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "order/order.h"
#include "order/order_lookup.h"
#include "order/order_pending.h"
#include "order/soldout.h"
#include "sku/sku.h"
#include "store/dbtx.h"
#include "store/txlock.h"

/* Unsettled returns one transaction gives to Redis (more wait for the next). */
#define LIFE_SETTLE_MAX 1000
/* Transactions of one SKU in one sweep: a bound on a sweep's time. */
#define LIFE_SWEEP_ROUNDS 64

static void i64s(char *buf, size_t cap, int64_t v)
{
    snprintf(buf, cap, "%" PRId64, v);
}

/* ---- giving units back to Redis ------------------------------------------ */

/* The returns a transaction gives to Redis once it committed. */
struct release_job {
    struct worker_ctx *w;
    int64_t sku;
    PGresult *returns; /* orders_return_unsettled.sql: id, user_id, qty, return_epoch, status */
    const struct txlock *lock; /* the SKU's lock the transaction holds: fences the release */
    int done;                  /* order_release.lua answered */
};

/* Completion hook (before the lock's release, so under the SKU lock): gives
 * the committed returns to Redis.  Idempotent per order: a retry by anyone
 * gives nothing twice. */
static void release_on_commit(enum dbtx_outcome outcome, void *arg)
{
    struct release_job *j = arg;
    int n = j->returns ? PQntuples(j->returns) : 0;
    if (outcome != DBTX_COMMITTED || n == 0)
        return;
    fault_point("release_before_redis");
    char keys[5][KEYS_MAX], lock[KEYS_MAX], counter[KEYS_MAX + 8], fence[TXLOCK_FENCE_ARG_MAX];
    static const enum keys_kind kinds[] = {KEY_RELEASED, KEY_STOCK, KEY_BOUGHT, KEY_META,
                                           KEY_DEBTS};
    if (txlock_redis_fence(j->lock, j->sku, lock, counter, fence) != 0)
        return;
    const char **argv = xcalloc(8 + 5 * (size_t)n, sizeof *argv);
    size_t argc = 0;
    for (int i = 0; i < 5; i++) {
        keys_sku(keys[i], j->sku, kinds[i]);
        argv[argc++] = keys[i];
    }
    argv[argc++] = lock;
    argv[argc++] = counter;
    argv[argc++] = fence;
    for (int row = 0; row < n; row++)
        for (int col = 0; col < 5; col++)
            argv[argc++] = PQgetvalue(j->returns, row, col);
    redisReply *r =
        redis_conn_script(&j->w->redis, &script_order_release, 7, (int)argc - 7, argv, NULL);
    j->done = r && r->type == REDIS_REPLY_INTEGER;
    if (!j->done)
        log_warn("sku %" PRId64 ": giving %d returned orders to Redis failed (%s); the next "
                 "transaction on the SKU retries",
                 j->sku, n, r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
    if (r)
        freeReplyObject(r);
    free(argv);
}

/* The ids of the orders in 'returns' (orders_return_unsettled's rows) as a
 * PostgreSQL array, "{1,2}"; the caller frees it. */
static char *returns_ids(const PGresult *returns)
{
    int n = PQntuples(returns);
    size_t cap = 3 + (size_t)n * 21;
    char *ids = xmalloc(cap);
    size_t len = 0;
    ids[len++] = '{';
    for (int row = 0; row < n; row++)
        len += (size_t)snprintf(ids + len, cap - len, "%s%s", row ? "," : "",
                                PQgetvalue(returns, row, 0));
    snprintf(ids + len, cap - len, "}");
    return ids;
}

/* After the commit: the rows whose units Redis has back are settled.  A
 * failure here only costs a retry of the (idempotent) script later. */
static void mark_settled(struct worker_ctx *w, const struct release_job *j, int64_t own)
{
    int n = PQntuples(j->returns);
    char *ids = returns_ids(j->returns);
    PGresult *r = db_query(&w->db, "orders_return_settled", 1, (const char *[]){ids});
    PQclear(r);
    free(ids);
    metrics_add(M_RETURNS_SETTLED, n);
    if (n > own) {
        log_warn("sku %" PRId64 ": gave Redis the units of %" PRId64
                 " returned orders a process had left undone",
                 j->sku, n - own);
        metrics_add(M_RETURNS_SETTLED_LATE, n - own);
    }
}

/* ---- one transaction under the SKU lock --------------------------------- */

/* What a transaction does under the SKU's lock and fenced row: returns 1
 * when it wrote something, 0 when not, -1 when a statement failed; *own gets
 * the number of orders whose units it gave back to PostgreSQL. */
typedef int life_step(struct worker_ctx *w, struct dbtx *tx, int64_t sku, void *arg, int64_t *own);

/*
 * Runs step under the SKU's lock and fenced row lock, then reads the SKU's
 * unsettled returns (its own and any a dead process left), commits when
 * there is anything to commit, and gives them to Redis in the completion
 * hook, still under the lock.  Returns 1 when it committed, 0 when there was
 * nothing to do (rolled back), -1 on failure (nothing changed, or the commit's
 * outcome is settled by a later transaction).
 */
static int locked(struct worker_ctx *w, int64_t sku, life_step *step, void *arg)
{
    char sid[24], max[24];
    i64s(sid, sizeof sid, sku);
    i64s(max, sizeof max, LIFE_SETTLE_MAX);
    for (int attempt = 0; attempt < TXLOCK_FENCE_ATTEMPTS; attempt++) {
        struct txlock t;
        struct release_job j = {.w = w, .sku = sku, .lock = &t};
        struct dbtx *tx = sku_tx_begin(w, &t, sku, release_on_commit, &j);
        if (!tx)
            return -1;
        int64_t stock;
        int fenced = txlock_fence(&t, tx, &stock);
        if (fenced != 1) {
            (void)dbtx_rollback(tx);
            if (fenced == TXLOCK_STALE)
                continue; /* a writer wrote with a newer token first: lock again */
            return -1;
        }
        int64_t own = 0;
        int wrote = step(w, tx, sku, arg, &own);
        if (wrote >= 0)
            j.returns =
                dbtx_exec(tx, sql_text("orders_return_unsettled"), 2, (const char *[]){sid, max});
        if (wrote < 0 || !j.returns) {
            log_warn("sku %" PRId64 ": order lifecycle transaction failed: %s", sku,
                     dbtx_error(tx));
            (void)dbtx_rollback(tx);
            PQclear(j.returns);
            return -1;
        }
        if (!wrote && PQntuples(j.returns) == 0) {
            (void)dbtx_rollback(tx);
            PQclear(j.returns);
            return 0;
        }
        /* A COMMIT whose answer a failover cuts is looked up by the
         * transaction's id, which the new primary may have given another
         * transaction: the 'return' ledger rows written here (among the
         * unsettled returns just read) say whether it is this one.  Without
         * returns of its own, the hook only gives Redis units of returns
         * already committed, which is right whatever the answer. */
        if (own > 0) {
            char *ids = returns_ids(j.returns);
            int set =
                dbtx_set_witness(tx, sql_text("returns_witness"), 1, (const char *const[]){ids});
            free(ids);
            if (set != 0) {
                (void)dbtx_rollback(tx);
                PQclear(j.returns);
                return -1;
            }
        }
        int committed = sku_tx_commit(w, tx, &t, sku) == SKU_OK;
        if (committed && j.done) {
            (void)fault_pause("release_before_settled"); /* the lock is free again */
            mark_settled(w, &j, own);
            /* units came back: this process sells them at once (the others'
             * flags lapse within sold_out_flag_ms) */
            soldout_clear(soldout_shared(), sku);
        }
        PQclear(j.returns);
        return committed ? 1 : -1;
    }
    return -1;
}

/* ---- pay ----------------------------------------------------------------- */

enum life_result order_pay(struct worker_ctx *w, int64_t order_id, const char *payment_ref,
                           json_t **out)
{
    *out = NULL;
    char oid[24];
    i64s(oid, sizeof oid, order_id);
    PGresult *r = db_query(&w->db, "order_pay", 2, (const char *[]){oid, payment_ref});
    if (!r)
        return LIFE_UNAVAILABLE;
    int paid = PQntuples(r) == 1;
    PQclear(r);
    if (paid)
        metrics_add(M_ORDERS_PAID, 1);
    /* What the order is now (paid by us, or why not). */
    r = db_query(&w->db, "order_get", 1, (const char *[]){oid});
    if (!r)
        return paid ? LIFE_OK : LIFE_UNAVAILABLE; /* paid: a retry answers "replayed" */
    enum life_result res;
    const char *state = "pending";
    if (PQntuples(r) == 0) {
        int64_t sku, buyer;
        char entry[ORDER_ENTRY_MAX];
        enum order_result where = order_pending_where(w, order_id, &sku, &buyer, entry);
        res = where == ORDER_PENDING       ? LIFE_WRONG_STATE
              : where == ORDER_UNAVAILABLE ? LIFE_UNAVAILABLE
                                           : LIFE_NOT_FOUND;
        /* not written yet, and perhaps cancelled by its buyer already */
        int64_t cancelled =
            res == LIFE_WRONG_STATE ? order_cancel_requested(w, order_id, buyer, entry) : 0;
        if (cancelled < 0)
            res = LIFE_UNAVAILABLE;
        else if (cancelled > 0)
            state = "cancelled";
    } else {
        state = PQgetvalue(r, 0, 4);
        int same_ref = !PQgetisnull(r, 0, 11) && strcmp(PQgetvalue(r, 0, 11), payment_ref) == 0;
        if (paid)
            res = LIFE_OK;
        else if (strcmp(state, "paid") == 0)
            res = same_ref ? LIFE_REPLAYED : LIFE_REF_CONFLICT;
        else if (strcmp(state, "confirmed") != 0)
            res = LIFE_WRONG_STATE;
        else if (PQgetisnull(r, 0, 7))
            res = LIFE_WRONG_STATE; /* a SKU without a payment step: confirmed is final */
        else if (strcmp(PQgetvalue(r, 0, 12), "t") == 0) {
            res = LIFE_WRONG_STATE; /* its window passed; a sweeper expires it */
            state = "expired";
        } else
            res = LIFE_REF_CONFLICT; /* payable, but the reference paid another order */
    }
    if (res == LIFE_OK || res == LIFE_REPLAYED) {
        *out = order_row_json(r);
        json_object_set_new(*out, "payment_ref", json_string(payment_ref));
        if (res == LIFE_REPLAYED)
            json_object_set_new(*out, "replayed", json_true());
    } else if (res == LIFE_WRONG_STATE) {
        *out = json_pack("{s:s}", "status", state);
    }
    PQclear(r);
    return res;
}

/* ---- cancel -------------------------------------------------------------- */

struct cancel_arg {
    int64_t order_id, buyer;
    enum life_result res;
    char state[16];  /* LIFE_WRONG_STATE: what it is */
    int not_written; /* a pending order: recorded for the writer */
    int64_t units;   /* a confirmed order: its units, given back */
};

static int cancel_step(struct worker_ctx *w, struct dbtx *tx, int64_t sku, void *arg, int64_t *own)
{
    struct cancel_arg *c = arg;
    char sid[24], oid[24], uid[24];
    i64s(sid, sizeof sid, sku);
    i64s(oid, sizeof oid, c->order_id);
    i64s(uid, sizeof uid, c->buyer);
    PGresult *r = dbtx_exec(tx, sql_text("orders_cancel"), 3, (const char *[]){sid, oid, uid});
    if (!r)
        return -1;
    int64_t moved = PQntuples(r);
    c->units = moved == 1 ? atoll(PQgetvalue(r, 0, 2)) : 0;
    PQclear(r);
    if (moved == 1) {
        c->res = LIFE_OK;
        *own = 1;
        return 1;
    }
    /* Not a confirmed order of this buyer: what is it? */
    r = dbtx_exec(tx, sql_text("order_get"), 1, (const char *[]){oid});
    if (!r)
        return -1;
    if (PQntuples(r) == 1) {
        const char *state = PQgetvalue(r, 0, 4);
        if (atoll(PQgetvalue(r, 0, 2)) != c->buyer)
            c->res = LIFE_NOT_FOUND;
        else if (strcmp(state, "cancelled") == 0)
            c->res = LIFE_REPLAYED;
        else {
            /* confirmed here is final (no payment window), or its window
             * passed: as a payment would, it counts as expired, which the
             * next sweep makes it */
            int overdue = strcmp(state, "confirmed") == 0 && !PQgetisnull(r, 0, 7);
            c->res = LIFE_WRONG_STATE;
            snprintf(c->state, sizeof c->state, "%s", overdue ? "expired" : state);
        }
        PQclear(r);
        return 0;
    }
    PQclear(r);
    /* No row.  Under the SKU's row lock no writer is between its reads and
     * its commit, so a journal that still says pending means no writer has
     * written it: record the request, which the next writer reads under the
     * same row lock. */
    int64_t owner = 0;
    char entry[ORDER_ENTRY_MAX];
    enum order_result where = order_pending_owner_of(w, sku, c->order_id, &owner, entry);
    if (where == ORDER_UNAVAILABLE)
        return -1;
    if (where != ORDER_PENDING || owner != c->buyer) {
        /* Not in the journal: a 202 recorded in PostgreSQL whose reservation
         * Redis lost is settled by the reconciler under this same lock, and
         * reads the cancel requests as a writer does. */
        int64_t rec_sku = 0;
        int conflict = 0;
        int rec = order_pending_of(w, tx, c->order_id, c->buyer, &rec_sku, entry, &conflict);
        if (rec < 0)
            return -1;
        if (rec == 0 || rec_sku != sku) {
            c->res = LIFE_NOT_FOUND;
            return 0;
        }
        if (conflict) { /* its lookup says rejected: id_conflict */
            c->res = LIFE_WRONG_STATE;
            snprintf(c->state, sizeof c->state, "rejected");
            return 0;
        }
    }
    /* The request names this reservation: an id Redis issues again after a
     * failover, to the same buyer even, is another order, not cancelled. */
    r = dbtx_exec(tx, sql_text("order_cancel_request"), 4, (const char *[]){oid, sid, uid, entry});
    if (!r)
        return -1;
    c->res = strcmp(PQcmdTuples(r), "1") == 0 ? LIFE_OK : LIFE_REPLAYED;
    c->not_written = 1;
    PQclear(r);
    /* its witness, should the COMMIT's answer be lost in a failover (see
     * locked()): the request row written here */
    if (c->res == LIFE_OK && dbtx_set_witness(tx, sql_text("cancel_request_witness"), 1,
                                              (const char *const[]){oid}) != 0)
        return -1;
    return c->res == LIFE_OK; /* nothing returned yet: the writer gives the units back */
}

/* The SKU of buyer's order: from its row, else from the buyer's pending
 * reservation.  Returns LIFE_OK with *sku, LIFE_NOT_FOUND or
 * LIFE_UNAVAILABLE.  Another buyer's order is not found before any lock is
 * taken, through the same reads as a missing one (as order_lookup does). */
static enum life_result order_sku(struct worker_ctx *w, int64_t order_id, int64_t buyer,
                                  int64_t *sku)
{
    char oid[24];
    i64s(oid, sizeof oid, order_id);
    PGresult *r = db_query(&w->db, "order_sku", 1, (const char *[]){oid});
    if (!r)
        return LIFE_UNAVAILABLE;
    long long s, user;
    int found = db_get_i64(r, 0, 0, &s) == 0 && db_get_i64(r, 0, 1, &user) == 0;
    PQclear(r);
    if (found && user == buyer) {
        *sku = s;
        return LIFE_OK;
    }
    int64_t owner = 0;
    enum order_result where = order_pending_where(w, order_id, sku, &owner, NULL);
    if (where == ORDER_UNAVAILABLE)
        return LIFE_UNAVAILABLE;
    if (where == ORDER_PENDING && owner == buyer)
        return LIFE_OK;
    /* a 202 recorded in PostgreSQL whose reservation Redis lost: the lookup
     * shows it, so cancelling it must find it too */
    char entry[ORDER_ENTRY_MAX];
    int conflict = 0;
    int rec = order_pending_of(w, NULL, order_id, buyer, sku, entry, &conflict);
    return rec < 0 ? LIFE_UNAVAILABLE : rec ? LIFE_OK : LIFE_NOT_FOUND;
}

enum life_result order_cancel(struct worker_ctx *w, int64_t order_id, int64_t buyer, json_t **out)
{
    *out = NULL;
    int64_t sku = 0;
    enum life_result res = order_sku(w, order_id, buyer, &sku);
    if (res != LIFE_OK)
        return res;
    struct cancel_arg c = {.order_id = order_id, .buyer = buyer, .res = LIFE_UNAVAILABLE};
    int done = locked(w, sku, cancel_step, &c);
    if (done < 0)
        return LIFE_UNAVAILABLE;
    if (c.res == LIFE_OK && !c.not_written) {
        metrics_add(M_ORDERS_CANCELLED, 1);
        metrics_add(M_UNITS_RETURNED, c.units);
    }
    if (c.res == LIFE_WRONG_STATE) {
        *out = json_pack("{s:s}", "status", c.state);
        return c.res;
    }
    if (c.res != LIFE_OK && c.res != LIFE_REPLAYED)
        return c.res;
    /* The answer is what a lookup shows now. */
    if (order_lookup(w, order_id, buyer, out) != ORDER_FOUND)
        *out = json_pack("{s:I, s:I, s:I, s:s}", "order_id", (json_int_t)order_id, "sku_id",
                         (json_int_t)sku, "user_id", (json_int_t)buyer, "status", "cancelled");
    if (c.res == LIFE_REPLAYED)
        json_object_set_new(*out, "replayed", json_true());
    return c.res;
}

/* ---- expiry -------------------------------------------------------------- */

struct expire_arg {
    int64_t batch;
    int64_t expired, units; /* by this transaction */
};

static int expire_step(struct worker_ctx *w, struct dbtx *tx, int64_t sku, void *arg, int64_t *own)
{
    (void)w;
    struct expire_arg *e = arg;
    char sid[24], max[24];
    i64s(sid, sizeof sid, sku);
    i64s(max, sizeof max, e->batch);
    PGresult *r = dbtx_exec(tx, sql_text("orders_expire"), 2, (const char *[]){sid, max});
    if (!r)
        return -1;
    e->expired = PQntuples(r);
    e->units = 0;
    for (int row = 0; row < PQntuples(r); row++)
        e->units += atoll(PQgetvalue(r, row, 2));
    PQclear(r);
    *own = e->expired;
    return e->expired > 0;
}

int order_life_sweep(struct worker_ctx *w, int64_t batch, int64_t max_skus, int64_t *cursor,
                     struct life_sweep *s)
{
    memset(s, 0, sizeof *s);
    char max[24], after[24];
    i64s(max, sizeof max, max_skus);
    i64s(after, sizeof after, *cursor);
    /* from its partial indexes, whatever the statistics of an earlier sale's
     * millions of orders say (skus_lifecycle_due.sql) */
    PGresult *due = db_query_indexed(&w->db, "skus_lifecycle_due", 2, (const char *[]){max, after});
    if (!due)
        return -1;
    metrics_add(M_SWEEPS, 1);
    /* a full page: the next sweep goes on after its last SKU; else from the start */
    *cursor = PQntuples(due) == max_skus ? atoll(PQgetvalue(due, PQntuples(due) - 1, 0)) : 0;
    for (int row = 0; row < PQntuples(due); row++) {
        int64_t sku = atoll(PQgetvalue(due, row, 0));
        s->skus++;
        for (int round = 0; round < LIFE_SWEEP_ROUNDS; round++) {
            struct expire_arg e = {.batch = batch};
            int done = locked(w, sku, expire_step, &e);
            if (done < 0) {
                s->failures++;
                break;
            }
            if (done == 1 && e.expired > 0) {
                s->expired += e.expired;
                metrics_add(M_ORDERS_EXPIRED_UNPAID, e.expired);
                metrics_add(M_UNITS_RETURNED, e.units);
            }
            if (done == 0 || e.expired < batch)
                break; /* nothing more due on this SKU */
        }
    }
    PQclear(due);
    return 0;
}
