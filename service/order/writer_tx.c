/*
 * writer_tx: several SKUs' batches in one transaction (see writer_batch.h).
 *
 * A flash sale of many SKUs gives each stream a few orders per read; one
 * transaction per SKU paid a BEGIN, a COMMIT (a WAL flush), a lock and a
 * release for each of them.  Here the SKUs of one read share them:
 *
 *   1. each SKU's writer lock, each with its own fencing token, all tried in
 *      one round trip (txlock_try_each; a busy one is left out and waited
 *      for later, alone), bound to the transaction: one completion hook
 *      releases them all (txlock_bind_all);
 *   2. one round trip: BEGIN (dbtx_begin_deferred), the rows of every SKU
 *      locked in id order (skus_lock_many), their fenced row locks
 *      (skus_fence_many), the rows the batches' ids already have, the SKUs'
 *      rules, what each buyer holds, the cancel requests;
 *   3. the decisions, per SKU, first come first served against the
 *      database's stock and per-user limit;
 *   4. one round trip: the guarded stock updates, the order rows, the
 *      ledger rows, each one statement for every SKU;
 *   5. every lock's lease checked, COMMIT; the completion hooks settle the
 *      batches with Redis (writer_settle.c), then release the locks.
 *
 * A SKU whose token PostgreSQL refuses draws newer ones under the row lock
 * (txlock_fence); one refused for good is left out of the transaction (its
 * entries stay pending, b->stale says to try it again), and so is one whose
 * lock is busy (b->busy).  Any failure of a statement rolls the whole
 * transaction back: nothing of any SKU is written, every entry stays
 * pending, and order_writer.c tries each batch again on its own.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/embedded.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "order/order.h"
#include "order/order_writer.h"
#include "order/writer_batch.h"
#include "store/dbtx.h"

/* ---- small buffers ------------------------------------------------------- */

