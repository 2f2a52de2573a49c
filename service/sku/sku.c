#include "sku/sku.h"
#include "core/alloc.h"
#include "sku/buckets.h"
#include "sku/pending_settle.h"
#include "sku/sku_store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/embedded.h"
#include "core/fault.h"
#include "core/fmt.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/timefmt.h"
#include "store/dbtx.h"
#include "store/txlock.h"

/* ---- create ------------------------------------------------------------ */

/* Creates the SKU with the given id (see sku_create). */
static enum sku_result create_with_id(struct worker_ctx *w, const struct validate_sku *spec,
                                      int64_t id, json_t **out)
{
    struct txlock t;
    struct load_job lj = {.w = w,
                          .wanted = 1,
                          .mode = "new",
                          .id = id,
                          .stock = spec->stock,
                          .limit = spec->per_user_limit,
                          .lock = &t};
    (void)redis_run_id(w, id, lj.run, sizeof lj.run); /* "" only costs a rebuild later */
    if (spec->has_starts)
        fmt_i64z(lj.starts_ms, spec->starts_ms);
    if (spec->has_ends)
        fmt_i64z(lj.ends_ms, spec->ends_ms);
    struct dbtx *tx = sku_tx_begin(w, &t, id, load_on_commit, &lj);
    if (!tx)
        return SKU_UNAVAILABLE;
    char sid[24], stock[24], limit[24], window[24];
    fmt_i64z(sid, id);
    fmt_i64z(stock, spec->stock);
    fmt_i64z(limit, spec->per_user_limit);
    fmt_i64z(window, spec->payment_window_s);
    char fence[24];
    fmt_i64z(fence, t.fence);
    const char *ins[] = {sid,
                         spec->name,
                         stock,
                         limit,
                         spec->has_starts ? lj.starts_ms : NULL,
                         spec->has_ends ? lj.ends_ms : NULL,
                         fence,
                         window,
                         "1",
                         NULL,
                         NULL};
    PGresult *r = tx_query(tx, "sku_insert", 11, ins);
    if (!r || PQntuples(r) == 0) {
        enum sku_result res = r ? SKU_EXISTS : SKU_UNAVAILABLE;
        PQclear(r);
        (void)dbtx_rollback(tx);
        return res;
    }
    PQclear(r);
    const char *led[] = {sid, "initial", stock, stock, NULL, NULL, NULL};
    r = tx_query(tx, "ledger_insert", 7, led);
    PQclear(r);
    if (!r || draw_epoch(tx, &lj) != 0) {
        (void)dbtx_rollback(tx);
        return SKU_UNAVAILABLE;
    }
    if (sku_tx_commit(w, tx, &t, id) != SKU_OK)
        return SKU_UNAVAILABLE;
    if (lj.res != SKU_OK) /* in the database; Redis refused (full) or failed */
        return lj.res == SKU_NOT_LOADED_FULL ? SKU_NOT_LOADED_FULL : SKU_NOT_LOADED;

    *out = sku_created_json(spec, id);
    return SKU_OK;
}

/* Ids drawn from the sequence may already be taken by SKUs created with an
 * explicit id; a taken one is skipped, a bounded number of times. */
#define SKU_ID_ATTEMPTS 16

