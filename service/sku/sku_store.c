#include "sku/sku_store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/embedded.h"
#include "core/fault.h"
#include "core/fmt.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/timefmt.h"
#include <rlock/resp.h>

/* Takes the SKU's lock.  Returns 0, or -1 (logged) when busy or Redis failed. */
static int lock_sku(struct worker_ctx *w, struct txlock *t, int64_t sku)
{
    char key[KEYS_MAX];
    keys_sku(key, sku, KEY_SKU_LOCK);
    const char *keys[] = {key};
    enum rlock_status st = txlock_acquire(t, &w->redis, w->cfg, sku, keys, 1);
    if (st != RLOCK_OK) {
        log_warn("lock %s: %s %s", key, rlock_status_str(st), t->lock.err);
        return -1;
    }
    return 0;
}

struct dbtx *sku_tx_begin_many(struct worker_ctx *w, struct txlock *t, const int64_t *ids, int n,
                               dbtx_hook_fn *hook, void *const *args)
{
    int held = 0, bound = 0, hooked = 1;
    while (held < n && lock_sku(w, &t[held], ids[held]) == 0)
        held++;
    struct dbtx *tx = NULL;
    if (held == n) {
        PGconn *conn = db_conn_get(&w->db);
        tx = conn ? dbtx_begin(conn, w->cfg->pg_dsn, DBTX_ISO_READ_COMMITTED, NULL, 0) : NULL;
    }
    /* Each lock's hook after its bind: hooks run newest first, so each one
     * runs while its own lock is still held. */
    while (tx && hooked && bound < n && txlock_bind(&t[bound], tx) == 0)
        hooked = dbtx_on_complete(tx, hook, args[bound++]) == 0;
    if (tx && hooked && bound == n)
        return tx;
    if (tx)
        (void)dbtx_rollback(tx); /* releases the bound locks through their hooks */
    for (int i = bound; i < held; i++)
        txlock_release(&t[i]);
    return NULL;
}

struct dbtx *sku_tx_begin(struct worker_ctx *w, struct txlock *t, int64_t sku, dbtx_hook_fn *hook,
                          void *arg)
{
    return sku_tx_begin_many(w, t, &sku, 1, hook, &arg);
}

PGresult *tx_query(struct dbtx *tx, const char *name, int n, const char *const *params)
{
    PGresult *r = dbtx_exec(tx, sql_text(name), n, params);
    if (!r)
        log_warn("query %s failed: %s", name, dbtx_error(tx));
    return r;
}

/* ---- loading into Redis (sku_store.h) ---------------------------------- */

int redis_run_id(struct worker_ctx *w, int64_t sku, char *out, size_t cap)
{
    out[0] = '\0';
    char key[KEYS_MAX];
    keys_sku(key, sku, KEY_STOCK);
    const char *argv[] = {"INFO", "server"};
    redisReply *r = redis_conn_cmd_at(&w->redis, key, 2, argv, NULL);
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "run_id:") : NULL;
    if (p) {
        p += 7;
        size_t n = strcspn(p, "\r\n");
        snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    }
    if (r)
        freeReplyObject(r);
    return out[0] ? 0 : -1;
}

