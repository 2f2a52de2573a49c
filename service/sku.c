#include "sku.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dbtx.h"
#include "embedded.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "txlock.h"

void sku_format_time(int64_t ms, char *out, size_t cap)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/* Sets key of o to the RFC 3339 time of column col, or null. */
static void set_time(json_t *o, const char *key, const PGresult *r, int col)
{
    long long ms;
    if (db_get_i64(r, 0, col, &ms) != 0) {
        json_object_set_new(o, key, json_null());
        return;
    }
    char buf[40];
    sku_format_time(ms, buf, sizeof buf);
    json_object_set_new(o, key, json_string(buf));
}

static void i64s(char *buf, size_t cap, int64_t v)
{
    snprintf(buf, cap, "%" PRId64, v);
}

/* Takes the SKU's lock.  Returns 0, or -1 (logged) when busy or Redis failed. */
static int lock_sku(struct worker_ctx *w, struct txlock *t, int64_t sku)
{
    char key[KEYS_MAX];
    keys_sku(key, sku, KEY_SKU_LOCK);
    memset(t, 0, sizeof *t);
    t->redis = &w->redis;
    struct rlock_opts o = txlock_opts(w->cfg);
    redisContext *c = redis_conn_get(&w->redis);
    enum rlock_status st = c ? rlock_acquire(c, &t->lock, key, &o) : RLOCK_ERR;
    if (st != RLOCK_OK) {
        log_warn("lock %s: %s", key, rlock_status_str(st));
        rlock_clear(&t->lock);
        return -1;
    }
    return 0;
}

/* Begins a transaction that owns the SKU lock t.  On NULL the lock is released. */
static struct dbtx *begin_locked(struct worker_ctx *w, struct txlock *t)
{
    PGconn *conn = db_conn_get(&w->db);
    struct dbtx *tx =
        conn ? dbtx_begin(conn, w->cfg->pg_dsn, DBTX_ISO_READ_COMMITTED, NULL, 0) : NULL;
    if (tx && txlock_bind(t, tx) == 0)
        return tx;
    if (tx)
        (void)dbtx_rollback(tx);
    redisContext *c = redis_conn_get(&w->redis);
    if (c)
        (void)rlock_release(c, &t->lock);
    rlock_clear(&t->lock);
    return NULL;
}

/* Runs sql/<name>.sql in tx and returns the result, or NULL on failure. */
static PGresult *tx_query(struct dbtx *tx, const char *name, int n, const char *const *params)
{
    PGresult *r = dbtx_exec(tx, sql_text(name), n, params);
    if (!r)
        log_warn("query %s failed: %s", name, dbtx_error(tx));
    return r;
}

/* ---- create ------------------------------------------------------------ */

struct load_undo {
    struct worker_ctx *w;
    int64_t sku;
    char epoch[24];
    int loaded;
};

static void sku_load_argv(int64_t sku, char keys[4][KEYS_MAX], const char **argv)
{
    keys_sku(keys[0], sku, KEY_META);
    keys_sku(keys[1], sku, KEY_STOCK);
    keys_sku(keys[2], sku, KEY_SEQ);
    keys_sku(keys[3], sku, KEY_STREAM);
    for (int i = 0; i < 4; i++)
        argv[i] = keys[i];
}

/* Completion hook: a load whose transaction did not commit is taken back. */
static void undo_load(enum dbtx_outcome outcome, void *arg)
{
    struct load_undo *u = arg;
    if (!u->loaded || outcome == DBTX_COMMITTED)
        return;
    if (outcome == DBTX_UNKNOWN) {
        log_error("sku %" PRId64 ": create outcome unknown; Redis keys kept for reconcile", u->sku);
        return;
    }
    char keys[4][KEYS_MAX];
    const char *argv[5];
    sku_load_argv(u->sku, keys, argv);
    argv[4] = u->epoch;
    redisReply *r = redis_conn_script(&u->w->redis, &script_sku_unload, 4, 1, argv, NULL);
    if (!r || r->type == REDIS_REPLY_ERROR)
        log_error("sku %" PRId64 ": cannot unload after rollback", u->sku);
    if (r)
        freeReplyObject(r);
}