struct sbuf {
    char *p;
    size_t len, cap;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = xrealloc(b->p, cap);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void sb_i64(struct sbuf *b, int64_t v)
{
    char num[24];
    sb_add(b, num, (size_t)snprintf(num, sizeof num, "%" PRId64, v));
}

/* Appends the next element of a PostgreSQL array literal: "{" before the
 * first, "," before the others (close it with sb_close). */
static void sb_next(struct sbuf *b)
{
    sb_str(b, b->len ? "," : "{");
}

static void sb_close(struct sbuf *b)
{
    sb_str(b, b->len ? "}" : "{}");
}

/* Appends s as a quoted element of a PostgreSQL array literal, or NULL. */
static void sb_array_text(struct sbuf *b, const char *s)
{
    if (!s) {
        sb_str(b, "NULL");
        return;
    }
    sb_str(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            sb_str(b, "\\");
        sb_add(b, s, 1);
    }
    sb_str(b, "\"");
}

/* ---- the statements -------------------------------------------------------- */

/* Prepared once per session of the writer's connection (PostgreSQL then
 * parses and plans them once, not per transaction).  Each takes arrays, so a
 * transaction runs each once whatever the number of SKUs and orders. */
enum writer_stmt {
    WS_LOCK,
    WS_FENCE,
    WS_EXISTING,
    WS_RULES,
    WS_USER_UNITS,
    WS_CANCELS,
    WS_TAKE_STOCK,
    WS_INSERT,
    WS_LEDGER,
    WS_COUNT
};
static const struct {
    const char *name, *sql; /* statement name, sql/<sql>.sql */
    int nparams;
} writer_stmts[WS_COUNT] = {
    [WS_LOCK] = {"seckill_w_lock", "skus_lock_many", 1},
    [WS_FENCE] = {"seckill_w_fence", "skus_fence_many", 2},
    [WS_EXISTING] = {"seckill_w_existing", "orders_existing", 1},
    [WS_RULES] = {"seckill_w_rules", "skus_write_rules", 1},
    [WS_USER_UNITS] = {"seckill_w_user_units", "orders_user_units", 2},
    [WS_CANCELS] = {"seckill_w_cancels", "orders_cancel_requested", 1},
    [WS_TAKE_STOCK] = {"seckill_w_take_stock", "skus_take_stock", 2},
    [WS_INSERT] = {"seckill_w_insert", "orders_insert_batch", 11},
    [WS_LEDGER] = {"seckill_w_ledger", "ledger_insert_batch", 5},
};

/* Prepares the statements on conn (a new session of w's connection), after
 * DEALLOCATE ALL so that a half-done earlier attempt cannot collide.  Outside
 * any transaction.  On failure the transactions run them unnamed.
 *
 * The session never prefers a sequential scan (enable_seqscan off; each of
 * these statements has its index): a sale starts on an empty orders table,
 * and after five executions PostgreSQL keeps a generic plan, which it cost
 * before autovacuum had analyzed anything.  On a fresh table that plan was
 * a sequential scan for "id = ANY($1)", kept while the table grew: every
 * batch read every order, and a 20 s sale wrote half as many orders.
 * Planning each execution instead (plan_cache_mode = force_custom_plan)
 * cured it too, at a fifth of the throughput; with the indexes preferred,
 * the generic plans are always taken (force_generic_plan), so no batch pays
 * for planning. */
#define WRITER_SESSION_SETUP 3
static void prepare_stmts(struct writer *w, PGconn *conn)
{
    struct pgwait_stmt q[WRITER_SESSION_SETUP + WS_COUNT] = {
        {.sql = "DEALLOCATE ALL"},
        {.sql = "SET enable_seqscan = off"},
        {.sql = "SET plan_cache_mode = force_generic_plan"}};
    for (int i = 0; i < WS_COUNT; i++)
        q[WRITER_SESSION_SETUP + i] = (struct pgwait_stmt){.sql = sql_text(writer_stmts[i].sql),
                                                           .nparams = writer_stmts[i].nparams,
                                                           .name = writer_stmts[i].name,
                                                           .prepare = 1};
    PGresult *r[WRITER_SESSION_SETUP + WS_COUNT];
    struct pgwait pw;
    pgwait_start(&pw, 0, NULL);
    int ok = pgwait_pipeline(&pw, conn, WRITER_SESSION_SETUP + WS_COUNT, q, r) == 0;
    for (int i = 0; ok && i < WRITER_SESSION_SETUP + WS_COUNT; i++)
        ok = PQresultStatus(r[i]) == PGRES_COMMAND_OK;
    if (!ok)
        log_warn("writer: preparing statements failed (%s); batches parse them each time",
                 pw.err[0] ? pw.err : "refused");
    for (int i = 0; i < WRITER_SESSION_SETUP + WS_COUNT; i++)
        PQclear(r[i]); /* NULL after a failed pipeline */
    w->prepared_session = ok ? w->ctx.db.session : 0;
}

/* Statement s with its parameters: the prepared one when this session has it. */
static struct pgwait_stmt writer_stmt(const struct writer *w, enum writer_stmt s,
                                      const char *const *params)
{
    int named = w->prepared_session != 0 && w->prepared_session == w->ctx.db.session;
    return (struct pgwait_stmt){.sql = sql_text(writer_stmts[s].sql),
                                .nparams = writer_stmts[s].nparams,
                                .params = params,
                                .name = named ? writer_stmts[s].name : NULL};
}

/* ---- per-batch state ------------------------------------------------------- */

static void units_init(struct user_units *u, size_t n)
{
    u->cap = 16;
    while (u->cap < 2 * n)
        u->cap *= 2;
    u->user = xcalloc(u->cap, sizeof *u->user);
    u->units = xcalloc(u->cap, sizeof *u->units);
}

static void units_free(struct user_units *u)
{
    free(u->user);
    free(u->units);
    u->user = u->units = NULL;
    u->cap = 0;
}

static int64_t *units_of(struct user_units *u, int64_t user)
{
    size_t i = (size_t)((uint64_t)user * UINT64_C(0x9E3779B97F4A7C15) >> 32) & (u->cap - 1);
    while (u->user[i] && u->user[i] != user)
        i = (i + 1) & (u->cap - 1);
    u->user[i] = user;
    return &u->units[i];
}

/* Fresh decisions for an attempt: only the ids repeated within the batch are
 * decided (dead letters) before the database is read. */
static void attempt_reset(struct batch *b)
{
    free(b->dec), free(b->reason), free(b->reapply), free(b->cancel_ms);
    units_free(&b->units);
    size_t n = b->n ? b->n : 1;
    b->dec = xcalloc(n, sizeof *b->dec);
    b->reason = xcalloc(n, sizeof *b->reason);
    b->reapply = xcalloc(n, sizeof *b->reapply);
    b->cancel_ms = xcalloc(n, sizeof *b->cancel_ms);
    units_init(&b->units, b->n);
    b->conflicts = 0;
    b->locked = b->busy = b->in_tx = b->stale = b->rules = b->finished = 0;
    b->stock = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->dup[i]) { /* a second entry with an id seen earlier in the batch */
            b->dec[i] = DEC_DEAD;
            b->reason[i] = b->dup[i];
            b->conflicts++;
        }
}

/* ---- looking batches and entries up --------------------------------------- */

/* The batches of one round trip, sorted by SKU id, and their entries by
 * order id (open addressing; an id in two entries is found twice). */
struct group {
    struct batch **b;
    size_t n;
    atomic_int *any_lost; /* the transaction's abort flag (txlock_bind_all) */
    struct entry_ref {
        int64_t id; /* 0: empty */
        uint32_t b, i;
    } * refs;
    size_t cap;
};

/* The index in g of the batch of sku, or g->n when it has none. */
static size_t group_find(const struct group *g, int64_t sku)
{
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g->b[mid]->sku < sku)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < g->n && g->b[lo]->sku == sku ? lo : g->n;
}

static struct batch *group_sku(const struct group *g, int64_t sku)
{
    size_t k = group_find(g, sku);
    return k < g->n ? g->b[k] : NULL;
}

static size_t id_slot(int64_t id, size_t cap)
{
    return (size_t)((uint64_t)id * UINT64_C(0x9E3779B97F4A7C15) >> 32) & (cap - 1);
}