void load_on_commit(enum dbtx_outcome outcome, void *arg)
{
    struct load_job *lj = arg;
    lj->res = SKU_UNAVAILABLE;
    if (outcome != DBTX_COMMITTED || !lj->wanted)
        return;
    char stock[24], limit[24];
    fmt_i64z(stock, lj->stock);
    fmt_i64z(limit, lj->limit);
    int pairs = lj->bought ? PQntuples(lj->bought) : 0;
    char lock[KEYS_MAX], counter[KEYS_MAX + 8], fence[TXLOCK_FENCE_ARG_MAX] = "";
    if (txlock_redis_fence(lj->lock, lj->id, lock, counter, fence) != 0)
        return;
    size_t nkeys = LOAD_NKEYS + lj->nrestore;
    const char **argv =
        xcalloc(nkeys + LOAD_NARGS + 2 * (size_t)pairs + 4 * lj->nrestore, sizeof *argv);
    char keys[7][KEYS_MAX];
    static const enum keys_kind kinds[] = {KEY_META,   KEY_STOCK, KEY_SEQ,    KEY_STREAM,
                                           KEY_BOUGHT, KEY_DEBTS, KEY_JOURNAL};
    for (int i = 0; i < 7; i++)
        keys_sku(keys[i], lj->id, kinds[i]);
    size_t argc = 0;
    for (int i = 0; i < 6; i++)
        argv[argc++] = keys[i];
    argv[argc++] = lock;
    argv[argc++] = counter;
    argv[argc++] = keys[6];
    for (size_t i = 0; i < lj->nrestore; i++)
        argv[argc++] = lj->restore[i].key;
    char npairs[24], ttl[24];
    fmt_i64z(npairs, pairs);
    fmt_i64z(ttl, lj->w->cfg->idempotency_ttl_s);
    const char *args[LOAD_NARGS] = {
        lj->epoch, stock,   limit,      lj->starts_ms, lj->ends_ms, KEYS_WRITER_GROUP,
        lj->mode,  lj->run, lj->parent, lj->bucket,    lj->buckets, fence,
        npairs,    ttl};
    for (int i = 0; i < LOAD_NARGS; i++)
        argv[argc++] = args[i];
    for (int i = 0; i < pairs; i++) {
        argv[argc++] = PQgetvalue(lj->bought, i, 0);
        argv[argc++] = PQgetvalue(lj->bought, i, 1);
    }
    for (size_t i = 0; i < lj->nrestore; i++) {
        argv[argc++] = lj->restore[i].order;
        argv[argc++] = lj->restore[i].entry;
        argv[argc++] = lj->restore[i].user;
        argv[argc++] = lj->restore[i].qty;
    }
    redisReply *r = redis_conn_script(&lj->w->redis, &script_sku_load, (int)nkeys,
                                      (int)(argc - nkeys), argv, NULL);
    free(argv);
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer < 0) {
        /* a newer rebuild's state is installed: this older snapshot stays out */
        log_warn("sku %" PRId64 ": load of epoch %s refused: Redis holds a newer one", lj->id,
                 lj->epoch);
        metrics_add(M_SKU_LOADS_SUPERSEDED, 1);
    } else if (r && r->type == REDIS_REPLY_INTEGER) {
        lj->res = r->integer == 1 ? SKU_OK : SKU_EXISTS;
        if (r->integer == 1)
            metrics_add(M_SKU_RELOADS, 1);
    } else {
        if (rlock_reply_kind(r) == RLOCK_REPLY_OOM)
            lj->res = SKU_NOT_LOADED_FULL;
        log_warn("sku %" PRId64 ": load into Redis failed: %s", lj->id,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
    }
    if (r)
        freeReplyObject(r);
}