struct load_spec {
    int64_t id, stock, limit;
    const char *starts_ms, *ends_ms; /* "" when open-ended */
};

/*
 * Draws a fresh epoch in tx and loads the SKU into Redis (sku_load.lua), with
 * the units each user already holds from 'bought' (rows user_id, units; may be
 * NULL).  Returns SKU_OK with undo->loaded set, SKU_EXISTS when Redis already
 * holds the SKU, or SKU_UNAVAILABLE.  The caller rolls back on failure.
 */
static enum sku_result load_redis(struct worker_ctx *w, struct dbtx *tx, const struct txlock *t,
                                  struct load_undo *undo, const struct load_spec *ls,
                                  const PGresult *bought)
{
    char sid[24], stock[24], limit[24];
    i64s(sid, sizeof sid, ls->id);
    i64s(stock, sizeof stock, ls->stock);
    i64s(limit, sizeof limit, ls->limit);
    PGresult *r = tx_query(tx, "epoch_new", 1, (const char *[]){sid});
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SKU_UNAVAILABLE;
    }
    snprintf(undo->epoch, sizeof undo->epoch, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);

    int pairs = bought ? PQntuples(bought) : 0;
    const char **argv = calloc(10 + 2 * (size_t)pairs, sizeof *argv);
    if (!argv)
        abort();
    char keys[4][KEYS_MAX];
    sku_load_argv(ls->id, keys, argv);
    argv[4] = undo->epoch;
    argv[5] = stock;
    argv[6] = limit;
    argv[7] = ls->starts_ms;
    argv[8] = ls->ends_ms;
    argv[9] = KEYS_WRITER_GROUP;
    for (int i = 0; i < pairs; i++) {
        argv[10 + 2 * i] = PQgetvalue(bought, i, 0);
        argv[11 + 2 * i] = PQgetvalue(bought, i, 1);
    }
    redisReply *rr = redis_conn_script(&w->redis, &script_sku_load, 4, 6 + 2 * pairs, argv, NULL);
    free(argv);
    enum sku_result res = SKU_OK;
    if (!rr || rr->type != REDIS_REPLY_INTEGER) {
        if (rr && rr->type == REDIS_REPLY_ERROR)
            log_warn("sku_load: %s", rr->str);
        res = SKU_UNAVAILABLE;
    } else if (rr->integer == 0) {
        res = SKU_EXISTS; /* Redis already holds this SKU: a second load would double it */
    } else {
        undo->loaded = 1;
    }
    if (rr)
        freeReplyObject(rr);
    if (res == SKU_OK && !txlock_still_valid(t, w->cfg->lock_commit_margin_ms)) {
        log_warn("sku %" PRId64 ": lock lease too short to commit", ls->id);
        res = SKU_UNAVAILABLE;
    }
    return res;
}