static void group_index(struct group *g)
{
    size_t n = 0;
    for (size_t k = 0; k < g->n; k++)
        n += g->b[k]->n;
    g->cap = 16;
    while (g->cap < 2 * n)
        g->cap *= 2;
    g->refs = xcalloc(g->cap, sizeof *g->refs);
    for (size_t k = 0; k < g->n; k++)
        for (size_t i = 0; i < g->b[k]->n; i++) {
            struct batch *b = g->b[k];
            int64_t id = b->e[i].order_id;
            size_t s = id_slot(id, g->cap);
            int seen = 0; /* in another SKU's batch: Redis issued it twice */
            for (; g->refs[s].id; s = (s + 1) & (g->cap - 1))
                seen |= g->refs[s].id == id && g->refs[s].b != k;
            if (seen && b->dec[i] != DEC_DEAD) {
                log_error("sku %" PRId64 ": order id %" PRId64
                          " also read for another SKU: Redis lost writes",
                          b->sku, id);
                metrics_add(M_WRITER_ID_CONFLICTS, 1);
                b->dec[i] = DEC_DEAD;
                b->reason[i] = ORDER_REASON_ID_CONFLICT;
                b->conflicts++;
            }
            g->refs[s] = (struct entry_ref){.id = id, .b = (uint32_t)k, .i = (uint32_t)i};
        }
}

/* ---- reading what the decisions depend on ---------------------------------- */

/* One row of orders_existing.sql against the entries with its id.  An entry
 * whose id the database holds for another order (Redis went back in time and
 * issued the id again) becomes a dead letter: it is never merged with the
 * row. */
static void load_existing_row(struct batch *b, size_t i, const PGresult *r, int row)
{
    if (b->dec[i] == DEC_DEAD)
        return;
    /* rejected by the database, or cancelled by its buyer before any writer
     * wrote it: either way it never took stock */
    const char *status = PQgetvalue(r, row, 1);
    int cancelled = strcmp(status, "cancelled") == 0 && !PQgetisnull(r, row, 4);
    int rejected = strcmp(status, "rejected") == 0 || cancelled;
    int64_t user = atoll(PQgetvalue(r, row, 2)), qty = atoll(PQgetvalue(r, row, 3));
    int64_t reserved_ms = atoll(PQgetvalue(r, row, 6)), sku = atoll(PQgetvalue(r, row, 7));
    /* Same buyer and qty is not enough: the buyer may have ordered the same
     * again under the reissued id.  The stream entry's time is the
     * reservation's own, and the row must be of this SKU. */
    if (sku != b->sku || b->e[i].user_id != user || b->e[i].qty != qty ||
        b->e[i].reserved_ms != reserved_ms) {
        log_error("sku %" PRId64 ": order id %" PRId64
                  " reused by a different order: Redis lost writes; the entry goes to "
                  "the dead letters and the SKU is rebuilt",
                  b->sku, b->e[i].order_id);
        metrics_add(M_WRITER_ID_CONFLICTS, 1);
        b->dec[i] = DEC_DEAD;
        b->reason[i] = ORDER_REASON_ID_CONFLICT;
        b->conflicts++;
        return;
    }
    b->dec[i] = rejected ? DEC_REJECTED : DEC_CONFIRMED;
    /* the row's reason string dies with r: map it to our constants (a
     * rejected row says one of the two guards; an id conflict is never a row) */
    b->reason[i] = !rejected                                                ? ""
                   : cancelled                                              ? ORDER_REASON_CANCELLED
                   : strcmp(PQgetvalue(r, row, 4), ORDER_REASON_LIMIT) == 0 ? ORDER_REASON_LIMIT
                                                                            : ORDER_REASON_NO_STOCK;
    b->reapply[i] = PQgetisnull(r, row, 5) ? 0 : (int32_t)atol(PQgetvalue(r, row, 5));
}

/* Calls fn for every entry of a reading batch (in_tx) whose order id is id. */
static void each_entry(const struct group *g, const char *id_text, const uint8_t *reading,
                       void (*fn)(struct batch *, size_t, const PGresult *, int), const PGresult *r,
                       int row)
{
    int64_t id = atoll(id_text);
    for (size_t s = id_slot(id, g->cap); g->refs[s].id; s = (s + 1) & (g->cap - 1))
        if (g->refs[s].id == id && reading[g->refs[s].b])
            fn(g->b[g->refs[s].b], g->refs[s].i, r, row);
}

/* A cancel request (orders_cancel_requested.sql) counts for the reservation
 * it names: its buyer and its stream entry (an id Redis issued again after
 * losing writes is another order, the same buyer's even).  A request that
 * names no entry was recorded before requests did: its buyer's. */
static void load_cancel_row(struct batch *b, size_t i, const PGresult *r, int row)
{
    const char *entry = PQgetvalue(r, row, 3);
    if (b->e[i].user_id == atoll(PQgetvalue(r, row, 1)) &&
        (entry[0] == '\0' || strcmp(entry, b->e[i].stream_id) == 0))
        b->cancel_ms[i] = atoll(PQgetvalue(r, row, 2));
}