int draw_epoch(struct dbtx *tx, struct load_job *lj)
{
    char sid[24];
    fmt_i64z(sid, lj->id);
    PGresult *r = tx_query(tx, "epoch_new", 1, (const char *[]){sid});
    int ok = r && PQntuples(r) == 1;
    if (ok)
        snprintf(lj->epoch, sizeof lj->epoch, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return ok ? 0 : -1;
}

enum sku_result sku_tx_commit_many(struct worker_ctx *w, struct dbtx *tx, const struct txlock *t,
                                   int n)
{
    for (int i = 0; i < n; i++)
        if (!txlock_still_valid(&t[i], w->cfg->lock_commit_margin_ms)) {
            log_warn("sku %" PRId64 ": lock lease too short to commit", t[i].sku);
            (void)dbtx_rollback(tx);
            return SKU_UNAVAILABLE;
        }
    return dbtx_commit(tx, NULL, 0, NULL) == DBTX_COMMITTED ? SKU_OK : SKU_UNAVAILABLE;
}

enum sku_result sku_tx_commit(struct worker_ctx *w, struct dbtx *tx, const struct txlock *t,
                              int64_t sku)
{
    (void)sku; /* the lock names it */
    return sku_tx_commit_many(w, tx, t, 1);
}

/* ---- create ------------------------------------------------------------ */

json_t *sku_created_json(const struct validate_sku *spec, int64_t id)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(id));
    json_object_set_new(o, "name", json_string(spec->name));
    json_object_set_new(o, "stock", json_integer(spec->stock));
    json_object_set_new(o, "available", json_integer(spec->stock));
    json_object_set_new(o, "per_user_limit", json_integer(spec->per_user_limit));
    char buf[40];
    if (spec->has_starts)
        timefmt_rfc3339(spec->starts_ms, buf, sizeof buf);
    json_object_set_new(o, "sale_starts_at", spec->has_starts ? json_string(buf) : json_null());
    if (spec->has_ends)
        timefmt_rfc3339(spec->ends_ms, buf, sizeof buf);
    json_object_set_new(o, "sale_ends_at", spec->has_ends ? json_string(buf) : json_null());
    json_object_set_new(o, "payment_window_s", json_integer(spec->payment_window_s));
    json_object_set_new(o, "buckets", json_integer(1));
    return o;
}

/* ---- adjust ------------------------------------------------------------ */

struct adjust_job {
    struct worker_ctx *w;
    int64_t sku;
    char id[24]; /* the adjustment's record in Redis: the transaction id */
    int sent;    /* stock_adjust.lua was sent: Redis may carry the delta */
};

/* Completion hook, before the lock's release.  Committed: drop the record.
 * Rolled back: take the delta back if (and only if) Redis applied it, also
 * when its reply never arrived.  Unknown: keep the record for reconciliation. */
static void adjust_on_complete(enum dbtx_outcome outcome, void *arg)
{
    struct adjust_job *a = arg;
    if (!a->sent)
        return;
    char stock[KEYS_MAX], adj[KEYS_MAX];
    keys_sku(stock, a->sku, KEY_STOCK);
    keys_sku(adj, a->sku, KEY_ADJUST);
    redisReply *r = NULL;
    if (outcome == DBTX_COMMITTED) {
        const char *argv[] = {"HDEL", adj, a->id};
        r = redis_conn_cmd(&a->w->redis, 3, argv, NULL);
    } else if (outcome == DBTX_ROLLED_BACK) {
        const char *argv[] = {stock, adj, a->id};
        r = redis_conn_script(&a->w->redis, &script_stock_adjust_undo, 2, 1, argv, NULL);
    } else {
        log_error("sku %" PRId64 ": adjustment %s outcome unknown; Redis record kept", a->sku,
                  a->id);
        return;
    }
    if (!r || r->type == REDIS_REPLY_ERROR)
        log_error("sku %" PRId64 ": adjustment %s: cannot settle Redis (%s): reconcile", a->sku,
                  a->id, dbtx_outcome_str(outcome));
    if (r)
        freeReplyObject(r);
}

/* Whether transaction 'txid' inserted an admin ledger row of 'sku'
 * (sql/adjust_witness.sql): 1 yes, 0 no, -1 when PostgreSQL failed. */
static int adjust_witnessed(struct dbtx *tx, int64_t sku, const char *txid)
{
    char skus[32];
    snprintf(skus, sizeof skus, "{%" PRId64 "}", sku);
    PGresult *r = tx_query(tx, "adjust_witness", 2, (const char *[]){skus, txid});
    if (!r)
        return -1;
    int yes = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    return yes;
}

/*
 * Settles the Redis records of earlier adjustments that never settled (their
 * process died between the Redis step and its completion hook, or its commit
 * outcome was unknown).  Called under the SKU lock with the SKU row locked by
 * the fence, so every earlier adjustment's transaction has ended and its
 * fate (sql/txid_fate.sql) is final: committed with the delta's ledger row
 * (sql/adjust_witness.sql), drop the record; aborted, never assigned here,
 * or the id of another transaction, take the delta back.  Returns 0, or -1
 * when Redis or PostgreSQL failed (nothing assumed).
 */