enum sku_result sku_create(struct worker_ctx *w, const struct validate_sku *spec, json_t **out)
{
    *out = NULL;
    if (spec->buckets > 1)
        return sku_create_buckets(w, spec, out);
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

/* ---- adjust ------------------------------------------------------------ */

enum sku_result sku_adjust(struct worker_ctx *w, int64_t sku, int64_t delta, const char *reason,
                           const char *idem, json_t **out)
{
    *out = NULL;
    int64_t buckets[SKU_MOVES_MAX];
    int nb = sku_buckets_of(w, sku, buckets, SKU_MOVES_MAX);
    if (nb < 0)
        return SKU_UNAVAILABLE;
    if (nb > 0)
        return sku_adjust_parent(w, sku, buckets, nb, delta, reason, idem, out);
    struct sku_move m = {.sku = sku, .delta = delta};
    struct sku_adjust_req rq = {
        .delta = delta, .reason = reason, .idem = idem, .idem_scope = sku, .idem_parent = 0};
    struct sku_replay rp;
    int refused;
    enum sku_result res = sku_adjust_moves(w, &m, 1, &rq, &rp, &refused);
    if (res == SKU_OK && !rp.found)
        metrics_add(M_STOCK_ADJUSTMENTS, 1);
    if (res == SKU_OK && rp.found) {
        long long available = -1;
        (void)redis_sku_state(w, sku, &available, NULL);
        *out = json_pack("{s:I, s:I, s:I, s:o, s:b}", "sku_id", (json_int_t)sku, "delta",
                         (json_int_t)delta, "stock", (json_int_t)rp.stock, "available",
                         available >= 0 ? json_integer(available) : json_null(), "replayed", 1);
    } else if (res == SKU_OK) {
        *out =
            json_pack("{s:I, s:I, s:I, s:I}", "sku_id", (json_int_t)sku, "delta", (json_int_t)delta,
                      "stock", (json_int_t)m.stock, "available", (json_int_t)m.available);
    } else if (res == SKU_INSUFFICIENT && m.available < 0) { /* the database's guard */
        *out = json_pack("{s:I}", "stock", (json_int_t)m.before);
    } else if (res == SKU_INSUFFICIENT) { /* Redis's: buyers hold units in flight */
        *out = json_pack("{s:I, s:I}", "stock", (json_int_t)m.before, "available",
                         (json_int_t)m.available);
    }
    return res;
}

/* ---- check, rebuild, reload ------------------------------------------- */

/* Reads sku_state.lua's view into c.  *bought gets the reply (caller frees):
 * its element 7 is the flat user, units list (with count_pending only: the
 * full view of the locked check).  Returns 0 or -1. */
static int read_redis_state(struct worker_ctx *w, int64_t sku, int count_pending,
                            struct sku_check *c, redisReply **bought)
{
    char keys[7][KEYS_MAX];
    static const enum keys_kind kinds[] = {KEY_META,   KEY_STOCK, KEY_STREAM, KEY_BOUGHT,
                                           KEY_ADJUST, KEY_DEAD,  KEY_JOURNAL};
    const char *argv[8];
    for (int i = 0; i < 7; i++) {
        keys_sku(keys[i], sku, kinds[i]);
        argv[i] = keys[i];
    }
    argv[7] = count_pending ? "1" : "0";
    redisReply *r = redis_conn_script(&w->redis, &script_sku_state, 7, 1, argv, NULL);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 9 ||
        r->element[7]->type != REDIS_REPLY_ARRAY) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    c->loaded = r->element[0]->integer == 1;
    c->redis_stock = r->element[1]->len ? atoll(r->element[1]->str) : 0;
    c->in_flight = r->element[2]->integer;
    c->adjustments_open = r->element[3]->integer;
    c->dead_letters = r->element[4]->integer;
    snprintf(c->built_run, sizeof c->built_run, "%s", r->element[5]->str);
    c->loaded_epoch = r->element[6]->len ? atoll(r->element[6]->str) : 0;
    c->journal_pending = r->element[8]->integer;
    c->loaded = c->loaded && r->element[1]->len; /* a meta without stock is data loss */
    *bought = r;
    return 0;
}

