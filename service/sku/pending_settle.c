#include "sku/pending_settle.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/embedded.h"
#include "core/fmt.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "sku/sku_store.h"
#include "store/db.h"
#include "store/txlock.h"

/* What a settle owes Redis after its COMMIT (the completion hook's argument). */
struct settle_job {
    struct worker_ctx *w;
    int64_t sku;
    int64_t load_epoch;        /* the SKU's last load: confirmed orders are taken from it */
    const struct txlock *lock; /* the SKU's lock the transaction holds: fences the writes */
    /* orders_reapply.lua's quads (order, user, qty, stream entry), then the epoch */
    const char **reapply;
    size_t nreapply;
    /* order_pending_settled.lua's quads (order, user, entry, new state) */
    const char **journal;
    size_t njournal;
    char **owned; /* every string above, freed with the job */
    size_t nowned, capowned;
};

static const char *keep(struct settle_job *sj, const char *s)
{
    if (sj->nowned == sj->capowned) {
        sj->capowned = sj->capowned ? 2 * sj->capowned : 32;
        sj->owned = xrealloc(sj->owned, sj->capowned * sizeof *sj->owned);
    }
    char *c = xstrdup(s);
    return sj->owned[sj->nowned++] = c;
}

static void push(const char ***list, size_t *n, const char *s)
{
    *list = xrealloc(*list, (*n + 1) * sizeof **list);
    (*list)[(*n)++] = s;
}

static void settle_job_free(struct settle_job *sj)
{
    for (size_t i = 0; i < sj->nowned; i++)
        free(sj->owned[i]);
    free(sj->owned);
    free(sj->reapply);
    free(sj->journal);
}

/* A one-element PostgreSQL array literal of s: quoted, so that any printable
 * key survives ("{NULL}" for none). */
static void array_of_text(char *out, size_t cap, const char *s)
{
    if (!s) {
        snprintf(out, cap, "{NULL}");
        return;
    }
    size_t n = 0;
    out[n++] = '{';
    out[n++] = '"';
    for (; *s && n + 4 < cap; s++) {
        if (*s == '"' || *s == '\\')
            out[n++] = '\\';
        out[n++] = *s;
    }
    out[n++] = '"';
    out[n++] = '}';
    out[n] = '\0';
}

/* Completion hook, still under the SKU's lock: Redis learns what the
 * transaction decided.  A failure here leaves Redis off by those units until
 * the reconciler finds the drift and rebuilds the SKU from the database. */
static void settled_on_complete(enum dbtx_outcome outcome, void *arg)
{
    struct settle_job *sj = arg;
    if (outcome != DBTX_COMMITTED)
        return;
    char keys[5][KEYS_MAX], lock[KEYS_MAX], counter[KEYS_MAX + 8], fence[TXLOCK_FENCE_ARG_MAX];
    const char *argv[5];
    if (txlock_redis_fence(sj->lock, sj->sku, lock, counter, fence) != 0)
        return;
    if (sj->nreapply) {
        static const enum keys_kind kinds[] = {KEY_JOURNAL, KEY_STOCK, KEY_BOUGHT, KEY_META,
                                               KEY_DEBTS};
        for (int i = 0; i < 5; i++) {
            keys_sku(keys[i], sj->sku, kinds[i]);
            argv[i] = keys[i];
        }
        size_t n = 8 + sj->nreapply + 1;
        const char **a = xcalloc(n, sizeof *a);
        memcpy(a, argv, sizeof argv);
        a[5] = lock;
        a[6] = counter;
        a[7] = fence;
        memcpy(a + 8, sj->reapply, sj->nreapply * sizeof *a);
        char epoch[24];
        fmt_i64z(epoch, sj->load_epoch);
        a[n - 1] = epoch;
        redisReply *r =
            redis_conn_script(&sj->w->redis, &script_orders_reapply, 7, (int)(n - 7), a, NULL);
        if (!r || r->type == REDIS_REPLY_ERROR)
            log_error("sku %" PRId64 ": orders settled as confirmed could not be taken from "
                      "Redis (%s); the reconciler rebuilds it",
                      sj->sku, r ? r->str : "no answer");
        if (r)
            freeReplyObject(r);
        free(a);
    }
    if (sj->njournal) {
        keys_sku(keys[0], sj->sku, KEY_JOURNAL);
        keys_sku(keys[1], sj->sku, KEY_STREAM);
        size_t n = 5 + sj->njournal;
        const char **a = xcalloc(n, sizeof *a);
        a[0] = keys[0];
        a[1] = keys[1];
        a[2] = lock;
        a[3] = counter;
        a[4] = fence;
        memcpy(a + 5, sj->journal, sj->njournal * sizeof *a);
        redisReply *r = redis_conn_script(&sj->w->redis, &script_order_pending_settled, 4,
                                          (int)(n - 4), a, NULL);
        if (!r || r->type == REDIS_REPLY_ERROR)
            log_warn("sku %" PRId64 ": the journal of settled orders was not updated (%s)", sj->sku,
                     r ? r->str : "no answer");
        if (r)
            freeReplyObject(r);
        free(a);
    }
}