int settle_adjustments(struct worker_ctx *w, struct dbtx *tx, int64_t sku, const char *own,
                       int64_t *settled)
{
    char stock[KEYS_MAX], adj[KEYS_MAX];
    keys_sku(stock, sku, KEY_STOCK);
    keys_sku(adj, sku, KEY_ADJUST);
    const char *all[] = {"HKEYS", adj};
    redisReply *ids = redis_conn_cmd(&w->redis, 2, all, NULL);
    if (!ids || ids->type != REDIS_REPLY_ARRAY) {
        if (ids)
            freeReplyObject(ids);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < ids->elements && rc == 0; i++) {
        const char *id = ids->element[i]->str;
        if (!id)
            continue;
        /* A record under the running transaction's id is not its own (its
         * Redis step comes after this): a promoted standby gave the id again,
         * and the lost transaction that wrote it never committed here. */
        int reused = own[0] && strcmp(id, own) == 0;
        PGresult *r = tx_query(tx, "txid_fate", 1, (const char *[]){id});
        if (!r) {
            rc = -1;
            break;
        }
        const char *fate = reused                 ? "future"
                           : PQgetisnull(r, 0, 0) ? "unknown"
                                                  : PQgetvalue(r, 0, 0);
        /* 'committed' names a transaction, maybe another one than the delta's
         * (its id given again by a promoted standby): its ledger row says. */
        int ours = strcmp(fate, "committed") != 0 ? 1 : adjust_witnessed(tx, sku, id);
        if (ours < 0) {
            PQclear(r);
            rc = -1;
            break;
        }
        if (!ours) {
            log_warn("sku %" PRId64 ": adjustment %s: its transaction id committed another "
                     "transaction (a failover): taken back",
                     sku, id);
            fate = "future";
        }
        redisReply *done = NULL;
        if (strcmp(fate, "committed") == 0) {
            const char *argv[] = {"HDEL", adj, id};
            done = redis_conn_cmd(&w->redis, 3, argv, NULL);
        } else if (strcmp(fate, "aborted") == 0 || strcmp(fate, "future") == 0) {
            /* 'future': an id this primary never assigned (a lost primary's):
             * it never committed here */
            const char *argv[] = {stock, adj, id};
            done = redis_conn_script(&w->redis, &script_stock_adjust_undo, 2, 1, argv, NULL);
        } else {
            log_error("sku %" PRId64 ": adjustment %s is %s; the next reconciliation asks again",
                      sku, id, fate);
        }
        if (done && done->type != REDIS_REPLY_ERROR) {
            log_warn("sku %" PRId64 ": settled adjustment %s (%s)", sku, id, fate);
            metrics_add(M_ADJUSTMENTS_SETTLED, 1);
            if (settled)
                (*settled)++;
        } else if (done)
            rc = -1;
        if (done)
            freeReplyObject(done);
        PQclear(r);
    }
    freeReplyObject(ids);
    return rc;
}

/* Looks up the delta an Idempotency-Key already applied: to SKU 'scope', or
 * (parent) to the buckets of SKU 'scope'.  Returns 1 with rp filled, 0 when
 * the key is new, -1 on failure. */
static int adjust_replayed(struct dbtx *tx, int64_t scope, int parent, const char *idem,
                           struct sku_replay *rp)
{
    char sid[24];
    fmt_i64z(sid, scope);
    PGresult *r = tx_query(tx, parent ? "ledger_admin_by_key_parent" : "ledger_admin_by_key", 2,
                           (const char *[]){sid, idem});
    if (!r)
        return -1;
    int found = PQntuples(r) == 1;
    if (found) {
        rp->found = 1;
        rp->delta = atoll(PQgetvalue(r, 0, 0));
        rp->stock = atoll(PQgetvalue(r, 0, 1));
    }
    PQclear(r);
    return found;
}