/* Applies the reads of one round trip (existing rows, rules, units, cancel
 * requests) to the batches marked in 'reading'.  Returns 0, or -1 when a
 * SKU's rules are missing. */
static int apply_reads(const struct group *g, const uint8_t *reading, PGresult *const *r)
{
    const PGresult *existing = r[0], *rules = r[1], *units = r[2], *cancels = r[3];
    for (int row = 0; row < PQntuples(existing); row++)
        each_entry(g, PQgetvalue(existing, row, 0), reading, load_existing_row, existing, row);
    for (int row = 0; row < PQntuples(rules); row++) {
        size_t k = group_find(g, atoll(PQgetvalue(rules, row, 0)));
        if (k == g->n || !reading[k])
            continue;
        struct batch *b = g->b[k];
        b->limit = atoll(PQgetvalue(rules, row, 1));
        b->load_epoch = PQgetisnull(rules, row, 2) ? 0 : atoll(PQgetvalue(rules, row, 2));
        b->window_s = atoll(PQgetvalue(rules, row, 3));
        b->rules = 1;
    }
    for (int row = 0; row < PQntuples(units); row++) {
        size_t k = group_find(g, atoll(PQgetvalue(units, row, 0)));
        if (k < g->n && reading[k])
            *units_of(&g->b[k]->units, atoll(PQgetvalue(units, row, 1))) =
                atoll(PQgetvalue(units, row, 2));
    }
    for (int row = 0; row < PQntuples(cancels); row++)
        each_entry(g, PQgetvalue(cancels, row, 0), reading, load_cancel_row, cancels, row);
    for (size_t k = 0; k < g->n; k++)
        if (reading[k] && !g->b[k]->rules) {
            log_error("sku %" PRId64 ": its rules could not be read", g->b[k]->sku);
            return -1;
        }
    return 0;
}

/* A lock lost by a batch left out of the transaction (its token refused for
 * good) must not abort the statements of the others: its loss no longer
 * raises the transaction's abort flag, which is then up only when a lock of
 * a batch still in it is lost (re-checked after the unhooking, so a loss
 * that races it is not missed). */
static void leave_out_lost(const struct group *g)
{
    if (!g->any_lost)
        return;
    for (size_t k = 0; k < g->n; k++)
        if (!g->b[k]->in_tx)
            atomic_store(&g->b[k]->lock.lost_also, NULL);
    atomic_store(g->any_lost, 0);
    for (size_t k = 0; k < g->n; k++)
        if (g->b[k]->in_tx && atomic_load(&g->b[k]->lock.lost))
            atomic_store(g->any_lost, 1);
}

/* Reads, in one round trip, the fenced row locks (with 'fence': they go
 * first, so the reads come after them) and what the decisions of the
 * batches marked in 'want' depend on.  A batch whose token PostgreSQL
 * refuses goes through txlock_fence (newer tokens under the row lock):
 * accepted then, its reads run again; refused for good, it is left out
 * (stale); its SKU gone, left out.  Returns 0, or -1 when the transaction
 * failed. */
static int read_state(struct dbtx *tx, struct writer *w, struct group *g, const uint8_t *want,
                      int fence)
{
    struct sbuf skus = {0}, tokens = {0}, ids = {0}, unit_skus = {0}, unit_users = {0};
    for (size_t k = 0; k < g->n; k++) {
        const struct batch *b = g->b[k];
        if (!want[k])
            continue;
        sb_next(&skus), sb_i64(&skus, b->sku);
        sb_next(&tokens), sb_i64(&tokens, b->lock.fence);
        for (size_t i = 0; i < b->n; i++) {
            sb_next(&ids), sb_i64(&ids, b->e[i].order_id);
            sb_next(&unit_skus), sb_i64(&unit_skus, b->sku);
            sb_next(&unit_users), sb_i64(&unit_users, b->e[i].user_id);
        }
    }
    struct sbuf *all[] = {&skus, &tokens, &ids, &unit_skus, &unit_users};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sb_close(all[i]);
    const char *fence_p[] = {skus.p, tokens.p}, *ids_p[] = {ids.p}, *rules_p[] = {skus.p},
               *units_p[] = {unit_skus.p, unit_users.p};
    struct pgwait_stmt q[6];
    size_t nq = 0;
    if (fence) {
        q[nq++] = writer_stmt(w, WS_LOCK, rules_p);
        q[nq++] = writer_stmt(w, WS_FENCE, fence_p);
    }
    size_t first = nq;
    q[nq++] = writer_stmt(w, WS_EXISTING, ids_p);
    q[nq++] = writer_stmt(w, WS_RULES, rules_p);
    q[nq++] = writer_stmt(w, WS_USER_UNITS, units_p);
    q[nq++] = writer_stmt(w, WS_CANCELS, ids_p);
    PGresult *r[6] = {0};
    int rc = dbtx_exec_pipeline(tx, nq, q, r);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]->p);
    if (rc != 0)
        return -1;
    uint8_t *reading = xcalloc(g->n, 1), *again = xcalloc(g->n, 1);
    memcpy(reading, want, g->n);
    int reread = 0;
    if (fence) {
        const PGresult *fenced = r[1]; /* r[0]: the rows locked */
        for (int row = 0; row < PQntuples(fenced); row++) {
            struct batch *b = group_sku(g, atoll(PQgetvalue(fenced, row, 0)));
            if (b) {
                b->in_tx = 1;
                b->stock = atoll(PQgetvalue(fenced, row, 1));
            }
        }
        for (size_t k = 0; k < g->n && rc == 0; k++) {
            struct batch *b = g->b[k];
            if (!want[k] || b->in_tx)
                continue;
            /* Refused: these reads ran without its row lock. */
            reading[k] = 0;
            int got = txlock_fence(&b->lock, tx, &b->stock);
            if (got == 1) {
                b->in_tx = 1;
                again[k] = 1;
                reread = 1;
            } else if (got == TXLOCK_STALE) {
                b->stale = 1;
            } else if (got == 0) {
                log_warn("sku %" PRId64 ": gone from the database; its batch waits", b->sku);
            } else {
                rc = -1;
            }
        }
        leave_out_lost(g);
    }
    if (rc == 0)
        rc = apply_reads(g, reading, r + first);
    for (size_t i = 0; i < nq; i++)
        PQclear(r[i]);
    if (rc == 0 && reread)
        rc = read_state(tx, w, g, again, 0);
    free(reading);
    free(again);
    return rc;
}