/* Creates the SKU with the given id (see sku_create). */
static enum sku_result create_with_id(struct worker_ctx *w, const struct validate_sku *spec,
                                      int64_t id, json_t **out)
{
    struct txlock t;
    if (lock_sku(w, &t, id) != 0)
        return SKU_UNAVAILABLE;
    struct dbtx *tx = begin_locked(w, &t);
    if (!tx)
        return SKU_UNAVAILABLE;
    struct load_undo undo = {.w = w, .sku = id};
    if (dbtx_on_complete(tx, undo_load, &undo) != 0) {
        (void)dbtx_rollback(tx);
        return SKU_UNAVAILABLE;
    }

    char sid[24], stock[24], limit[24], starts[24], ends[24];
    i64s(sid, sizeof sid, id);
    i64s(stock, sizeof stock, spec->stock);
    i64s(limit, sizeof limit, spec->per_user_limit);
    i64s(starts, sizeof starts, spec->starts_ms);
    i64s(ends, sizeof ends, spec->ends_ms);
    const char *ins[] = {sid,
                         spec->name,
                         stock,
                         limit,
                         spec->has_starts ? starts : NULL,
                         spec->has_ends ? ends : NULL};
    PGresult *r = tx_query(tx, "sku_insert", 6, ins);
    if (!r || PQntuples(r) == 0) {
        enum sku_result res = r ? SKU_EXISTS : SKU_UNAVAILABLE;
        PQclear(r);
        (void)dbtx_rollback(tx);
        return res;
    }
    PQclear(r);
    const char *led[] = {sid, "initial", stock, stock, NULL, NULL};
    r = tx_query(tx, "ledger_insert", 6, led);
    PQclear(r);
    struct load_spec ls = {id, spec->stock, spec->per_user_limit, spec->has_starts ? starts : "",
                           spec->has_ends ? ends : ""};
    enum sku_result res = r ? load_redis(w, tx, &t, &undo, &ls, NULL) : SKU_UNAVAILABLE;
    if (res != SKU_OK) {
        (void)dbtx_rollback(tx);
        return res;
    }
    if (dbtx_commit(tx, NULL, 0, NULL) != DBTX_COMMITTED)
        return SKU_UNAVAILABLE;

    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(id));
    json_object_set_new(o, "name", json_string(spec->name));
    json_object_set_new(o, "stock", json_integer(spec->stock));
    json_object_set_new(o, "available", json_integer(spec->stock));
    json_object_set_new(o, "per_user_limit", json_integer(spec->per_user_limit));
    char buf[40];
    if (spec->has_starts)
        sku_format_time(spec->starts_ms, buf, sizeof buf);
    json_object_set_new(o, "sale_starts_at", spec->has_starts ? json_string(buf) : json_null());
    if (spec->has_ends)
        sku_format_time(spec->ends_ms, buf, sizeof buf);
    json_object_set_new(o, "sale_ends_at", spec->has_ends ? json_string(buf) : json_null());
    *out = o;
    return SKU_OK;
}

/* Ids drawn from the sequence may already be taken by SKUs created with an
 * explicit id; a taken one is skipped, a bounded number of times. */
#define SKU_ID_ATTEMPTS 16

enum sku_result sku_create(struct worker_ctx *w, const struct validate_sku *spec, json_t **out)
{
    *out = NULL;
    if (spec->has_id)
        return create_with_id(w, spec, spec->id, out);
    enum sku_result res = SKU_EXISTS;
    for (int i = 0; i < SKU_ID_ATTEMPTS && res == SKU_EXISTS; i++) {
        PGresult *r = db_query(&w->db, "sku_next_id", 0, NULL);
        long long id;
        int ok = r && db_get_i64(r, 0, 0, &id) == 0;
        PQclear(r);
        if (!ok)
            return SKU_UNAVAILABLE;
        res = create_with_id(w, spec, id, out);
    }
    return res;
}

enum sku_result sku_reload(struct worker_ctx *w, int64_t sku, json_t **out)
{
    *out = NULL;
    struct txlock t;
    if (lock_sku(w, &t, sku) != 0)
        return SKU_UNAVAILABLE;
    struct dbtx *tx = begin_locked(w, &t);
    if (!tx)
        return SKU_UNAVAILABLE;
    struct load_undo undo = {.w = w, .sku = sku};
    if (dbtx_on_complete(tx, undo_load, &undo) != 0) {
        (void)dbtx_rollback(tx);
        return SKU_UNAVAILABLE;
    }
    char sid[24];
    i64s(sid, sizeof sid, sku);
    /* The row lock keeps writers and deltas out while Redis is rebuilt from it. */
    PGresult *row = tx_query(tx, "sku_lock_row", 1, (const char *[]){sid});
    PGresult *info =
        row && PQntuples(row) ? tx_query(tx, "sku_get", 1, (const char *[]){sid}) : NULL;
    PGresult *bought = info ? tx_query(tx, "sku_bought", 1, (const char *[]){sid}) : NULL;
    enum sku_result res = !row ? SKU_UNAVAILABLE : !PQntuples(row) ? SKU_UNKNOWN : SKU_OK;
    if (res == SKU_OK && !bought)
        res = SKU_UNAVAILABLE;
    int64_t stock = 0, limit = 0;
    if (res == SKU_OK) {
        stock = atoll(PQgetvalue(info, 0, 2));
        limit = atoll(PQgetvalue(info, 0, 4));
        struct load_spec ls = {sku, stock, limit, PQgetvalue(info, 0, 5), PQgetvalue(info, 0, 6)};
        res = load_redis(w, tx, &t, &undo, &ls, bought);
    }
    PQclear(row);
    PQclear(info);
    PQclear(bought);
    if (res != SKU_OK) {
        (void)dbtx_rollback(tx);
        return res;
    }
    if (dbtx_commit(tx, NULL, 0, NULL) != DBTX_COMMITTED)
        return SKU_UNAVAILABLE;
    *out = json_pack("{s:I, s:I, s:I, s:s}", "id", (json_int_t)sku, "available", (json_int_t)stock,
                     "per_user_limit", (json_int_t)limit, "epoch", undo.epoch);
    return SKU_OK;
}