static int cmp_move(const void *a, const void *b)
{
    const struct sku_move *x = a, *y = b;
    return x->sku < y->sku ? -1 : x->sku > y->sku;
}

/* Applies m[i].delta to stock_adjust.lua's Redis record of m[i], with the
 * adjustment's id.  Returns SKU_OK with m->available set, SKU_INSUFFICIENT
 * (m->available: what buyers could still take), SKU_NOT_LOADED or
 * SKU_UNAVAILABLE. */
static enum sku_result adjust_redis(struct worker_ctx *w, struct sku_move *m, struct adjust_job *a)
{
    char meta[KEYS_MAX], stock[KEYS_MAX], adj[KEYS_MAX], d[24];
    keys_sku(meta, m->sku, KEY_META);
    keys_sku(stock, m->sku, KEY_STOCK);
    keys_sku(adj, m->sku, KEY_ADJUST);
    fmt_i64z(d, m->delta);
    const char *argv[] = {meta, stock, adj, d, a->id};
    a->sent = 1;
    redisReply *rr = redis_conn_script(&w->redis, &script_stock_adjust, 3, 2, argv, NULL);
    const char *verdict = rr && rr->type == REDIS_REPLY_ARRAY && rr->elements >= 1 &&
                                  rr->element[0]->type == REDIS_REPLY_STRING
                              ? rr->element[0]->str
                              : NULL;
    if (verdict && rr->elements > 1)
        m->available = rr->element[1]->integer;
    enum sku_result res = rlock_reply_kind(rr) == RLOCK_REPLY_OOM ? SKU_STORE_FULL
                          : !verdict                              ? SKU_UNAVAILABLE
                          : strcmp(verdict, "ok") == 0            ? SKU_OK
                          : strcmp(verdict, "insufficient") == 0  ? SKU_INSUFFICIENT
                                                                  : SKU_NOT_LOADED;
    if (rr && rr->type == REDIS_REPLY_ERROR)
        log_warn("stock_adjust: %s", rr->str);
    if (rr)
        freeReplyObject(rr);
    return res;
}

/* One attempt of sku_adjust_moves; *stale is set when a fencing token was
 * refused because an order writer wrote the SKU with a newer token first. */