/* order_pending_probe.lua: "in_flight", "other" or "lost" into out (cap
 * bytes).  Returns 0 or -1. */
static int probe(struct worker_ctx *w, int64_t sku, int64_t user, const char *order,
                 const char *entry, const char *idem, char *out, size_t cap)
{
    char stream[KEYS_MAX], key[KEYS_MAX];
    keys_sku(stream, sku, KEY_STREAM);
    const char *argv[4] = {stream};
    int nkeys = 1;
    if (idem) { /* the buyer's key, when it named one */
        keys_idem(key, sku, user, idem);
        argv[nkeys++] = key;
    }
    argv[nkeys] = order;
    argv[nkeys + 1] = entry;
    redisReply *r = redis_conn_script(&w->redis, &script_order_pending_probe, nkeys, 2, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_STRING;
    if (ok)
        snprintf(out, cap, "%s", r->str);
    else
        log_warn("sku %" PRId64 ": order_pending_probe: %s", sku,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static int settle_record(struct dbtx *tx, const char *order, const char *entry, const char *outcome)
{
    PGresult *r = tx_query(tx, "order_pending_settle", 3, (const char *[]){order, entry, outcome});
    PQclear(r);
    return r ? 0 : -1;
}

/* What a recorded order's id has in the database: 0 no row, 1 the row of this
 * very reservation (same SKU, buyer, qty and reservation time: the writer's
 * rule for a replay), 2 another reservation's, -1 failure. */
static int existing_row(struct dbtx *tx, int64_t sku, const char *order, int64_t user, int64_t qty,
                        int64_t reserved_ms, char *state, size_t cap)
{
    char ids[32];
    snprintf(ids, sizeof ids, "{%s}", order);
    PGresult *r = tx_query(tx, "orders_existing", 1, (const char *[]){ids});
    if (!r)
        return -1;
    int res = 0;
    state[0] = '\0';
    if (PQntuples(r) > 0)
        res = atoll(PQgetvalue(r, 0, 7)) == sku && atoll(PQgetvalue(r, 0, 2)) == user &&
                      atoll(PQgetvalue(r, 0, 3)) == qty && atoll(PQgetvalue(r, 0, 6)) == reserved_ms
                  ? 1
                  : 2;
    /* what the journal says of it from now on: a refused order its reason,
     * a confirmed one (whatever became of it since) nothing */
    if (res == 1 && strcmp(PQgetvalue(r, 0, 1), "rejected") == 0)
        snprintf(state, cap, "returned:%s", PQgetvalue(r, 0, 4));
    else if (res == 2)
        snprintf(state, cap, "returned:id_conflict"); /* order.h: ORDER_REASON_ID_CONFLICT */
    PQclear(r);
    return res;
}

/* The rules a decision needs: per-user limit, last load epoch, payment window. */
struct rules {
    int64_t limit, load_epoch, window_s;
};

static int read_rules(struct dbtx *tx, const char *sid, struct rules *ru)
{
    char ids[32];
    snprintf(ids, sizeof ids, "{%s}", sid);
    PGresult *r = tx_query(tx, "skus_write_rules", 1, (const char *[]){ids});
    int ok = r && PQntuples(r) == 1;
    if (ok) {
        ru->limit = atoll(PQgetvalue(r, 0, 1));
        ru->load_epoch = PQgetisnull(r, 0, 2) ? 0 : atoll(PQgetvalue(r, 0, 2));
        ru->window_s = atoll(PQgetvalue(r, 0, 3));
    }
    PQclear(r);
    return ok ? 0 : -1;
}

/* One recorded order whose reservation Redis lost, decided as a writer
 * decides: its buyer's cancel request, the per-user limit over the active
 * rows, the stock by a guarded take.  Writes its row and ledger row, marks
 * the record, and queues what Redis must learn after COMMIT.  *stock follows
 * the SKU's stock.  Returns 0 or -1. */
static int decide(struct dbtx *tx, struct settle_job *sj, const struct rules *ru, const char *sid,
                  const char *order, const char *entry, int64_t user, int64_t qty, const char *idem,
                  int64_t reserved_ms, int superseded, int64_t *stock)
{
    char ids[32], uid[24], users[32], q[24], qtys[32];
    snprintf(ids, sizeof ids, "{%s}", order);
    fmt_i64z(uid, user);
    snprintf(users, sizeof users, "{%s}", uid);
    fmt_i64z(q, qty);
    snprintf(qtys, sizeof qtys, "{%s}", q);
    char skus[32];
    snprintf(skus, sizeof skus, "{%s}", sid);
    const char *status = "confirmed", *reason = NULL;
    int64_t cancelled_ms = 0;
    PGresult *r = tx_query(tx, "orders_cancel_requested", 1, (const char *[]){ids});
    if (!r)
        return -1;
    for (int i = 0; i < PQntuples(r); i++) /* the request names this reservation */
        if (atoll(PQgetvalue(r, i, 1)) == user &&
            (PQgetvalue(r, i, 3)[0] == '\0' || strcmp(PQgetvalue(r, i, 3), entry) == 0))
            cancelled_ms = atoll(PQgetvalue(r, i, 2));
    PQclear(r);
    if (cancelled_ms) {
        status = "cancelled";
        reason = "cancelled";
    } else if (superseded) {
        status = "rejected";
        reason = "superseded";
    } else {
        r = tx_query(tx, "orders_user_units", 2, (const char *[]){skus, users});
        if (!r || PQntuples(r) != 1) {
            PQclear(r);
            return -1;
        }
        int64_t held = atoll(PQgetvalue(r, 0, 2));
        PQclear(r);
        if (held + qty > ru->limit) {
            status = "rejected";
            reason = "limit_exceeded";
        } else {
            r = tx_query(tx, "skus_take_stock", 2, (const char *[]){skus, qtys});
            if (!r)
                return -1;
            if (PQntuples(r) == 1)
                *stock = atoll(PQgetvalue(r, 0, 1));
            else {
                status = "rejected";
                reason = "insufficient_stock";
            }
            PQclear(r);
        }
    }
    int confirmed = strcmp(status, "confirmed") == 0;
    char st[32], rs[48], ik[2 * KEYS_IDEM_MAX + 8], ms[32], reapply[32], window[32], cms[32];
    snprintf(st, sizeof st, "{%s}", status);
    array_of_text(rs, sizeof rs, reason);
    array_of_text(ik, sizeof ik, idem);
    snprintf(ms, sizeof ms, "{%" PRId64 "}", reserved_ms);
    if (confirmed && ru->load_epoch > 0)
        snprintf(reapply, sizeof reapply, "{%" PRId64 "}", ru->load_epoch);
    else
        snprintf(reapply, sizeof reapply, "{NULL}");
    snprintf(window, sizeof window, "{%" PRId64 "}", ru->window_s);
    if (cancelled_ms)
        snprintf(cms, sizeof cms, "{%" PRId64 "}", cancelled_ms);
    else
        snprintf(cms, sizeof cms, "{NULL}");
    const char *ins[] = {skus, ids, users, qtys, st, rs, ik, ms, reapply, window, cms};
    r = tx_query(tx, "orders_insert_batch", 11, ins);
    int written = r && PQntuples(r) == 1;
    PQclear(r);
    if (!written)
        return -1;
    char delta[24], after[24];
    fmt_i64z(delta, confirmed ? -qty : 0);
    fmt_i64z(after, *stock);
    const char *kind = confirmed ? "order" : cancelled_ms ? "cancel" : "rejection";
    r = tx_query(tx, "ledger_insert", 7,
                 (const char *[]){sid, kind, delta, after, order, NULL, NULL});
    PQclear(r);
    if (!r || settle_record(tx, order, entry, "written") != 0)
        return -1;
    if (confirmed && ru->load_epoch > 0) {
        push(&sj->reapply, &sj->nreapply, keep(sj, order));
        push(&sj->reapply, &sj->nreapply, keep(sj, uid));
        push(&sj->reapply, &sj->nreapply, keep(sj, q));
        push(&sj->reapply, &sj->nreapply, keep(sj, entry));
    }
    char state[64];
    snprintf(state, sizeof state, "returned:%s", reason ? reason : "");
    push(&sj->journal, &sj->njournal, keep(sj, order));
    push(&sj->journal, &sj->njournal, keep(sj, uid));
    push(&sj->journal, &sj->njournal, keep(sj, entry));
    push(&sj->journal, &sj->njournal, keep(sj, confirmed ? "" : state));
    log_warn("sku %" PRId64 ": order %s (recorded pending; Redis lost its reservation) settled "
             "%s%s%s",
             sj->sku, order, status, reason ? ": " : "", reason ? reason : "");
    return 0;
}

/* One attempt of pending_settle_sku; *stale when the lock's token was refused. */
static int settle_once(struct worker_ctx *w, int64_t sku, int64_t older_ms, int64_t *settled,
                       int *stale)
{
    *stale = 0;
    struct txlock t;
    struct settle_job sj = {.w = w, .sku = sku, .lock = &t};
    struct dbtx *tx = sku_tx_begin(w, &t, sku, settled_on_complete, &sj);
    if (!tx)
        return -1;
    int64_t stock = 0;
    int fenced = txlock_fence(&t, tx, &stock);
    if (fenced != 1) {
        *stale = fenced == TXLOCK_STALE;
        (void)dbtx_rollback(tx);
        settle_job_free(&sj);
        return fenced == 0 ? 0 : -1;
    }
    char sid[24], older[24], limit[24];
    fmt_i64z(sid, sku);
    fmt_i64z(older, older_ms);
    fmt_i64z(limit, w->cfg->writer_batch);
    struct rules ru;
    int64_t n = 0;
    PGresult *recs = tx_query(tx, "order_pending_of_sku", 3, (const char *[]){sid, older, limit});
    if (!recs || read_rules(tx, sid, &ru) != 0)
        goto fail;
    sj.load_epoch = ru.load_epoch;
    for (int i = 0; i < PQntuples(recs); i++) {
        const char *order = PQgetvalue(recs, i, 0), *entry = PQgetvalue(recs, i, 1);
        int64_t user = atoll(PQgetvalue(recs, i, 2)), qty = atoll(PQgetvalue(recs, i, 3));
        const char *idem = PQgetisnull(recs, i, 4) ? NULL : PQgetvalue(recs, i, 4);
        int64_t reserved_ms = atoll(PQgetvalue(recs, i, 5));
        char state[64];
        int row = existing_row(tx, sku, order, user, qty, reserved_ms, state, sizeof state);
        if (row < 0)
            goto fail;
        if (row > 0) { /* a writer wrote it (or its id went to another reservation) */
            if (settle_record(tx, order, entry, row == 1 ? "written" : "id_conflict") != 0)
                goto fail;
            /* A journal entry written back for it is not pending any more:
             * gone for a confirmed order, 'returned:' for a refused one or
             * one whose id another reservation's row holds.  The script
             * changes only the state that names this buyer and entry. */
            char uid[24];
            fmt_i64z(uid, user);
            push(&sj.journal, &sj.njournal, keep(&sj, order));
            push(&sj.journal, &sj.njournal, keep(&sj, uid));
            push(&sj.journal, &sj.njournal, keep(&sj, entry));
            push(&sj.journal, &sj.njournal, keep(&sj, state));
            n++;
            continue;
        }
        char verdict[16];
        if (probe(w, sku, user, order, entry, idem, verdict, sizeof verdict) != 0)
            goto fail;
        if (strcmp(verdict, "in_flight") == 0)
            continue; /* its writer will write it */
        if (decide(tx, &sj, &ru, sid, order, entry, user, qty, idem, reserved_ms,
                   strcmp(verdict, "other") == 0, &stock) != 0)
            goto fail;
        metrics_add(M_ORDERS_PENDING_SETTLED, 1);
        n++;
    }
    PQclear(recs);
    recs = NULL;
    if (n == 0) {
        (void)dbtx_rollback(tx);
        settle_job_free(&sj);
        return 0;
    }
    if (sku_tx_commit(w, tx, &t, sku) != SKU_OK) {
        settle_job_free(&sj);
        return -1;
    }
    settle_job_free(&sj);
    if (settled)
        *settled += n;
    return 0;
fail:
    PQclear(recs);
    (void)dbtx_rollback(tx);
    settle_job_free(&sj);
    return -1;
}

int pending_settle_sku(struct worker_ctx *w, int64_t sku, int64_t older_ms, int64_t *settled)
{
    int rc = -1, stale = 1;
    for (int i = 0; i < TXLOCK_FENCE_ATTEMPTS && stale; i++)
        rc = settle_once(w, sku, older_ms, settled, &stale);
    return rc;
}

int pending_settle_due(struct worker_ctx *w, int64_t older_ms, int64_t *settled)
{
    char older[24];
    fmt_i64z(older, older_ms);
    PGresult *r = db_query_indexed(&w->db, "order_pending_due", 1, (const char *[]){older});
    if (!r)
        return -1;
    int rc = 0;
    for (int i = 0; i < PQntuples(r); i++)
        if (pending_settle_sku(w, atoll(PQgetvalue(r, i, 0)), older_ms, settled) != 0)
            rc = -1;
    PQclear(r);
    return rc;
}

int pending_restore_plan(struct dbtx *tx, int64_t sku, struct load_job *lj)
{
    char sid[24];
    fmt_i64z(sid, sku);
    PGresult *recs = tx_query(tx, "order_pending_to_restore", 1, (const char *[]){sid});
    if (!recs)
        return -1;
    struct load_restore *more =
        xrealloc(lj->restore, (lj->nrestore + (size_t)PQntuples(recs) + 1) * sizeof *more);
    lj->restore = more;
    for (int i = 0; i < PQntuples(recs); i++) {
        struct load_restore *x = &lj->restore[lj->nrestore++];
        keys_idem(x->key, sku, atoll(PQgetvalue(recs, i, 2)), PQgetvalue(recs, i, 4));
        snprintf(x->order, sizeof x->order, "%s", PQgetvalue(recs, i, 0));
        snprintf(x->entry, sizeof x->entry, "%s", PQgetvalue(recs, i, 1));
        snprintf(x->user, sizeof x->user, "%s", PQgetvalue(recs, i, 2));
        snprintf(x->qty, sizeof x->qty, "%s", PQgetvalue(recs, i, 3));
    }
    PQclear(recs);
    return 0;
}