/* ---- deciding and writing ------------------------------------------------- */

/* Decides the new orders first come first served in stream order: the
 * database's stock and per-user limit are the last word (I1, I3), whatever
 * Redis believed when it reserved them.  Returns the units taken and sets
 * *fresh to the number of orders decided now. */
static int64_t decide_new(struct batch *b, size_t *fresh)
{
    int64_t take = 0;
    *fresh = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->dec[i] != DEC_NONE)
            continue;
        (*fresh)++;
        int64_t *held = units_of(&b->units, b->e[i].user_id);
        if (b->cancel_ms[i]) { /* its buyer cancelled it first: it takes nothing */
            b->dec[i] = DEC_REJECTED;
            b->reason[i] = ORDER_REASON_CANCELLED;
        } else if (b->e[i].qty > b->stock - take) {
            b->dec[i] = DEC_REJECTED;
            b->reason[i] = ORDER_REASON_NO_STOCK;
        } else if (*held + b->e[i].qty > b->limit) {
            b->dec[i] = DEC_REJECTED;
            b->reason[i] = ORDER_REASON_LIMIT;
        } else {
            b->dec[i] = DEC_CONFIRMED;
            take += b->e[i].qty;
            *held += b->e[i].qty;
            /* reserved before the SKU's last rebuild: that rebuild did not count it */
            if (order_id_epoch(b->e[i].order_id) < b->load_epoch)
                b->reapply[i] = (int32_t)b->load_epoch;
        }
    }
    return take;
}

/* The arrays of the write statements, for every SKU of the transaction. */
struct write_args {
    struct sbuf take_skus, take_n;
    struct sbuf skus, ids, users, qtys, status, reasons, idems, ms, reapply, windows, cancelled;
    struct sbuf l_skus, kinds, deltas, afters, lids;
};

/* Adds the orders of b decided now (was[i] == DEC_NONE) to the arrays. */
static void add_writes(struct write_args *a, const struct batch *b, const enum decision *was,
                       int64_t take)
{
    if (take > 0) {
        sb_next(&a->take_skus), sb_i64(&a->take_skus, b->sku);
        sb_next(&a->take_n), sb_i64(&a->take_n, take);
    }
    int64_t ledger_after = b->stock; /* walk forward from the stock before the batch */
    for (size_t i = 0; i < b->n; i++) {
        if (was[i] != DEC_NONE)
            continue;
        const struct writer_entry *e = &b->e[i];
        int ok = b->dec[i] == DEC_CONFIRMED, cancel = batch_is_cancelled(b, i);
        sb_next(&a->skus), sb_i64(&a->skus, b->sku);
        sb_next(&a->ids), sb_i64(&a->ids, e->order_id);
        sb_next(&a->users), sb_i64(&a->users, e->user_id);
        sb_next(&a->qtys), sb_i64(&a->qtys, e->qty);
        sb_next(&a->status);
        sb_str(&a->status, ok ? "confirmed" : cancel ? "cancelled" : "rejected");
        sb_next(&a->reasons), sb_array_text(&a->reasons, ok ? NULL : b->reason[i]);
        sb_next(&a->idems), sb_array_text(&a->idems, e->idem[0] ? e->idem : NULL);
        sb_next(&a->ms), sb_i64(&a->ms, e->reserved_ms);
        sb_next(&a->reapply);
        if (b->reapply[i])
            sb_i64(&a->reapply, b->reapply[i]);
        else
            sb_str(&a->reapply, "NULL");
        sb_next(&a->windows), sb_i64(&a->windows, b->window_s);
        sb_next(&a->cancelled);
        if (cancel)
            sb_i64(&a->cancelled, b->cancel_ms[i]);
        else
            sb_str(&a->cancelled, "NULL");
        if (ok)
            ledger_after -= e->qty;
        sb_next(&a->l_skus), sb_i64(&a->l_skus, b->sku);
        sb_next(&a->kinds), sb_str(&a->kinds, ok ? "order" : cancel ? "cancel" : "rejection");
        sb_next(&a->deltas), sb_i64(&a->deltas, ok ? -e->qty : 0);
        sb_next(&a->afters), sb_i64(&a->afters, ledger_after);
        sb_next(&a->lids), sb_i64(&a->lids, e->order_id);
    }
}