static enum sku_result adjust_once(struct worker_ctx *w, struct sku_move *m, int n,
                                   const struct sku_adjust_req *rq, struct sku_replay *rp,
                                   int *refused, int *stale)
{
    *stale = 0;
    *refused = -1;
    struct adjust_job a[SKU_MOVES_MAX];
    struct txlock t[SKU_MOVES_MAX];
    int64_t ids[SKU_MOVES_MAX] = {0};
    void *args[SKU_MOVES_MAX] = {0};
    for (int i = 0; i < n; i++) {
        a[i] = (struct adjust_job){.w = w, .sku = m[i].sku};
        ids[i] = m[i].sku;
        args[i] = &a[i];
        m[i].available = -1;
    }
    struct dbtx *tx = sku_tx_begin_many(w, t, ids, n, adjust_on_complete, args);
    if (!tx)
        return SKU_UNAVAILABLE;
    for (int i = 0; i < n; i++)
        snprintf(a[i].id, sizeof a[i].id, "%lld", dbtx_txid(tx));
    for (int i = 0; i < n; i++) {
        int fenced = txlock_fence(&t[i], tx, &m[i].before);
        if (fenced != 1) {
            *stale = fenced == TXLOCK_STALE;
            (void)dbtx_rollback(tx);
            return fenced == 0 ? SKU_UNKNOWN : SKU_UNAVAILABLE;
        }
        if (settle_adjustments(w, tx, m[i].sku, a[i].id, NULL) != 0) {
            (void)dbtx_rollback(tx);
            return SKU_UNAVAILABLE;
        }
    }
    /* A move into a bucket that others filled meanwhile (they held these
     * locks before us): nothing to do, so units do not swing to and fro. */
    long long now = -1;
    if (rq->short_sku && redis_sku_state(w, rq->short_sku, &now, NULL) == 0 &&
        now >= rq->short_of) {
        rp->skipped = 1;
        (void)dbtx_rollback(tx);
        return SKU_OK;
    }
    /* Under the SKUs' locks and rows: a retry of a delta that committed is
     * answered from the ledger, never applied twice. */
    int seen = rq->idem ? adjust_replayed(tx, rq->idem_scope, rq->idem_parent, rq->idem, rp) : 0;
    if (seen != 0) {
        (void)dbtx_rollback(tx);
        return seen < 0 ? SKU_UNAVAILABLE : rp->delta != rq->delta ? SKU_IDEM_MISMATCH : SKU_OK;
    }

    /* Database first, guarded: stock + delta >= 0.  A move of 0 only locks
     * its SKU (an Idempotency-Key of a parent is looked up under all of its
     * buckets' locks). */
    for (int i = 0; i < n; i++) {
        m[i].stock = m[i].before;
        if (m[i].delta == 0)
            continue;
        char sid[24], d[24], after[24];
        fmt_i64z(sid, m[i].sku);
        fmt_i64z(d, m[i].delta);
        PGresult *r = tx_query(tx, "sku_adjust", 2, (const char *[]){sid, d});
        if (!r || PQntuples(r) == 0) { /* the fence found the row: the guard refused */
            enum sku_result res = r ? SKU_INSUFFICIENT : SKU_UNAVAILABLE;
            *refused = r ? i : -1;
            PQclear(r);
            (void)dbtx_rollback(tx);
            return res;
        }
        m[i].stock = atoll(PQgetvalue(r, 0, 0));
        PQclear(r);
        fmt_i64z(after, m[i].stock);
        const char *led[] = {sid, "admin", d, after, NULL, rq->reason, rq->idem};
        r = tx_query(tx, "ledger_insert", 7, led);
        PQclear(r);
        if (!r) {
            (void)dbtx_rollback(tx);
            return SKU_UNAVAILABLE;
        }
    }

    /* A COMMIT whose answer a failover cuts is looked up by the transaction's
     * id, which the new primary may have given another transaction: the
     * ledger rows inserted here say whether it is this one. */
    char skus[SKU_MOVES_MAX * 21 + 3];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        if (m[i].delta != 0)
            len += (size_t)snprintf(skus + len, sizeof skus - len, "%s%lld", len ? "," : "{",
                                    (long long)m[i].sku);
    if (len > 0) {
        snprintf(skus + len, sizeof skus - len, "}");
        const char *witness_p[] = {skus};
        if (dbtx_set_witness(tx, sql_text("adjust_witness"), 1, witness_p) != 0) {
            (void)dbtx_rollback(tx);
            return SKU_UNAVAILABLE;
        }
    }

    /* Then Redis, guarded the same way against what buyers can still take:
     * the units taken first, so that a refusal never leaves units given to
     * one SKU for a moment that its undo takes back from buyers. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (m[i].delta == 0 || (m[i].delta < 0) != (pass == 0))
                continue;
            enum sku_result res = adjust_redis(w, &m[i], &a[i]);
            if (res != SKU_OK) {
                *refused = res == SKU_INSUFFICIENT ? i : -1;
                (void)dbtx_rollback(tx);
                return res;
            }
            if (n > 1 && pass == 0)
                fault_point("adjust_moves_half_done"); /* units taken, not given yet */
        }
    fault_point("adjust_after_redis");
    return sku_tx_commit_many(w, tx, t, n);
}

enum sku_result sku_adjust_moves(struct worker_ctx *w, struct sku_move *m, int n,
                                 const struct sku_adjust_req *rq, struct sku_replay *rp,
                                 int *refused)
{
    memset(rp, 0, sizeof *rp);
    *refused = -1;
    if (n < 1 || n > SKU_MOVES_MAX)
        return SKU_UNAVAILABLE;
    qsort(m, (size_t)n, sizeof *m, cmp_move); /* every taker locks in one order: no deadlock */
    enum sku_result res = SKU_UNAVAILABLE;
    int stale = 1;
    for (int i = 0; i < TXLOCK_FENCE_ATTEMPTS && stale; i++)
        res = adjust_once(w, m, n, rq, rp, refused, &stale);
    return res;
}