/* ---- adjust ------------------------------------------------------------ */

struct adjust_undo {
    struct worker_ctx *w;
    int64_t sku;
    int64_t delta;
    int applied; /* Redis already carries the delta */
};

/* Runs stock_adjust.lua.  Returns the reply or NULL. */
static redisReply *redis_adjust(struct worker_ctx *w, int64_t sku, int64_t delta, int force)
{
    char meta[KEYS_MAX], stock[KEYS_MAX], d[24];
    keys_sku(meta, sku, KEY_META);
    keys_sku(stock, sku, KEY_STOCK);
    i64s(d, sizeof d, delta);
    const char *argv[] = {meta, stock, d, force ? "force" : "guard"};
    redisReply *r = redis_conn_script(&w->redis, &script_stock_adjust, 2, 2, argv, NULL);
    if (r && r->type == REDIS_REPLY_ERROR) {
        log_warn("stock_adjust: %s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    if (r && (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
              r->element[0]->type != REDIS_REPLY_STRING)) {
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* Completion hook, before the lock's release: Redis took the delta but the
 * database did not, so take it back (forced: buyers may have taken the units
 * meanwhile; the database guard then rejects those orders and returns them). */
static void undo_adjust(enum dbtx_outcome outcome, void *arg)
{
    struct adjust_undo *u = arg;
    if (!u->applied || outcome == DBTX_COMMITTED)
        return;
    if (outcome == DBTX_UNKNOWN) {
        log_error("sku %" PRId64 ": delta %" PRId64
                  " in Redis, database outcome unknown: reconcile",
                  u->sku, u->delta);
        return;
    }
    redisReply *r = redis_adjust(u->w, u->sku, -u->delta, 1);
    if (!r)
        log_error("sku %" PRId64 ": cannot undo Redis delta %" PRId64 ": reconcile", u->sku,
                  u->delta);
    else
        freeReplyObject(r);
}

enum sku_result sku_adjust(struct worker_ctx *w, int64_t sku, int64_t delta, const char *reason,
                           json_t **out)
{
    *out = NULL;
    struct txlock t;
    if (lock_sku(w, &t, sku) != 0)
        return SKU_UNAVAILABLE;
    struct dbtx *tx = begin_locked(w, &t);
    if (!tx)
        return SKU_UNAVAILABLE;
    struct adjust_undo undo = {.w = w, .sku = sku, .delta = delta};
    if (dbtx_on_complete(tx, undo_adjust, &undo) != 0) {
        (void)dbtx_rollback(tx);
        return SKU_UNAVAILABLE;
    }
    char sid[24], d[24];
    i64s(sid, sizeof sid, sku);
    i64s(d, sizeof d, delta);

    /* Database first, guarded: stock + delta >= 0. */
    PGresult *r = tx_query(tx, "sku_adjust", 2, (const char *[]){sid, d});
    if (!r) {
        (void)dbtx_rollback(tx);
        return SKU_UNAVAILABLE;
    }
    if (PQntuples(r) == 0) {
        PQclear(r);
        r = tx_query(tx, "sku_get", 1, (const char *[]){sid});
        enum sku_result res = !r ? SKU_UNAVAILABLE : PQntuples(r) ? SKU_INSUFFICIENT : SKU_UNKNOWN;
        if (res == SKU_INSUFFICIENT) {
            *out = json_object();
            json_object_set_new(*out, "stock", json_integer(atoll(PQgetvalue(r, 0, 2))));
        }
        PQclear(r);
        (void)dbtx_rollback(tx);
        return res;
    }
    int64_t db_stock = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    char after[24];
    i64s(after, sizeof after, db_stock);
    const char *led[] = {sid, "admin", d, after, NULL, reason};
    r = tx_query(tx, "ledger_insert", 6, led);
    if (!r) {
        (void)dbtx_rollback(tx);
        return SKU_UNAVAILABLE;
    }
    PQclear(r);

    /* Then Redis, guarded the same way against what buyers can still take. */
    redisReply *rr = redis_adjust(w, sku, delta, 0);
    if (!rr) {
        (void)dbtx_rollback(tx);
        return SKU_UNAVAILABLE;
    }
    const char *verdict = rr->element[0]->str;
    long long available = rr->elements > 1 ? rr->element[1]->integer : 0;
    enum sku_result res = SKU_OK;
    if (strcmp(verdict, "ok") == 0)
        undo.applied = 1;
    else if (strcmp(verdict, "insufficient") == 0)
        res = SKU_INSUFFICIENT;
    else
        res = SKU_UNAVAILABLE; /* not loaded: the database alone must not move */
    freeReplyObject(rr);
    if (res == SKU_OK && !txlock_still_valid(&t, w->cfg->lock_commit_margin_ms)) {
        log_warn("sku %" PRId64 ": lock lease too short to commit", sku);
        res = SKU_UNAVAILABLE;
    }
    if (res != SKU_OK) {
        (void)dbtx_rollback(tx);
        if (res == SKU_INSUFFICIENT) {
            *out = json_object();
            json_object_set_new(*out, "available", json_integer(available));
        }
        return res;
    }
    if (dbtx_commit(tx, NULL, 0, NULL) != DBTX_COMMITTED)
        return SKU_UNAVAILABLE;
    metrics_add(M_STOCK_ADJUSTMENTS, 1);
    json_t *o = json_object();
    json_object_set_new(o, "sku_id", json_integer(sku));
    json_object_set_new(o, "delta", json_integer(delta));
    json_object_set_new(o, "stock", json_integer(db_stock));
    json_object_set_new(o, "available", json_integer(available));
    *out = o;
    return SKU_OK;
}

/* ---- reads ------------------------------------------------------------- */

/* Reads the Redis side of a SKU.  Returns 0, or -1 when Redis failed.
 * *available is -1 when the SKU is not loaded. */
static int redis_sku_state(struct worker_ctx *w, int64_t sku, long long *available,
                           long long *queued)
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

enum sku_result sku_view(struct worker_ctx *w, int64_t sku, int admin, json_t **out)
{
    *out = NULL;
    char sid[24];
    i64s(sid, sizeof sid, sku);
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
    set_time(o, "sale_starts_at", r, 5);
    set_time(o, "sale_ends_at", r, 6);
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
        json_object_set_new(o, "confirmed_units", json_integer(atoll(PQgetvalue(s, 0, 1))));
        json_object_set_new(o, "confirmed_orders", json_integer(atoll(PQgetvalue(s, 0, 2))));
        json_object_set_new(o, "rejected_orders", json_integer(atoll(PQgetvalue(s, 0, 3))));
        PQclear(s);
    }
    PQclear(r);
    *out = o;
    return SKU_OK;
}

/* Reads a decided order from PostgreSQL: SKU_OK with *out, SKU_UNKNOWN when
 * there is no row (yet), SKU_UNAVAILABLE. */
static enum sku_result order_row(struct worker_ctx *w, int64_t order_id, json_t **out)
{
    char oid[24];
    i64s(oid, sizeof oid, order_id);
    PGresult *r = db_query(&w->db, "order_get", 1, (const char *[]){oid});
    if (!r)
        return SKU_UNAVAILABLE;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SKU_UNKNOWN;
    }
    json_t *o = json_object();
    json_object_set_new(o, "order_id", json_integer(order_id));
    json_object_set_new(o, "sku_id", json_integer(atoll(PQgetvalue(r, 0, 1))));
    json_object_set_new(o, "user_id", json_integer(atoll(PQgetvalue(r, 0, 2))));
    json_object_set_new(o, "qty", json_integer(atoll(PQgetvalue(r, 0, 3))));
    json_object_set_new(o, "status", json_string(PQgetvalue(r, 0, 4)));
    if (!PQgetisnull(r, 0, 5))
        json_object_set_new(o, "reason", json_string(PQgetvalue(r, 0, 5)));
    set_time(o, "reserved_at", r, 6);
    PQclear(r);
    *out = o;
    return SKU_OK;
}