static int cmp_pair(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Counts the users whose units Redis and PostgreSQL disagree on. */
static int64_t users_differing(const redisReply *flat, const PGresult *db)
{
    size_t nr = flat->elements / 2, nd = (size_t)PQntuples(db);
    int64_t(*r)[2] = xcalloc(nr + 1, sizeof *r), (*d)[2] = xcalloc(nd + 1, sizeof *d);
    for (size_t i = 0; i < nr; i++) {
        r[i][0] = atoll(flat->element[2 * i]->str);
        r[i][1] = atoll(flat->element[2 * i + 1]->str);
    }
    for (size_t i = 0; i < nd; i++) {
        d[i][0] = atoll(PQgetvalue(db, (int)i, 0));
        d[i][1] = atoll(PQgetvalue(db, (int)i, 1));
    }
    qsort(r, nr, sizeof *r, cmp_pair);
    qsort(d, nd, sizeof *d, cmp_pair);
    int64_t differ = 0;
    size_t i = 0, j = 0;
    while (i < nr || j < nd) {
        if (j == nd || (i < nr && r[i][0] < d[j][0]))
            differ += r[i++][1] != 0; /* a user Redis holds units for, the database none */
        else if (i == nr || d[j][0] < r[i][0])
            differ++, j++;
        else
            differ += r[i++][1] != d[j++][1];
    }
    free(r);
    free(d);
    return differ;
}

/* Fills lj from the SKU row and the bought rows (ownership of bought passes
 * to lj) and draws the epoch of the rebuild.  Returns 0 or -1. */
static int prepare_rebuild(struct dbtx *tx, struct load_job *lj, const char *sid, int64_t stock,
                           PGresult *bought)
{
    lj->bought = bought;
    PGresult *info = tx_query(tx, "sku_get", 1, (const char *[]){sid});
    int ok = info && PQntuples(info) == 1;
    if (ok) {
        lj->stock = stock; /* read under the fenced row lock */
        lj->limit = atoll(PQgetvalue(info, 0, 4));
        snprintf(lj->starts_ms, sizeof lj->starts_ms, "%s", PQgetvalue(info, 0, 5));
        snprintf(lj->ends_ms, sizeof lj->ends_ms, "%s", PQgetvalue(info, 0, 6));
        snprintf(lj->parent, sizeof lj->parent, "%s", PQgetvalue(info, 0, 9));
        snprintf(lj->bucket, sizeof lj->bucket, "%s", PQgetvalue(info, 0, 10));
        snprintf(lj->buckets, sizeof lj->buckets, "%s", PQgetvalue(info, 0, 11));
        /* a parent sells through its buckets: Redis never holds it */
        ok = atoll(PQgetvalue(info, 0, 8)) == 1;
    }
    PQclear(info);
    if (!ok || draw_epoch(tx, lj) != 0)
        return -1;
    lj->wanted = 1;
    lj->mode = "rebuild";
    return 0;
}

/* Whether mode asks for a rebuild of what c found. */
static int needs_rebuild(enum sku_check_mode mode, const struct sku_check *c)
{
    int quiet_drift = c->quiescent && (c->drift_units || c->users_differing);
    switch (mode) {
    case SKU_CHECK_ONLY:
        return 0;
    case SKU_CHECK_REPAIR:
        return !c->loaded || c->stale_run || quiet_drift;
    case SKU_CHECK_RELOAD:
        /* In flight, the numbers cannot be compared; a rebuild is safe anyway
         * (writers take those orders from the rebuilt state). */
        return !c->loaded || c->stale_run || quiet_drift || !c->quiescent;
    case SKU_CHECK_REBUILD:
        return 1;
    }
    return 0;
}

/* One attempt of sku_check; *stale as in adjust_once. */
static enum sku_result check_once(struct worker_ctx *w, int64_t sku, enum sku_check_mode mode,
                                  const char *why, struct sku_check *c, int *stale)
{
    *stale = 0;
    memset(c, 0, sizeof *c);
    c->sku = sku;
    char run[48];
    (void)redis_run_id(w, sku, run, sizeof run);
    struct txlock t;
    struct load_job lj = {.w = w, .id = sku, .lock = &t};
    snprintf(lj.run, sizeof lj.run, "%s", run);
    struct dbtx *tx = sku_tx_begin(w, &t, sku, load_on_commit, &lj);
    if (!tx)
        return SKU_UNAVAILABLE;
    char sid[24];
    fmt_i64z(sid, sku);
    int fenced = txlock_fence(&t, tx, &c->db_stock);
    if (fenced != 1) {
        *stale = fenced == TXLOCK_STALE;
        (void)dbtx_rollback(tx);
        return fenced == 0 ? SKU_UNKNOWN : SKU_UNAVAILABLE;
    }
    /* Under the SKU lock and its row: every earlier adjustment has ended. */
    if (mode != SKU_CHECK_ONLY && settle_adjustments(w, tx, sku, "", &c->settled) != 0) {
        (void)dbtx_rollback(tx);
        return SKU_UNAVAILABLE;
    }
    redisReply *state = NULL;
    PGresult *bought = NULL, *bad = NULL;
    enum sku_result res = SKU_UNAVAILABLE;
    if (read_redis_state(w, sku, 1, c, &state) != 0)
        goto fail;
    bought = tx_query(tx, "sku_bought", 1, (const char *[]){sid});
    bad = bought ? tx_query(tx, "invariant_check", 1, (const char *[]){sid}) : NULL;
    if (!bad)
        goto fail;
    c->invariant_ok = PQntuples(bad) == 0;
    c->stale_run = c->loaded && run[0] && strcmp(run, c->built_run) != 0;
    c->quiescent = c->loaded && c->in_flight == 0 && c->adjustments_open == 0;
    if (c->quiescent) {
        c->drift_units = llabs((long long)(c->redis_stock - c->db_stock));
        c->users_differing = users_differing(state->element[7], bought);
    }
    if (needs_rebuild(mode, c)) {
        if (prepare_rebuild(tx, &lj, sid, c->db_stock, bought) != 0) {
            bought = NULL; /* owned by lj now */
            goto fail;
        }
        bought = NULL;
        /* the load writes them back as it makes the SKU sell again: a retry
         * with the key of an order answered 202 pending must find it */
        if (pending_restore_plan(tx, sku, &lj) != 0)
            goto fail;
        log_warn("sku %" PRId64 ": rebuilding Redis from PostgreSQL (%s): redis %s, stock %" PRId64
                 " vs %" PRId64 ", %" PRId64 " in flight, %" PRId64 " users differ",
                 sku, why,
                 !c->loaded     ? "lost it"
                 : c->stale_run ? "restarted"
                                : "holds it",
                 c->redis_stock, c->db_stock, c->in_flight, c->users_differing);
    }
    freeReplyObject(state);
    PQclear(bought);
    PQclear(bad);
    res = sku_tx_commit(w, tx, &t, sku);
    PQclear(lj.bought);
    free(lj.restore);
    if (res == SKU_OK && lj.wanted) {
        if (lj.res != SKU_OK)
            return SKU_NOT_LOADED;
        c->rebuilt = 1;
        c->loaded = 1;
        c->loaded_epoch = atoll(lj.epoch);
        c->redis_stock = lj.stock;
        c->drift_units = c->users_differing = 0;
    }
    return res;
fail:
    if (state)
        freeReplyObject(state);
    PQclear(bought);
    PQclear(bad);
    (void)dbtx_rollback(tx);
    PQclear(lj.bought);
    free(lj.restore);
    return SKU_UNAVAILABLE;
}

/* A parent's check is its buckets' (Redis never holds the parent): every
 * bucket checked in turn, their numbers summed. */
static enum sku_result check_parent(struct worker_ctx *w, int64_t sku, const int64_t *buckets,
                                    int n, enum sku_check_mode mode, const char *why,
                                    struct sku_check *c)
{
    memset(c, 0, sizeof *c);
    c->sku = sku;
    c->loaded = c->quiescent = c->invariant_ok = 1;
    for (int i = 0; i < n; i++) {
        struct sku_check b;
        enum sku_result res = sku_check(w, buckets[i], mode, why, &b);
        if (res != SKU_OK)
            return res;
        c->loaded &= b.loaded;
        c->quiescent &= b.quiescent;
        c->invariant_ok &= b.invariant_ok;
        c->stale_run |= b.stale_run;
        c->rebuilt |= b.rebuilt;
        c->db_stock += b.db_stock;
        c->redis_stock += b.redis_stock;
        c->in_flight += b.in_flight;
        c->adjustments_open += b.adjustments_open;
        c->settled += b.settled;
        c->dead_letters += b.dead_letters;
        c->journal_pending += b.journal_pending;
        c->drift_units += b.drift_units;
        c->users_differing += b.users_differing;
        if (b.loaded_epoch > c->loaded_epoch)
            c->loaded_epoch = b.loaded_epoch;
    }
    return SKU_OK;
}

enum sku_result sku_check(struct worker_ctx *w, int64_t sku, enum sku_check_mode mode,
                          const char *why, struct sku_check *c)
{
    int64_t buckets[SKU_MOVES_MAX];
    int nb = sku_buckets_of(w, sku, buckets, SKU_MOVES_MAX);
    if (nb < 0)
        return SKU_UNAVAILABLE;
    if (nb > 0)
        return check_parent(w, sku, buckets, nb, mode, why, c);
    enum sku_result res = SKU_UNAVAILABLE;
    int stale = 1;
    for (int i = 0; i < TXLOCK_FENCE_ATTEMPTS && stale; i++)
        res = check_once(w, sku, mode, why, c, &stale);
    return res;
}

enum sku_result sku_peek(struct worker_ctx *w, int64_t sku, struct sku_check *c)
{
    memset(c, 0, sizeof *c);
    c->sku = sku;
    char sid[24], run[48];
    fmt_i64z(sid, sku);
    PGresult *r = db_query(&w->db, "sku_get", 1, (const char *[]){sid});
    if (!r)
        return SKU_UNAVAILABLE;
    int known = PQntuples(r) == 1;
    if (known)
        c->db_stock = atoll(PQgetvalue(r, 0, 2));
    PQclear(r);
    if (!known)
        return SKU_UNKNOWN;
    redisReply *state;
    if (redis_run_id(w, sku, run, sizeof run) != 0 || read_redis_state(w, sku, 0, c, &state) != 0)
        return SKU_UNAVAILABLE;
    freeReplyObject(state);
    c->stale_run = c->loaded && strcmp(run, c->built_run) != 0;
    c->quiescent = c->loaded && c->in_flight == 0 && c->adjustments_open == 0;
    if (c->quiescent)
        c->drift_units = llabs((long long)(c->redis_stock - c->db_stock));
    c->invariant_ok = 1; /* not looked at without the lock */
    return SKU_OK;
}

enum sku_result sku_rebuild(struct worker_ctx *w, int64_t sku, const char *why)
{
    struct sku_check c;
    return sku_check(w, sku, SKU_CHECK_REBUILD, why, &c);
}

enum sku_result sku_reload(struct worker_ctx *w, int64_t sku, json_t **out)
{
    *out = NULL;
    struct sku_check c;
    enum sku_result res = sku_check(w, sku, SKU_CHECK_RELOAD, "admin reload", &c);
    if (res != SKU_OK)
        return res;
    if (!c.rebuilt)
        return SKU_EXISTS; /* loaded, nothing in flight, and it agrees with the database */
    *out = json_pack("{s:I, s:I, s:I, s:b}", "id", (json_int_t)sku, "available",
                     (json_int_t)c.redis_stock, "epoch", (json_int_t)c.loaded_epoch, "rebuilt", 1);
    return SKU_OK;
}

/* ---- reads ------------------------------------------------------------- */

enum sku_result sku_view(struct worker_ctx *w, int64_t sku, int admin, json_t **out)
{
    enum sku_result res = sku_view_row(w, sku, admin, out);
    /* A parent's own row says so: only then are its buckets read (the
     * buyers' view of an ordinary SKU costs no more than before). */
    if (res != SKU_OK || json_integer_value(json_object_get(*out, "buckets")) <= 1)
        return res;
    int64_t buckets[SKU_MOVES_MAX];
    int nb = sku_buckets_of(w, sku, buckets, SKU_MOVES_MAX);
    if (nb > 0)
        return sku_view_parent(w, buckets, nb, admin, out);
    json_decref(*out);
    *out = NULL;
    return SKU_UNAVAILABLE;
}

enum sku_result sku_set_window(struct worker_ctx *w, int64_t sku, int64_t window_s, json_t **out)
{
    *out = NULL;
    char sid[24], win[24];
    fmt_i64z(sid, sku);
    fmt_i64z(win, window_s);
    PGresult *r = db_query(&w->db, "sku_set_window", 2, (const char *[]){sid, win});
    if (!r)
        return SKU_UNAVAILABLE;
    int found = PQntuples(r) >= 1; /* the SKU and its buckets */
    PQclear(r);
    if (!found)
        return SKU_UNKNOWN;
    log_info("sku %" PRId64 ": payment window now %" PRId64 " s for orders confirmed from now on",
             sku, window_s);
    return sku_view(w, sku, 1, out);
}

enum sku_result sku_exists(struct worker_ctx *w, int64_t sku)
{
    char sid[24];
    fmt_i64z(sid, sku);
    PGresult *r = db_query(&w->db, "sku_get", 1, (const char *[]){sid});
    if (!r)
        return SKU_UNAVAILABLE;
    enum sku_result res = PQntuples(r) ? SKU_OK : SKU_UNKNOWN;
    PQclear(r);
    return res;
}