/* ---- reads ------------------------------------------------------------- */

/* Reads the Redis side of a SKU.  Returns 0, or -1 when Redis failed.
 * *available is -1 when the SKU is not loaded. */
int redis_sku_state(struct worker_ctx *w, int64_t sku, long long *available, long long *queued)
{
    char stock[KEYS_MAX], stream[KEYS_MAX];
    keys_sku(stock, sku, KEY_STOCK);
    keys_sku(stream, sku, KEY_STREAM);
    const char *get[] = {"GET", stock};
    redisReply *r = redis_conn_cmd(&w->redis, 2, get, NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    *available = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    if (!queued)
        return 0;
    const char *xlen[] = {"XLEN", stream};
    r = redis_conn_cmd(&w->redis, 2, xlen, NULL);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    *queued = r->integer;
    freeReplyObject(r);
    return 0;
}

enum sku_result sku_view_row(struct worker_ctx *w, int64_t sku, int admin, json_t **out)
{
    *out = NULL;
    char sid[24];
    fmt_i64z(sid, sku);
    PGresult *r = db_query(&w->db, "sku_get", 1, (const char *[]){sid});
    if (!r)
        return SKU_UNAVAILABLE;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return SKU_UNKNOWN;
    }
    long long available, queued;
    if (redis_sku_state(w, sku, &available, admin ? &queued : NULL) != 0) {
        PQclear(r);
        return SKU_UNAVAILABLE;
    }
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(sku));
    json_object_set_new(o, "name", json_string(PQgetvalue(r, 0, 1)));
    json_object_set_new(o, "per_user_limit", json_integer(atoll(PQgetvalue(r, 0, 4))));
    db_json_time(o, "sale_starts_at", r, 5);
    db_json_time(o, "sale_ends_at", r, 6);
    json_object_set_new(o, "payment_window_s", json_integer(atoll(PQgetvalue(r, 0, 7))));
    json_object_set_new(o, "buckets", json_integer(atoll(PQgetvalue(r, 0, 8))));
    if (!PQgetisnull(r, 0, 9))
        json_object_set_new(o, "bucket_of", json_integer(atoll(PQgetvalue(r, 0, 9))));
    /* An unloaded SKU has no known availability; it is never reported as stock. */
    json_object_set_new(o, "available", available >= 0 ? json_integer(available) : json_null());
    if (admin) {
        long long db_stock = atoll(PQgetvalue(r, 0, 2));
        json_object_set_new(o, "initial_stock", json_integer(atoll(PQgetvalue(r, 0, 3))));
        json_object_set_new(o, "db_stock", json_integer(db_stock));
        json_object_set_new(o, "redis_available",
                            available >= 0 ? json_integer(available) : json_null());
        json_object_set_new(o, "in_flight_units",
                            available >= 0 ? json_integer(db_stock - available) : json_null());
        json_object_set_new(o, "pending_orders", json_integer(queued));
        PGresult *s = db_query(&w->db, "sku_stats", 1, (const char *[]){sid});
        if (!s || PQntuples(s) != 1) {
            PQclear(s);
            PQclear(r);
            json_decref(o);
            return SKU_UNAVAILABLE;
        }
        /* units held by buyers: confirmed (unpaid) and paid orders */
        json_object_set_new(o, "confirmed_units", json_integer(atoll(PQgetvalue(s, 0, 1))));
        static const char *const by_state[] = {"confirmed_orders", "rejected_orders", "paid_orders",
                                               "cancelled_orders", "expired_orders"};
        for (int i = 0; i < 5; i++)
            json_object_set_new(o, by_state[i], json_integer(atoll(PQgetvalue(s, 0, 2 + i))));
        PQclear(s);
    }
    PQclear(r);
    *out = o;
    return SKU_OK;
}