#define WRITE_ARGS_N 18
static void write_args_all(struct write_args *a, struct sbuf *out[WRITE_ARGS_N])
{
    struct sbuf *all[WRITE_ARGS_N] = {
        &a->take_skus, &a->take_n,  &a->skus,  &a->ids,    &a->users,   &a->qtys,
        &a->status,    &a->reasons, &a->idems, &a->ms,     &a->reapply, &a->windows,
        &a->cancelled, &a->l_skus,  &a->kinds, &a->deltas, &a->afters,  &a->lids};
    memcpy(out, all, sizeof all);
}

/* Decides every batch in the transaction and writes the new orders of all of
 * them in one round trip: the guarded stock updates, the rows, the ledger;
 * each result checked.  Returns 0, or -1 (the caller rolls back). */
static int write_new_orders(struct dbtx *tx, struct writer *w, const struct group *g)
{
    struct write_args a = {0};
    struct sbuf *all[WRITE_ARGS_N];
    write_args_all(&a, all);
    int64_t *takes = xcalloc(g->n, sizeof *takes);
    size_t fresh_all = 0, ntake = 0;
    for (size_t k = 0; k < g->n; k++) {
        struct batch *b = g->b[k];
        if (!b->in_tx)
            continue;
        enum decision *was = xmalloc((b->n ? b->n : 1) * sizeof *was);
        memcpy(was, b->dec, b->n * sizeof *was);
        size_t fresh;
        takes[k] = decide_new(b, &fresh);
        if (fresh > 0)
            add_writes(&a, b, was, takes[k]);
        fresh_all += fresh;
        ntake += takes[k] > 0;
        free(was);
    }
    int rc = -1;
    if (fresh_all == 0) { /* a replay: everything was decided already */
        rc = 0;
        goto out;
    }
    for (size_t i = 0; i < WRITE_ARGS_N; i++)
        sb_close(all[i]);
    /* (the parameter arrays live as long as the statements that point at them) */
    const char *take_p[] = {a.take_skus.p, a.take_n.p};
    const char *ins_p[] = {a.skus.p,  a.ids.p, a.users.p,   a.qtys.p,    a.status.p,   a.reasons.p,
                           a.idems.p, a.ms.p,  a.reapply.p, a.windows.p, a.cancelled.p};
    const char *led_p[] = {a.l_skus.p, a.kinds.p, a.deltas.p, a.afters.p, a.lids.p};
    struct pgwait_stmt q[3];
    size_t nq = 0;
    if (ntake > 0)
        q[nq++] = writer_stmt(w, WS_TAKE_STOCK, take_p);
    q[nq++] = writer_stmt(w, WS_INSERT, ins_p);
    q[nq++] = writer_stmt(w, WS_LEDGER, led_p);
    PGresult *r[3];
    if (dbtx_exec_pipeline(tx, nq, q, r) != 0)
        goto out;
    const PGresult *took = ntake > 0 ? r[0] : NULL, *ins = r[nq - 2];
    rc = 0;
    /* The guard is the last word: a SKU without its row did not have the
     * stock (and under the row lock it is exactly what the fence read, less
     * the take). */
    if (took && (size_t)PQntuples(took) != ntake) {
        log_error("guarded stock update refused %zu of %zu SKUs", ntake - (size_t)PQntuples(took),
                  ntake);
        rc = -1;
    }
    for (int row = 0; took && rc == 0 && row < PQntuples(took); row++) {
        const struct batch *b = group_sku(g, atoll(PQgetvalue(took, row, 0)));
        size_t k = 0;
        while (b && g->b[k] != b)
            k++;
        if (!b || atoll(PQgetvalue(took, row, 1)) != b->stock - takes[k]) {
            log_error("sku %s: guarded stock update left an unexpected stock",
                      PQgetvalue(took, row, 0));
            rc = -1;
        }
    }
    /* Under the locks nobody else writes these ids: every new row must land. */
    if (rc == 0 && (size_t)PQntuples(ins) != fresh_all) {
        log_error("inserted %d of %zu orders", PQntuples(ins), fresh_all);
        rc = -1;
    }
    /* A COMMIT whose answer is lost in a failover is looked up by its id,
     * which the new primary may have given another transaction: the rows
     * say whether it is ours. */
    const char *witness_p[] = {a.ids.p};
    if (rc == 0 && dbtx_set_witness(tx, sql_text("orders_witness"), 1, witness_p) != 0)
        rc = -1;
    for (size_t i = 0; i < nq; i++)
        PQclear(r[i]);
out:
    for (size_t i = 0; i < WRITE_ARGS_N; i++)
        free(all[i]->p);
    free(takes);
    return rc;
}