enum sku_result order_view(struct worker_ctx *w, int64_t order_id, json_t **out)
{
    *out = NULL;
    enum sku_result res = order_row(w, order_id, out);
    if (res != SKU_UNKNOWN)
        return res;
    /* Not decided yet?  The epoch names the SKU load, the journal the state. */
    char epoch[24], oid[24];
    i64s(epoch, sizeof epoch, keys_order_epoch(order_id));
    i64s(oid, sizeof oid, order_id);
    PGresult *r = db_query(&w->db, "epoch_sku", 1, (const char *[]){epoch});
    if (!r)
        return SKU_UNAVAILABLE;
    long long sku;
    int found = db_get_i64(r, 0, 0, &sku) == 0;
    PQclear(r);
    if (!found)
        return SKU_UNKNOWN;
    char journal[KEYS_MAX];
    keys_sku(journal, sku, KEY_JOURNAL);
    const char *argv[] = {"HGET", journal, oid};
    redisReply *rr = redis_conn_cmd(&w->redis, 3, argv, NULL);
    if (!rr || rr->type == REDIS_REPLY_ERROR) {
        if (rr)
            freeReplyObject(rr);
        return SKU_UNAVAILABLE;
    }
    int pending = rr->type == REDIS_REPLY_STRING && strcmp(rr->str, "pending") == 0;
    freeReplyObject(rr);
    if (pending) {
        *out = json_pack("{s:I, s:I, s:s}", "order_id", (json_int_t)order_id, "sku_id",
                         (json_int_t)sku, "status", "pending");
        return SKU_OK;
    }
    /* The writer commits before it drops the journal entry, so a miss in both
     * reads can be a commit that landed between them: read the row again. */
    return order_row(w, order_id, out);
}

enum sku_result sku_exists(struct worker_ctx *w, int64_t sku)
{
    char sid[24];
    i64s(sid, sizeof sid, sku);
    PGresult *r = db_query(&w->db, "sku_get", 1, (const char *[]){sid});
    if (!r)
        return SKU_UNAVAILABLE;
    enum sku_result res = PQntuples(r) ? SKU_OK : SKU_UNKNOWN;
    PQclear(r);
    return res;
}

enum sku_result sku_health(struct worker_ctx *w, json_t **out)
{
    const char *ping[] = {"PING"};
    redisReply *rr = redis_conn_cmd(&w->redis, 1, ping, NULL);
    int redis_ok = rr && rr->type != REDIS_REPLY_ERROR;
    if (rr)
        freeReplyObject(rr);
    PGconn *c = db_conn_get(&w->db);
    int pg_ok = 0;
    if (c) {
        PGresult *r = PQexec(c, "SELECT 1");
        pg_ok = PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
    }
    *out = json_pack("{s:s, s:s, s:s}", "status", redis_ok && pg_ok ? "ok" : "unavailable", "redis",
                     redis_ok ? "ok" : "down", "postgres", pg_ok ? "ok" : "down");
    return redis_ok && pg_ok ? SKU_OK : SKU_UNAVAILABLE;
}