/* ---- one transaction -------------------------------------------------------- */

/* Completion hook, registered after the locks': runs while they are held. */
static void on_tx_complete(enum dbtx_outcome outcome, void *arg)
{
    struct group *g = arg;
    struct batch **written = xmalloc((g->n ? g->n : 1) * sizeof *written);
    size_t n = 0;
    for (size_t k = 0; k < g->n; k++) {
        struct batch *b = g->b[k];
        if (!b->in_tx)
            continue;
        written[n++] = b;
        if (outcome == DBTX_UNKNOWN)
            log_error("sku %" PRId64 ": batch outcome unknown; it will be replayed", b->sku);
    }
    if (outcome == DBTX_COMMITTED)
        writer_settle_all(written, n);
    free(written);
}

static int by_sku(const void *x, const void *y)
{
    const struct batch *a = *(struct batch *const *)x, *b = *(struct batch *const *)y;
    return (a->sku > b->sku) - (a->sku < b->sku);
}

/* Takes each batch's writer lock (one fenced lock per SKU: its writers take
 * turns, and a batch of any size is one SET and one DEL).  Without 'wait',
 * one attempt at every lock in one round trip, a busy one left out
 * (b->busy); with it, one lock after another in id order, each waited for
 * up to lock_wait_ms (id order: two writers never wait on each other in a
 * circle), and a batch whose lock had to be waited for takes what queued
 * meanwhile.  Returns the number taken. */
static size_t lock_all(struct writer *w, const struct group *g, int wait)
{
    size_t taken = 0;
    if (!wait) {
        struct txlock **t = xmalloc(g->n * sizeof *t);
        int64_t *skus = xmalloc(g->n * sizeof *skus);
        char(*keys)[KEYS_MAX] = xmalloc(g->n * sizeof *keys);
        const char **kp = xmalloc(g->n * sizeof *kp);
        enum rlock_status *st = xmalloc(g->n * sizeof *st);
        for (size_t k = 0; k < g->n; k++) {
            t[k] = &g->b[k]->lock;
            skus[k] = g->b[k]->sku;
            keys_sku(keys[k], skus[k], KEY_WRITER_LOCK);
            kp[k] = keys[k];
        }
        int got = txlock_try_each(t, &w->ctx.redis, w->ctx.cfg, skus, kp, g->n, st);
        for (size_t k = 0; got >= 0 && k < g->n; k++) {
            g->b[k]->locked = st[k] == RLOCK_OK;
            g->b[k]->busy = st[k] != RLOCK_OK;
            taken += g->b[k]->locked;
            if (st[k] != RLOCK_OK)
                log_debug("sku %" PRId64 ": batch lock: %s", skus[k], rlock_status_str(st[k]));
        }
        free(st), free(kp), free(keys), free(skus), free(t);
        if (got >= 0)
            return taken;
        /* this connection takes them one at a time */
    }
    for (size_t k = 0; k < g->n; k++) {
        struct batch *b = g->b[k];
        char lock_key[KEYS_MAX];
        keys_sku(lock_key, b->sku, KEY_WRITER_LOCK);
        int64_t asked_ms = clock_mono_ms();
        enum rlock_status st = txlock_acquire(&b->lock, &w->ctx.redis, w->ctx.cfg, b->sku,
                                              (const char *const[]){lock_key}, 1);
        if (st != RLOCK_OK) {
            /* Busy beyond lock_wait_ms: another writer is stuck on this SKU;
             * the entries stay pending and are reclaimed if it never finishes. */
            log_debug("sku %" PRId64 ": batch lock: %s", b->sku, rlock_status_str(st));
            b->busy = 1;
            continue;
        }
        b->locked = 1;
        taken++;
        /* Only a lock that had to be waited for (its winning request went out
         * later than the first) leaves orders queued behind the batch read. */
        if (b->top_up && b->lock.lock.acquired_mono_ms > asked_ms) {
            b->top_up = 0;
            writer_top_up(b);
            attempt_reset(b); /* room for the entries it added */
            b->locked = 1;
        }
    }
    return taken;
}

static void release_all(const struct group *g)
{
    for (size_t k = 0; k < g->n; k++)
        if (g->b[k]->locked) {
            txlock_release(&g->b[k]->lock);
            g->b[k]->locked = 0;
        }
}

void writer_tx_write(struct writer *w, struct batch *const *in, size_t n, int wait)
{
    const struct cfg *c = w->ctx.cfg;
    struct group g = {.n = 0};
    g.b = xmalloc((n ? n : 1) * sizeof *g.b);
    for (size_t k = 0; k < n; k++) {
        in[k]->done = 0;
        attempt_reset(in[k]);
        g.b[g.n++] = in[k];
    }
    qsort(g.b, g.n, sizeof *g.b, by_sku);
    if (lock_all(w, &g, wait) == 0)
        goto out;
    /* Only the locked batches go on; the locks are bound in the order taken. */
    size_t nl = 0;
    for (size_t k = 0; k < g.n; k++)
        if (g.b[k]->locked)
            g.b[nl++] = g.b[k];
    g.n = nl;
    group_index(&g);

    PGconn *conn = db_conn_get(&w->ctx.db);
    if (conn && w->prepared_session != w->ctx.db.session)
        prepare_stmts(w, conn);
    struct dbtx *tx =
        conn && PQstatus(conn) == CONNECTION_OK
            ? dbtx_begin_deferred(conn, w->ctx.db.dsn, DBTX_ISO_READ_COMMITTED, NULL, 0)
            : NULL;
    if (!tx) {
        release_all(&g);
        goto out;
    }
    /* Hooks run in reverse: settle the batches first, release the locks last.
     * A loss of any lock ends the statement in progress at once. */
    atomic_int any_lost;
    atomic_init(&any_lost, 0);
    struct txlock **locks = xmalloc(g.n * sizeof *locks);
    for (size_t k = 0; k < g.n; k++)
        locks[k] = &g.b[k]->lock;
    int bound = txlock_bind_all(locks, g.n, tx, &any_lost) == 0;
    g.any_lost = &any_lost;
    free(locks);
    if (!bound) {
        (void)dbtx_rollback(tx);
        release_all(&g);
        goto out;
    }
    if (dbtx_on_complete(tx, on_tx_complete, &g) != 0) {
        (void)dbtx_rollback(tx); /* releases the locks */
        goto out;
    }
    uint8_t *want = xmalloc(g.n);
    memset(want, 1, g.n);
    /* The fenced row locks come first, in the round trip of the reads: a
     * writer whose lease ran out while it was paused is refused there by
     * PostgreSQL, before it writes anything. */
    int rc = read_state(tx, w, &g, want, 1);
    free(want);
    size_t in_tx = 0;
    for (size_t k = 0; k < g.n; k++)
        in_tx += g.b[k]->in_tx;
    if (rc != 0 || (in_tx > 0 && write_new_orders(tx, w, &g) != 0)) {
        log_warn("batches of %zu SKUs rolled back: %s", g.n, dbtx_error(tx));
        if (strcmp(dbtx_sqlstate(tx), "26000") == 0) /* a prepared statement is gone */
            w->prepared_session = 0;
        for (size_t k = 0; k < g.n; k++)
            g.b[k]->in_tx = 0;
        (void)dbtx_rollback(tx);
        goto out;
    }
    for (size_t k = 0; k < g.n; k++)
        if (g.b[k]->in_tx && !txlock_still_valid(&g.b[k]->lock, c->lock_commit_margin_ms)) {
            /* Our lease may be over: another writer may hold these orders now. */
            log_warn("sku %" PRId64 ": lock lease too short to commit; rolling back", g.b[k]->sku);
            for (size_t j = 0; j < g.n; j++)
                g.b[j]->in_tx = 0;
            (void)dbtx_rollback(tx);
            goto out;
        }
    if (dbtx_commit(tx, NULL, 0, NULL) == DBTX_COMMITTED) {
        for (size_t k = 0; k < g.n; k++)
            g.b[k]->done = g.b[k]->in_tx && g.b[k]->finished;
        if (in_tx > 0)
            metrics_add(M_WRITER_TRANSACTIONS, 1);
    }
out:
    for (size_t k = 0; k < g.n; k++)
        g.b[k]->locked = 0; /* released by the hooks, or never taken */
    free(g.refs);
    free(g.b);
}

/* ---- batches -------------------------------------------------------------- */

struct batch *batch_new(struct writer *w, int64_t sku)
{
    struct batch *b = xcalloc(1, sizeof *b);
    b->w = w;
    b->sku = sku;
    return b;
}

void batch_free(struct batch *b)
{
    if (!b)
        return;
    free(b->e), free(b->dup);
    free(b->dec), free(b->reason), free(b->reapply), free(b->cancel_ms);
    units_free(&b->units);
    free(b);
}

void batch_reserve(struct batch *b, size_t n)
{
    if (n <= b->cap)
        return;
    struct writer_entry *e = xrealloc(b->e, n * sizeof *e);
    const char **dup = xrealloc(b->dup, n * sizeof *dup);
    b->e = e;
    b->dup = dup;
    b->cap = n;
}

void batch_mark_dups(struct batch *b, size_t from)
{
    for (size_t i = from; i < b->n; i++) {
        b->dup[i] = NULL;
        for (size_t j = 0; j < i && !b->dup[i]; j++)
            if (b->e[i].order_id == b->e[j].order_id && !b->dup[j]) {
                log_error("sku %" PRId64 ": order id %" PRId64
                          " appears twice in the stream: Redis lost writes",
                          b->sku, b->e[i].order_id);
                metrics_add(M_WRITER_ID_CONFLICTS, 1);
                b->dup[i] = ORDER_REASON_ID_CONFLICT;
            }
    }
}
