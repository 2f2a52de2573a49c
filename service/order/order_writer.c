#include "order/order_writer.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/embedded.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "order/order.h"
#include "order/soldout.h"
#include "sku/reconcile.h"
#include "sku/sku.h"
#include "store/dbtx.h"
#include "store/txlock.h"

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
        char *p = realloc(b->p, cap);
        if (!p)
            abort();
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

/* ---- one batch ----------------------------------------------------------- */

enum decision {
    DEC_NONE,
    DEC_CONFIRMED,
    DEC_REJECTED,
    DEC_DEAD /* its id belongs to another order in the database: dead letter */
};

struct batch {
    struct writer *w;
    int64_t sku;
    const struct writer_entry *e;
    size_t n;
    enum decision *dec;  /* what the database holds for each entry after commit */
    const char **reason; /* of rejections and dead letters */
    int32_t *reapply;    /* load epoch the confirmed order must be taken from, or 0 */
    int64_t *cancel_ms;  /* its buyer cancelled it before it was written: when (Unix ms), or 0 */
    int64_t limit;       /* per-user limit, from skus */
    int64_t window_s;    /* payment window of the orders it confirms, from skus (0: none) */
    int64_t load_epoch;  /* the SKU's last load into Redis, from sku_epochs */
    int conflicts;       /* dead letters: Redis went back in time, rebuild the SKU */
    int finished;        /* stock returned, reapplied, dead letters moved, acknowledged */
};

static int is_rejected(const struct batch *b, size_t i)
{
    return b->dec[i] == DEC_REJECTED;
}

/* A rejection by its buyer, not by the database's guards. */
static int is_cancelled(const struct batch *b, size_t i)
{
    return b->dec[i] == DEC_REJECTED && strcmp(b->reason[i], ORDER_REASON_CANCELLED) == 0;
}

/* Runs a script over the SKU's journal, stock, bought and meta keys (and,
 * for the reapply of load 'epoch', its debts) with ARGV 'lead' (may be NULL),
 * then per selected entry the order, user, qty and (with 'reasons') its
 * reason, then 'tail' (may be NULL).  Returns the script's integer answer, or
 * -1 when Redis failed. */
static long long run_for(struct batch *b, const struct rlock_script *s, const char *lead,
                         int reasons, const char *tail, int (*want)(const struct batch *, size_t),
                         int32_t epoch)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        n += want(b, i) && (!epoch || b->reapply[i] == epoch);
    if (n == 0)
        return 0;
    char keys[5][KEYS_MAX];
    static const enum keys_kind kinds[] = {KEY_JOURNAL, KEY_STOCK, KEY_BOUGHT, KEY_META, KEY_DEBTS};
    int nkeys = epoch ? 5 : 4;
    const char **argv = calloc(7 + 4 * n, sizeof *argv);
    char(*nums)[3][24] = calloc(n, sizeof *nums);
    if (!argv || !nums)
        abort();
    size_t argc = 0, k = 0;
    for (int i = 0; i < nkeys; i++) {
        keys_sku(keys[i], b->sku, kinds[i]);
        argv[argc++] = keys[i];
    }
    if (lead)
        argv[argc++] = lead;
    for (size_t i = 0; i < b->n; i++) {
        if (!want(b, i) || (epoch && b->reapply[i] != epoch))
            continue;
        snprintf(nums[k][0], sizeof nums[k][0], "%" PRId64, b->e[i].order_id);
        snprintf(nums[k][1], sizeof nums[k][1], "%" PRId64, b->e[i].user_id);
        snprintf(nums[k][2], sizeof nums[k][2], "%" PRId64, b->e[i].qty);
        for (int j = 0; j < 3; j++)
            argv[argc++] = nums[k][j];
        if (reasons)
            argv[argc++] = b->reason[i];
        k++;
    }
    if (tail)
        argv[argc++] = tail;
    redisReply *r = redis_conn_script(&b->w->ctx.redis, s, nkeys, (int)argc - nkeys, argv, NULL);
    long long rc = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r && rc < 0)
        log_warn("%s: %s", s->name, r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    if (r)
        freeReplyObject(r);
    free(argv);
    free(nums);
    return rc;
}

static int wants_reapply(const struct batch *b, size_t i)
{
    return b->dec[i] == DEC_CONFIRMED && b->reapply[i] > 0;
}

/* Takes every confirmed order that a rebuild of Redis did not count from the
 * rebuilt state (once each, orders_reapply.lua), one call per load epoch.
 * The duty is in the orders' rows, so a replay repeats it harmlessly. */
static int reapply_orders(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (!wants_reapply(b, i))
            continue;
        int32_t epoch = b->reapply[i];
        int seen = 0; /* handled with an earlier entry of the same epoch */
        for (size_t j = 0; j < i && !seen; j++)
            seen = wants_reapply(b, j) && b->reapply[j] == epoch;
        if (seen)
            continue;
        char ep[24];
        snprintf(ep, sizeof ep, "%" PRId32, epoch);
        long long n = run_for(b, &script_orders_reapply, NULL, 0, ep, wants_reapply, epoch);
        if (n < 0)
            return -1;
        if (n > 0) {
            log_warn("sku %" PRId64 ": %lld orders written after a rebuild taken from Redis",
                     b->sku, n);
            metrics_add(M_WRITER_REAPPLIED, n);
        }
    }
    return 0;
}

/* Moves the dead entries to the dead-letter stream, giving their units back
 * (orders_dead_letter.lua, exactly once by the entry's presence).  Returns 0
 * or -1. */
static int dead_letter(struct writer *w, int64_t sku, const char *const *entry_ids,
                       const char *const *reasons, int give_back, size_t n)
{
    if (n == 0)
        return 0;
    char keys[6][KEYS_MAX], max[24], per_epoch[24];
    static const enum keys_kind kinds[] = {KEY_STREAM, KEY_DEAD,   KEY_JOURNAL,
                                           KEY_STOCK,  KEY_BOUGHT, KEY_META};
    const char **argv = calloc(12 + 3 * n, sizeof *argv);
    if (!argv)
        abort();
    size_t argc = 0;
    for (int i = 0; i < 6; i++) {
        keys_sku(keys[i], sku, kinds[i]);
        argv[argc++] = keys[i];
    }
    snprintf(max, sizeof max, "%" PRId64, w->ctx.cfg->dead_letter_max);
    snprintf(per_epoch, sizeof per_epoch, "%" PRId64, ORDER_IDS_PER_EPOCH);
    argv[argc++] = KEYS_WRITER_GROUP;
    argv[argc++] = max;
    argv[argc++] = per_epoch;
    argv[argc++] = order_fields[ORDER_FIELD_ID];
    argv[argc++] = order_fields[ORDER_FIELD_USER];
    argv[argc++] = order_fields[ORDER_FIELD_QTY];
    for (size_t i = 0; i < n; i++) {
        argv[argc++] = entry_ids[i];
        argv[argc++] = reasons[i];
        argv[argc++] = give_back ? "1" : "0";
    }
    redisReply *r =
        redis_conn_script(&w->ctx.redis, &script_orders_dead_letter, 6, (int)argc - 6, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (ok && r->integer > 0) {
        for (size_t i = 0; i < n; i++)
            log_error("sku %" PRId64 ": stream entry %s moved to the dead letters (%s)", sku,
                      entry_ids[i], reasons[i]);
        metrics_add(M_WRITER_DEAD_LETTERS, (long)r->integer);
    } else if (r && !ok) {
        log_warn("orders_dead_letter: %s", r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    }
    if (r)
        freeReplyObject(r);
    free(argv);
    return ok ? 0 : -1;
}

/* Builds the decisions message of the batch (see order.h) into a heap string. */
static char *decisions_message(const struct batch *b)
{
    size_t cap = 1 + b->n * (24 + 1 + ORDER_ENTRY_MAX + 4 + ORDER_REASON_MAX), len = 0;
    char *msg = malloc(cap);
    if (!msg)
        abort();
    msg[0] = '\0';
    for (size_t i = 0; i < b->n; i++) {
        struct order_decision d = {.order_id = b->e[i].order_id,
                                   .status = b->dec[i] == DEC_CONFIRMED ? ORDER_CONFIRMED
                                                                        : ORDER_REJECTED};
        snprintf(d.entry, sizeof d.entry, "%s", b->e[i].stream_id);
        if (d.status == ORDER_REJECTED)
            snprintf(d.reason, sizeof d.reason, "%s", b->reason[i]);
        if (order_decision_append(msg, cap, &len, &d) != 0)
            abort(); /* cap covers the longest token of every entry */
    }
    return msg;
}

/* Gives back the units of rejected orders (order_return.lua is idempotent by
 * the journal), takes reapplied ones, moves dead entries, then acknowledges
 * the batch and publishes its decisions.  Returns 0, or -1 on Redis failure
 * (the entries stay pending; a replay repeats all of this harmlessly). */
static int finish_batch(struct batch *b)
{
    char per_epoch[24];
    snprintf(per_epoch, sizeof per_epoch, "%" PRId64, ORDER_IDS_PER_EPOCH);
    if (run_for(b, &script_order_return, per_epoch, 1, NULL, is_rejected, 0) < 0 ||
        reapply_orders(b) != 0)
        return -1;
    for (size_t i = 0; i < b->n; i++)
        if (is_rejected(b, i)) { /* units came back: this process sells them at once */
            soldout_clear(soldout_shared(), b->sku);
            break;
        }
    const char **dead_ids = calloc(b->n, sizeof *dead_ids);
    const char **dead_why = calloc(b->n, sizeof *dead_why);
    if (!dead_ids || !dead_why)
        abort();
    size_t ndead = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] == DEC_DEAD) {
            dead_ids[ndead] = b->e[i].stream_id;
            dead_why[ndead++] = b->reason[i];
        }
    int rc = dead_letter(b->w, b->sku, dead_ids, dead_why, 1, ndead);
    free(dead_ids);
    free(dead_why);
    if (rc != 0)
        return -1;

    char journal[KEYS_MAX], stream[KEYS_MAX], count[24];
    keys_sku(journal, b->sku, KEY_JOURNAL);
    keys_sku(stream, b->sku, KEY_STREAM);
    char *msg = decisions_message(b);
    size_t argc = 0, nack = b->n - ndead;
    const char **argv = calloc(6 + 2 * b->n, sizeof *argv);
    char(*ids)[24] = calloc(b->n, sizeof *ids);
    if (!argv || !ids)
        abort();
    snprintf(count, sizeof count, "%zu", nack);
    argv[argc++] = stream;
    argv[argc++] = journal;
    argv[argc++] = KEYS_WRITER_GROUP;
    argv[argc++] = count;
    argv[argc++] = KEYS_DECISIONS_CHANNEL;
    argv[argc++] = msg;
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] != DEC_DEAD)
            argv[argc++] = b->e[i].stream_id;
    /* A reapplied order keeps its marker: a writer that paused with this
     * batch in hand and replays it after this acknowledgement must find it. */
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] == DEC_CONFIRMED && !b->reapply[i]) {
            snprintf(ids[i], sizeof ids[i], "%" PRId64, b->e[i].order_id);
            argv[argc++] = ids[i];
        }
    redisReply *r =
        redis_conn_script(&b->w->ctx.redis, &script_orders_ack, 2, (int)argc - 2, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r && !ok)
        log_warn("orders_ack: %s", r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    if (r)
        freeReplyObject(r);
    free(argv);
    free(ids);
    free(msg);
    return ok ? 0 : -1;
}

/* Completion hook, registered after the lock's: runs while the lock is held. */
static void on_batch_complete(enum dbtx_outcome outcome, void *arg)
{
    struct batch *b = arg;
    if (outcome == DBTX_COMMITTED)
        b->finished = finish_batch(b) == 0;
    else if (outcome == DBTX_UNKNOWN)
        log_error("sku %" PRId64 ": batch outcome unknown; it will be replayed", b->sku);
}

/* The statements of a batch, prepared once per session of the writer's
 * connection (PostgreSQL then parses and plans them once, not per batch). */
enum writer_stmt {
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
    [WS_EXISTING] = {"seckill_w_existing", "orders_existing", 1},
    [WS_RULES] = {"seckill_w_rules", "sku_write_rules", 1},
    [WS_USER_UNITS] = {"seckill_w_user_units", "orders_user_units", 2},
    [WS_CANCELS] = {"seckill_w_cancels", "orders_cancel_requested", 1},
    [WS_TAKE_STOCK] = {"seckill_w_take_stock", "sku_take_stock", 2},
    [WS_INSERT] = {"seckill_w_insert", "orders_insert_batch", 11},
    [WS_LEDGER] = {"seckill_w_ledger", "ledger_insert_batch", 5},
};

/* Prepares the batch statements on conn (a new session of w's connection),
 * after DEALLOCATE ALL so that a half-done earlier attempt cannot collide.
 * Outside any transaction.  On failure the batch runs them unnamed.
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
 * for planning (orders_user_units was planned every time before). */
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

/* Statement s of a batch with its parameters: the prepared one when this
 * session has it. */
static struct pgwait_stmt writer_stmt(const struct writer *w, enum writer_stmt s,
                                      const char *const *params)
{
    int named = w->prepared_session != 0 && w->prepared_session == w->ctx.db.session;
    return (struct pgwait_stmt){.sql = sql_text(writer_stmts[s].sql),
                                .nparams = writer_stmts[s].nparams,
                                .params = params,
                                .name = named ? writer_stmts[s].name : NULL};
}

/* Reads which of the batch's orders the database already holds (a replay),
 * and what each row says, from the result of orders_existing.sql.  An entry
 * whose id the database holds for another order (Redis went back in time and
 * issued the id again) becomes a dead letter: it is never merged with the row. */
static void load_existing(struct batch *b, const PGresult *r)
{
    for (int row = 0; row < PQntuples(r); row++) {
        int64_t id = atoll(PQgetvalue(r, row, 0));
        /* rejected by the database, or cancelled by its buyer before any
         * writer wrote it: either way it never took stock */
        const char *status = PQgetvalue(r, row, 1);
        int cancelled = strcmp(status, "cancelled") == 0 && !PQgetisnull(r, row, 4);
        int rejected = strcmp(status, "rejected") == 0 || cancelled;
        int64_t user = atoll(PQgetvalue(r, row, 2)), qty = atoll(PQgetvalue(r, row, 3));
        int64_t reserved_ms = atoll(PQgetvalue(r, row, 6));
        for (size_t i = 0; i < b->n; i++) {
            if (b->e[i].order_id != id || b->dec[i] == DEC_DEAD)
                continue;
            /* Same buyer and qty is not enough: the buyer may have ordered the
             * same again under the reissued id.  The stream entry's time is
             * the reservation's own. */
            if (b->e[i].user_id != user || b->e[i].qty != qty ||
                b->e[i].reserved_ms != reserved_ms) {
                log_error("sku %" PRId64 ": order id %" PRId64
                          " reused by a different order: Redis lost writes; the entry goes to "
                          "the dead letters and the SKU is rebuilt",
                          b->sku, id);
                metrics_add(M_WRITER_ID_CONFLICTS, 1);
                b->dec[i] = DEC_DEAD;
                b->reason[i] = ORDER_REASON_ID_CONFLICT;
                b->conflicts++;
                continue;
            }
            b->dec[i] = rejected ? DEC_REJECTED : DEC_CONFIRMED;
            /* the row's reason string dies with r: map it to our constants
             * (a rejected row says one of the two guards; an id conflict is
             * never a row) */
            b->reason[i] = !rejected   ? ""
                           : cancelled ? ORDER_REASON_CANCELLED
                           : strcmp(PQgetvalue(r, row, 4), ORDER_REASON_LIMIT) == 0
                               ? ORDER_REASON_LIMIT
                               : ORDER_REASON_NO_STOCK;
            b->reapply[i] = PQgetisnull(r, row, 5) ? 0 : (int32_t)atol(PQgetvalue(r, row, 5));
        }
    }
}

/* The per-user limit and the SKU's last load epoch, from sku_write_rules.sql.
 * Returns 0 or -1. */
static int load_rules(struct batch *b, const PGresult *r)
{
    if (PQntuples(r) != 1)
        return -1;
    b->limit = atoll(PQgetvalue(r, 0, 0));
    b->load_epoch = PQgetisnull(r, 0, 1) ? 0 : atoll(PQgetvalue(r, 0, 1));
    b->window_s = atoll(PQgetvalue(r, 0, 2));
    return 0;
}

/* The cancel requests of the batch's orders, from orders_cancel_requested.sql:
 * a request counts for the buyer who made it (an id Redis issued again after
 * losing writes may name another buyer's order). */
static void load_cancels(struct batch *b, const PGresult *r)
{
    for (int row = 0; row < PQntuples(r); row++) {
        int64_t id = atoll(PQgetvalue(r, row, 0)), user = atoll(PQgetvalue(r, row, 1));
        for (size_t i = 0; i < b->n; i++)
            if (b->e[i].order_id == id && b->e[i].user_id == user)
                b->cancel_ms[i] = atoll(PQgetvalue(r, row, 2));
    }
}

/* Units each user of the batch holds: confirmed rows, then this batch's
 * confirmations as they are decided.  A small open-addressing table. */
struct user_units {
    size_t cap;
    int64_t *user, *units;
};

static void units_init(struct user_units *u, size_t n)
{
    u->cap = 16;
    while (u->cap < 2 * n)
        u->cap *= 2;
    u->user = calloc(u->cap, sizeof *u->user);
    u->units = calloc(u->cap, sizeof *u->units);
    if (!u->user || !u->units)
        abort();
}

static void units_free(struct user_units *u)
{
    free(u->user);
    free(u->units);
}

static int64_t *units_of(struct user_units *u, int64_t user)
{
    size_t i = (size_t)((uint64_t)user * UINT64_C(0x9E3779B97F4A7C15) >> 32) & (u->cap - 1);
    while (u->user[i] && u->user[i] != user)
        i = (i + 1) & (u->cap - 1);
    u->user[i] = user;
    return &u->units[i];
}

/* Reads, in one round trip, the fenced row lock (when 'fence' is not NULL: it
 * goes first, so the reads come after it) and what the batch's decisions
 * depend on: the rows its ids already have, the SKU's rules, the units each
 * of its buyers holds in active orders (into u), and its buyers' cancel
 * requests.  Returns 1 with *stock
 * set (the fence's, when asked) once the reads are in; 0 or TXLOCK_STALE when
 * the fence was refused for good (see txlock_fence); -1 when the transaction
 * failed. */
static int load_state(struct dbtx *tx, struct batch *b, const char *sid, struct user_units *u,
                      struct txlock *fence, int64_t *stock)
{
    struct sbuf ids = {0}, users = {0};
    const char *sep = "{";
    for (size_t i = 0; i < b->n; i++) {
        sb_str(&ids, sep), sb_i64(&ids, b->e[i].order_id);
        sb_str(&users, sep), sb_i64(&users, b->e[i].user_id);
        sep = ",";
    }
    sb_str(&ids, "}");
    sb_str(&users, "}");
    const char *existing_p[] = {ids.p}, *rules_p[] = {sid}, *units_p[] = {sid, users.p};
    struct txlock_fence_args fa;
    struct pgwait_stmt q[5];
    size_t nq = 0;
    if (fence)
        txlock_fence_stmt(fence, &fa, &q[nq++]);
    size_t first = nq;
    q[nq++] = writer_stmt(b->w, WS_EXISTING, existing_p);
    q[nq++] = writer_stmt(b->w, WS_RULES, rules_p);
    q[nq++] = writer_stmt(b->w, WS_USER_UNITS, units_p);
    q[nq++] = writer_stmt(b->w, WS_CANCELS, existing_p);
    PGresult *r[5];
    int rc = dbtx_exec_pipeline(tx, nq, q, r);
    free(ids.p);
    free(users.p);
    if (rc != 0)
        return -1;
    rc = 1;
    if (fence) {
        int taken = PQntuples(r[0]) == 1;
        rc = txlock_fence_result(fence, tx, r[0], stock);
        if (!taken || rc != 1) {
            /* Refused, then the renewals ran: these reads ran without the
             * row lock; once a renewal won it, they run again. */
            for (size_t i = 0; i < nq; i++)
                PQclear(r[i]);
            return rc == 1 ? load_state(tx, b, sid, u, NULL, stock) : rc;
        }
    }
    load_existing(b, r[first]);
    if (load_rules(b, r[first + 1]) != 0)
        rc = -1;
    for (int row = 0; row < PQntuples(r[first + 2]); row++)
        *units_of(u, atoll(PQgetvalue(r[first + 2], row, 0))) =
            atoll(PQgetvalue(r[first + 2], row, 1));
    load_cancels(b, r[first + 3]);
    for (size_t i = 0; i < nq; i++)
        PQclear(r[i]);
    return rc;
}

/* Decides the new orders first come first served in stream order: the
 * database's stock and per-user limit are the last word (I1, I3), whatever
 * Redis believed when it reserved them. */
static void decide_new(struct batch *b, struct user_units *u, int64_t stock, int64_t *take,
                       size_t *fresh)
{
    *take = 0;
    *fresh = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->dec[i] != DEC_NONE)
            continue;
        (*fresh)++;
        int64_t *held = units_of(u, b->e[i].user_id);
        if (b->cancel_ms[i]) { /* its buyer cancelled it first: it takes nothing */
            b->dec[i] = DEC_REJECTED;
            b->reason[i] = ORDER_REASON_CANCELLED;
        } else if (b->e[i].qty > stock - *take) {
            b->dec[i] = DEC_REJECTED;
            b->reason[i] = ORDER_REASON_NO_STOCK;
        } else if (*held + b->e[i].qty > b->limit) {
            b->dec[i] = DEC_REJECTED;
            b->reason[i] = ORDER_REASON_LIMIT;
        } else {
            b->dec[i] = DEC_CONFIRMED;
            *take += b->e[i].qty;
            *held += b->e[i].qty;
            /* reserved before the SKU's last rebuild: that rebuild did not count it */
            if (order_id_epoch(b->e[i].order_id) < b->load_epoch)
                b->reapply[i] = (int32_t)b->load_epoch;
        }
    }
}

/* Decides, writes and checks the new orders of the batch inside tx, in one
 * round trip: the guarded stock update, the rows, the ledger.  'stock' is the
 * SKU's stock under the fenced row lock. */
static int write_new_orders(struct dbtx *tx, struct batch *b, const char *sid, int64_t stock,
                            struct user_units *u)
{
    enum decision *was = calloc(b->n, sizeof *was);
    if (!was)
        abort();
    memcpy(was, b->dec, b->n * sizeof *was);
    int rc = -1;
    struct sbuf ids = {0}, users = {0}, qtys = {0}, status = {0}, reasons = {0}, idems = {0},
                ms = {0}, reapply = {0}, cancelled = {0}, kinds = {0}, deltas = {0}, afters = {0},
                lids = {0};
    int64_t take;
    size_t fresh;
    decide_new(b, u, stock, &take, &fresh);
    if (fresh == 0) { /* a replay: everything was decided already */
        rc = 0;
        goto out;
    }
    const char *sep = "{";
    int64_t ledger_after = stock; /* walk forward from the stock before the batch */
    for (size_t i = 0; i < b->n; i++) {
        if (was[i] != DEC_NONE)
            continue;
        const struct writer_entry *e = &b->e[i];
        int ok = b->dec[i] == DEC_CONFIRMED, cancel = is_cancelled(b, i);
        sb_str(&ids, sep), sb_i64(&ids, e->order_id);
        sb_str(&users, sep), sb_i64(&users, e->user_id);
        sb_str(&qtys, sep), sb_i64(&qtys, e->qty);
        sb_str(&status, sep);
        sb_str(&status, ok ? "confirmed" : cancel ? "cancelled" : "rejected");
        sb_str(&reasons, sep), sb_array_text(&reasons, ok ? NULL : b->reason[i]);
        sb_str(&idems, sep), sb_array_text(&idems, e->idem[0] ? e->idem : NULL);
        sb_str(&ms, sep), sb_i64(&ms, e->reserved_ms);
        sb_str(&reapply, sep);
        if (b->reapply[i])
            sb_i64(&reapply, b->reapply[i]);
        else
            sb_str(&reapply, "NULL");
        sb_str(&cancelled, sep);
        if (cancel)
            sb_i64(&cancelled, b->cancel_ms[i]);
        else
            sb_str(&cancelled, "NULL");
        if (ok)
            ledger_after -= e->qty;
        sb_str(&kinds, sep), sb_str(&kinds, ok ? "order" : cancel ? "cancel" : "rejection");
        sb_str(&deltas, sep), sb_i64(&deltas, ok ? -e->qty : 0);
        sb_str(&afters, sep), sb_i64(&afters, ledger_after);
        sb_str(&lids, sep), sb_i64(&lids, e->order_id);
        sep = ",";
    }
    struct sbuf *all[] = {&ids,     &users,     &qtys,  &status, &reasons, &idems, &ms,
                          &reapply, &cancelled, &kinds, &deltas, &afters,  &lids};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sb_str(all[i], "}");
    char n[24], window[24];
    snprintf(n, sizeof n, "%" PRId64, take);
    snprintf(window, sizeof window, "%" PRId64, b->window_s);
    /* (the parameter arrays live as long as the statements that point at them) */
    const char *take_p[] = {sid, n};
    const char *ins_p[] = {sid,     ids.p, users.p,   qtys.p, status.p,   reasons.p,
                           idems.p, ms.p,  reapply.p, window, cancelled.p};
    const char *led_p[] = {sid, kinds.p, deltas.p, afters.p, lids.p};
    struct pgwait_stmt q[3];
    size_t nq = 0;
    if (take > 0)
        q[nq++] = writer_stmt(b->w, WS_TAKE_STOCK, take_p);
    q[nq++] = writer_stmt(b->w, WS_INSERT, ins_p);
    q[nq++] = writer_stmt(b->w, WS_LEDGER, led_p);
    PGresult *r[3];
    if (dbtx_exec_pipeline(tx, nq, q, r) != 0)
        goto out;
    const PGresult *took = take > 0 ? r[0] : NULL, *ins = r[nq - 2];
    /* The guard is the last word: no row means the stock is not there (and
     * under the row lock it is exactly what the fence read, less the take). */
    if (took && (PQntuples(took) != 1 || atoll(PQgetvalue(took, 0, 0)) != stock - take))
        log_error("sku %s: guarded stock update refused %s units", sid, n);
    /* Under the lock nobody else writes these ids: every new row must land. */
    else if ((size_t)PQntuples(ins) != fresh)
        log_error("sku %s: inserted %d of %zu orders", sid, PQntuples(ins), fresh);
    else
        rc = 0;
    for (size_t i = 0; i < nq; i++)
        PQclear(r[i]);
out:
    free(ids.p), free(users.p), free(qtys.p), free(status.p), free(reasons.p), free(idems.p);
    free(ms.p), free(reapply.p), free(cancelled.p), free(kinds.p), free(deltas.p), free(afters.p);
    free(lids.p);
    free(was);
    return rc;
}

/* A batch's entries as read: those handed in, then those of the top-up. */
struct batch_input {
    struct writer_entry *e;
    size_t n, cap;
    const char **dup; /* per entry: ORDER_REASON_ID_CONFLICT for a repeated id, else NULL */
    int top_up;       /* still to do: read what queued while the lock was awaited */
};

static void input_reserve(struct batch_input *in, size_t n)
{
    if (n <= in->cap)
        return;
    struct writer_entry *e = realloc(in->e, n * sizeof *e);
    const char **dup = realloc(in->dup, n * sizeof *dup);
    if (!e || !dup)
        abort();
    in->e = e;
    in->dup = dup;
    in->cap = n;
}

/* One id twice in the stream: Redis went back in time and reissued it.  The
 * first entry is the order; a later one is a dead letter.  Marks entries
 * from..n against all before them. */
static void mark_dups(int64_t sku, struct batch_input *in, size_t from)
{
    for (size_t i = from; i < in->n; i++) {
        in->dup[i] = NULL;
        for (size_t j = 0; j < i && !in->dup[i]; j++)
            if (in->e[i].order_id == in->e[j].order_id && !in->dup[j]) {
                log_error("sku %" PRId64 ": order id %" PRId64
                          " appears twice in the stream: Redis lost writes",
                          sku, in->e[i].order_id);
                metrics_add(M_WRITER_ID_CONFLICTS, 1);
                in->dup[i] = ORDER_REASON_ID_CONFLICT;
            }
    }
}

static size_t parse_entries(const redisReply *list, struct writer_entry *e, const char **bad,
                            const char **why, size_t *nbad);

/* Adds the SKU's entries that reached the stream after the batch was read
 * (one XREADGROUP without BLOCK, up to writer_batch in all), once the SKU's
 * lock is ours: a writer that waited for the lock writes what queued
 * meanwhile in the same transaction instead of a batch of one.  Malformed
 * entries go to the dead letters.  A failure leaves the batch as it was. */
static void top_up(struct writer *w, int64_t sku, struct batch_input *in)
{
    int64_t room = w->ctx.cfg->writer_batch - (int64_t)in->n;
    if (room <= 0)
        return;
    char stream[KEYS_MAX], count[24];
    keys_sku(stream, sku, KEY_STREAM);
    snprintf(count, sizeof count, "%" PRId64, room);
    const char *argv[] = {"XREADGROUP", "GROUP", KEYS_WRITER_GROUP,
                          w->consumer,  "COUNT", count,
                          "STREAMS",    stream,  ">"};
    redisReply *r = redis_conn_cmd(&w->ctx.redis, 9, argv, NULL);
    if (!r)
        return;
    const redisReply *list = NULL;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2)
        list = r->element[0]->element[1];
    if (list && list->type == REDIS_REPLY_ARRAY && list->elements > 0) {
        size_t from = in->n, nbad = 0;
        const char **bad = calloc(list->elements, sizeof *bad);
        const char **why = calloc(list->elements, sizeof *why);
        if (!bad || !why)
            abort();
        input_reserve(in, in->n + list->elements);
        in->n += parse_entries(list, in->e + in->n, bad, why, &nbad);
        mark_dups(sku, in, from);
        /* still pending if this fails: a reclaim replays them */
        (void)dead_letter(w, sku, bad, why, 0, nbad);
        free(bad);
        free(why);
    }
    freeReplyObject(r);
}

/* One attempt of writer_process_batch; *stale is set when the fencing token
 * was refused because another holder wrote the SKU first. */
static int process_once(struct writer *w, int64_t sku, struct batch_input *in, int *stale,
                        int *conflicts)
{
    *stale = 0;
    const struct cfg *c = w->ctx.cfg;
    /* One fenced lock per SKU batch: the SKU's writers take turns (the row
     * lock below would serialise them anyway), and a batch of any size is
     * one SET and one DEL in Redis, not one lock key per order. */
    char lock_key[KEYS_MAX];
    keys_sku(lock_key, sku, KEY_WRITER_LOCK);
    struct txlock t;
    int64_t asked_ms = clock_mono_ms();
    enum rlock_status st =
        txlock_acquire(&t, &w->ctx.redis, c, sku, (const char *const[]){lock_key}, 1);
    if (st != RLOCK_OK) {
        /* Busy beyond lock_wait_ms: another writer is stuck on this SKU; the
         * entries stay pending and are reclaimed if it never finishes. */
        log_debug("sku %" PRId64 ": batch lock: %s", sku, rlock_status_str(st));
        return -1;
    }
    /* Only a lock that had to be waited for (its winning request went out
     * later than the first) leaves orders queued behind the batch read. */
    if (in->top_up && t.lock.acquired_mono_ms > asked_ms) {
        in->top_up = 0;
        top_up(w, sku, in);
    }
    size_t n = in->n;
    struct batch b = {.w = w, .sku = sku, .e = in->e, .n = n};
    b.dec = calloc(n, sizeof *b.dec);
    b.reason = calloc(n, sizeof *b.reason);
    b.reapply = calloc(n, sizeof *b.reapply);
    b.cancel_ms = calloc(n, sizeof *b.cancel_ms);
    if (!b.dec || !b.reason || !b.reapply || !b.cancel_ms)
        abort();
    for (size_t i = 0; i < n; i++)
        if (in->dup[i]) { /* a second entry with an id seen earlier in the batch */
            b.dec[i] = DEC_DEAD;
            b.reason[i] = in->dup[i];
            b.conflicts++;
        }
    int rc = -1;
    struct user_units u;
    units_init(&u, n);
    PGconn *conn = db_conn_get(&w->ctx.db);
    if (conn && w->prepared_session != w->ctx.db.session)
        prepare_stmts(w, conn);
    struct dbtx *tx = conn && PQstatus(conn) == CONNECTION_OK
                          ? dbtx_begin(conn, c->pg_dsn, DBTX_ISO_READ_COMMITTED, NULL, 0)
                          : NULL;
    /* Hooks run in reverse: finish the batch first, release the lock last. */
    if (!tx || txlock_bind(&t, tx) != 0) {
        if (tx)
            (void)dbtx_rollback(tx);
        txlock_release(&t);
        goto out;
    }
    if (dbtx_on_complete(tx, on_batch_complete, &b) != 0) {
        (void)dbtx_rollback(tx);
        goto out;
    }
    char sid[24];
    snprintf(sid, sizeof sid, "%" PRId64, sku);
    /* The fenced row lock comes first, in the round trip of the reads: a
     * writer whose lease ran out while it was paused is refused there by
     * PostgreSQL, before it writes anything. */
    int64_t stock = 0;
    int fenced = load_state(tx, &b, sid, &u, &t, &stock);
    *stale = fenced == TXLOCK_STALE;
    if (fenced != 1 || write_new_orders(tx, &b, sid, stock, &u) != 0) {
        log_warn("sku %" PRId64 ": batch of %zu rolled back: %s", sku, n, dbtx_error(tx));
        if (strcmp(dbtx_sqlstate(tx), "26000") == 0) /* a prepared statement is gone */
            w->prepared_session = 0;
        (void)dbtx_rollback(tx);
        goto out;
    }
    if (!txlock_still_valid(&t, c->lock_commit_margin_ms)) {
        /* Our lease may be over: another writer may hold these orders now. */
        log_warn("sku %" PRId64 ": lock lease too short to commit; rolling back", sku);
        (void)dbtx_rollback(tx);
        goto out;
    }
    if (dbtx_commit(tx, NULL, 0, NULL) == DBTX_COMMITTED && b.finished)
        rc = 0;
    if (rc == 0) {
        long confirmed = 0, rejected = 0, cancelled = 0;
        for (size_t i = 0; i < n; i++) {
            confirmed += b.dec[i] == DEC_CONFIRMED;
            cancelled += is_cancelled(&b, i);
            rejected += b.dec[i] == DEC_REJECTED && !is_cancelled(&b, i);
        }
        metrics_add(M_WRITER_BATCHES_COMMITTED, 1);
        metrics_add(M_WRITER_ORDERS_CONFIRMED, confirmed);
        metrics_add(M_WRITER_ORDERS_REJECTED, rejected);
        metrics_add(M_ORDERS_TO_CONFIRMED, confirmed);
        metrics_add(M_ORDERS_TO_REJECTED, rejected);
        metrics_add(M_ORDERS_CANCELLED_PENDING, cancelled);
        *conflicts = b.conflicts;
        /* The database refused what Redis sold: Redis is ahead of it (an
         * adjustment left by a dead process, lost writes). */
        if (rejected)
            reconcile_refused(sku);
    }
out:
    units_free(&u);
    free(b.cancel_ms);
    free(b.reapply);
    free(b.reason);
    free(b.dec);
    return rc;
}

/* writer_process_batch, optionally topping the batch up under the lock. */
static int process_batch(struct writer *w, int64_t sku, const struct writer_entry *e, size_t n,
                         int top)
{
    if (n == 0)
        return 0;
    int64_t started_us = clock_mono_us();
    struct batch_input in = {.top_up = top};
    input_reserve(&in, n);
    memcpy(in.e, e, n * sizeof *e);
    in.n = n;
    mark_dups(sku, &in, 0);
    int rc = -1, stale = 1, conflicts = 0;
    for (int i = 0; i < TXLOCK_FENCE_ATTEMPTS && rc != 0 && stale; i++)
        rc = process_once(w, sku, &in, &stale, &conflicts);
    metrics_writer_batch(started_us, in.n); /* with its top-up */
    free(in.e);
    free(in.dup);
    if (rc != 0) {
        metrics_add(M_WRITER_BATCHES_FAILED, 1);
        return rc;
    }
    /* Redis issued an id again: its state is behind the database.  Rebuild it
     * from the database (a fresh epoch, so no id repeats) now, not when an
     * operator notices. */
    if (conflicts > 0 && sku_rebuild(&w->ctx, sku, "order id issued twice") != SKU_OK)
        log_warn("sku %" PRId64 ": rebuild after an id conflict failed; reconciliation retries",
                 sku);
    return 0;
}

int writer_process_batch(struct writer *w, int64_t sku, const struct writer_entry *e, size_t n)
{
    return process_batch(w, sku, e, n, 0);
}

/* ---- reading the streams ------------------------------------------------ */

/* A strictly decimal value in 1..max, or 0. */
static int64_t field_i64(const char *v, int64_t max)
{
    if (!v || *v < '1' || *v > '9')
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    return errno == 0 && *end == '\0' && x <= max ? (int64_t)x : 0;
}

static int parse_entry(const redisReply *r, struct writer_entry *e)
{
    memset(e, 0, sizeof *e);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY)
        return -1;
    snprintf(e->stream_id, sizeof e->stream_id, "%s", r->element[0]->str);
    e->reserved_ms = atoll(e->stream_id);
    const redisReply *f = r->element[1];
    int have = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const char *k = f->element[i]->str, *v = f->element[i + 1]->str;
        if (!k || !v)
            return -1;
        if (strcmp(k, order_fields[ORDER_FIELD_ID]) == 0)
            e->order_id = field_i64(v, ORDER_ID_MAX), have |= 1;
        else if (strcmp(k, order_fields[ORDER_FIELD_USER]) == 0)
            e->user_id = field_i64(v, INT64_MAX), have |= 2;
        else if (strcmp(k, order_fields[ORDER_FIELD_QTY]) == 0)
            e->qty = field_i64(v, INT32_MAX), have |= 4;
        else if (strcmp(k, order_fields[ORDER_FIELD_IDEM]) == 0)
            snprintf(e->idem, sizeof e->idem, "%s", v);
    }
    return have == 7 && e->order_id > 0 && e->user_id > 0 && e->qty > 0 ? 0 : -1;
}

/* Parses the entries of one stream reply (array of [id, fields]) into e;
 * entries reserve.lua did not write go to bad/why[0..*nbad) (their ids
 * point into list).  Returns the number parsed into e. */
static size_t parse_entries(const redisReply *list, struct writer_entry *e, const char **bad,
                            const char **why, size_t *nbad)
{
    size_t n = 0;
    for (size_t i = 0; i < list->elements; i++) {
        const redisReply *en = list->element[i];
        if (parse_entry(en, &e[n]) == 0) {
            n++;
        } else if (en->type == REDIS_REPLY_ARRAY && en->elements >= 1 &&
                   en->element[0]->type == REDIS_REPLY_STRING) {
            bad[*nbad] = en->element[0]->str;
            why[(*nbad)++] = "malformed";
        }
    }
    return n;
}

/* Writes the entries of one stream reply.  Entries reserve.lua did not write
 * go to the dead letters, never guessed at.  With top, the batch takes what
 * queued while its lock was awaited (see top_up).  Returns the number read
 * and decided, or -1. */
static int process_entries(struct writer *w, int64_t sku, const redisReply *list, int top)
{
    if (list->type != REDIS_REPLY_ARRAY || list->elements == 0)
        return 0;
    struct writer_entry *e = calloc(list->elements, sizeof *e);
    const char **bad = calloc(list->elements, sizeof *bad);
    const char **why = calloc(list->elements, sizeof *why);
    if (!e || !bad || !why)
        abort();
    size_t nbad = 0, n = parse_entries(list, e, bad, why, &nbad);
    int rc = dead_letter(w, sku, bad, why, 0, nbad) == 0 && process_batch(w, sku, e, n, top) == 0
                 ? (int)(n + nbad)
                 : -1;
    free(e);
    free(bad);
    free(why);
    return rc;
}

static int64_t stream_sku(const char *name)
{
    const char *p = strstr(name, "{sku:");
    return p ? atoll(p + 5) : 0;
}

static int refresh_skus(struct writer *w)
{
    PGresult *r = db_query(&w->ctx.db, "sku_ids_active", 0, NULL);
    if (!r)
        return -1;
    free(w->skus);
    size_t rows = (size_t)PQntuples(r);
    w->skus = calloc(rows ? rows : 1, sizeof *w->skus);
    if (!w->skus)
        abort();
    w->nskus = 0;
    for (size_t i = 0; i < rows; i++) {
        int64_t sku = atoll(PQgetvalue(r, (int)i, 0));
        if (w->nparts <= 1 || (uint64_t)sku % w->nparts == w->part)
            w->skus[w->nskus++] = sku;
    }
    PQclear(r);
    return 0;
}

/* A stream of a SKU that was never loaded (or lost) has no group: create it. */
static void ensure_groups(struct writer *w)
{
    for (size_t i = 0; i < w->nskus; i++) {
        char stream[KEYS_MAX];
        keys_sku(stream, w->skus[i], KEY_STREAM);
        const char *argv[] = {"XGROUP", "CREATE", stream, KEYS_WRITER_GROUP, "0", "MKSTREAM"};
        redisReply *r = redis_conn_cmd(&w->ctx.redis, 6, argv, NULL);
        if (r)
            freeReplyObject(r);
    }
}

static int reclaim(struct writer *w)
{
    int total = 0;
    char idle[24];
    snprintf(idle, sizeof idle, "%" PRId64, w->ctx.cfg->writer_claim_idle_ms);
    char count[24];
    snprintf(count, sizeof count, "%" PRId64, w->ctx.cfg->writer_batch);
    for (size_t i = 0; i < w->nskus; i++) {
        char stream[KEYS_MAX];
        keys_sku(stream, w->skus[i], KEY_STREAM);
        const char *argv[] = {"XAUTOCLAIM", stream, KEYS_WRITER_GROUP, w->consumer,
                              idle,         "0-0",  "COUNT",           count};
        redisReply *r = redis_conn_cmd(&w->ctx.redis, 8, argv, NULL);
        if (!r)
            return -1;
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
            int n = process_entries(w, w->skus[i], r->element[1], 0);
            if (n > 0) {
                log_info("sku %" PRId64 ": replayed %d reclaimed orders", w->skus[i], n);
                metrics_add(M_WRITER_ORDERS_RECLAIMED, n);
            }
            total += n > 0 ? n : 0;
        }
        freeReplyObject(r);
    }
    return total;
}

/* The entries of one XREADGROUP reply ([[stream, entries]...]), written. */
static int process_read(struct writer *w, const redisReply *r)
{
    int total = 0, failed = 0;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *s = r->element[i];
            if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 ||
                s->element[0]->type != REDIS_REPLY_STRING)
                continue;
            int n = process_entries(w, stream_sku(s->element[0]->str), s->element[1], 1);
            if (n < 0)
                failed = 1;
            else
                total += n;
        }
    return failed ? -1 : total;
}

/*
 * On a Redis Cluster each SKU's stream has a slot of its own, and one
 * XREADGROUP may not name streams of several slots (CROSSSLOT): one read
 * per stream, without BLOCK, all in one pipeline (each on its master).
 * While nothing comes the pause between polls doubles from 1 ms up to
 * writer_block_ms; the first entry brings it back to 1 ms.
 */
static int read_per_slot(struct writer *w)
{
    const struct cfg *c = w->ctx.cfg;
    size_t n = w->nskus;
    char count[24];
    snprintf(count, sizeof count, "%" PRId64, c->writer_batch);
    char(*names)[KEYS_MAX] = calloc(n, sizeof *names);
    const char *(*argv)[9] = calloc(n, sizeof *argv);
    const char *const **argvs = calloc(n, sizeof *argvs);
    int *argcs = calloc(n, sizeof *argcs);
    redisReply **out = calloc(n, sizeof *out);
    if (!names || !argv || !argvs || !argcs || !out)
        abort();
    for (size_t i = 0; i < n; i++) {
        keys_sku(names[i], w->skus[i], KEY_STREAM);
        const char *a[9] = {"XREADGROUP", "GROUP",   KEYS_WRITER_GROUP, w->consumer, "COUNT",
                            count,        "STREAMS", names[i],          ">"};
        memcpy(argv[i], a, sizeof a);
        argvs[i] = argv[i];
        argcs[i] = 9;
    }
    int total = -1;
    if (redis_conn_pipeline(&w->ctx.redis, n, argcs, argvs, out) == 0) {
        total = 0;
        int nogroup = 0;
        for (size_t i = 0; i < n; i++) {
            const redisReply *r = out[i];
            if (r->type == REDIS_REPLY_ERROR) {
                if (strncmp(r->str, "NOGROUP", 7) == 0)
                    nogroup = 1;
                else
                    log_warn("XREADGROUP %s: %s", names[i], r->str);
                continue;
            }
            int got = process_read(w, r);
            if (got < 0)
                total = -1;
            else if (total >= 0)
                total += got;
        }
        if (nogroup)
            ensure_groups(w);
        for (size_t i = 0; i < n; i++)
            freeReplyObject(out[i]);
    }
    free(out);
    free(argcs);
    free(argvs);
    free(argv);
    free(names);
    if (total == 0) {
        w->idle_ms = w->idle_ms <= 0 ? 1 : w->idle_ms * 2;
        if (w->idle_ms > c->writer_block_ms)
            w->idle_ms = (int)c->writer_block_ms;
        usleep((useconds_t)w->idle_ms * 1000);
    } else if (total > 0) {
        w->idle_ms = 0;
    }
    return total;
}

int writer_poll(struct writer *w)
{
    const struct cfg *c = w->ctx.cfg;
    int64_t now = clock_mono_ms();
    if (now >= w->next_refresh_ms) {
        if (refresh_skus(w) != 0)
            return -1;
        w->next_refresh_ms = now + c->writer_refresh_ms;
    }
    if (w->nskus == 0) {
        usleep((useconds_t)c->writer_block_ms * 1000);
        return 0;
    }
    int total = 0;
    if (now >= w->next_claim_ms) {
        int n = reclaim(w);
        if (n < 0)
            return -1;
        total += n;
        w->next_claim_ms = now + c->writer_claim_idle_ms / 2;
    }
    if (w->ctx.redis.target.nseeds > 0) {
        int n = read_per_slot(w);
        return n < 0 ? -1 : total + n;
    }
    size_t argc = 0, max = 9 + 2 * w->nskus; /* head below + 2 per stream */
    const char **argv = calloc(max, sizeof *argv);
    char(*names)[KEYS_MAX] = calloc(w->nskus, sizeof *names);
    if (!argv || !names)
        abort();
    char count[24], block[24];
    snprintf(count, sizeof count, "%" PRId64, c->writer_batch);
    snprintf(block, sizeof block, "%" PRId64, c->writer_block_ms);
    const char *head[] = {"XREADGROUP", "GROUP", KEYS_WRITER_GROUP, w->consumer, "COUNT", count,
                          "BLOCK",      block,   "STREAMS"};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        argv[argc++] = head[i];
    for (size_t i = 0; i < w->nskus; i++) {
        keys_sku(names[i], w->skus[i], KEY_STREAM);
        argv[argc++] = names[i];
    }
    for (size_t i = 0; i < w->nskus; i++)
        argv[argc++] = ">";
    redisReply *r = redis_conn_cmd(&w->ctx.redis, (int)argc, argv, NULL);
    free(argv);
    free(names);
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOGROUP", 7) == 0)
            ensure_groups(w);
        else
            log_warn("XREADGROUP: %s", r->str);
        freeReplyObject(r);
        return -1;
    }
    int n = process_read(w, r);
    freeReplyObject(r);
    return n < 0 ? -1 : total + n;
}

int writer_init(struct writer *w, const struct cfg *c, const char *consumer, char *err,
                size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (worker_ctx_init(&w->ctx, c, err, errlen) != 0)
        return -1;
    /* A blocking XREADGROUP legitimately takes up to writer_block_ms. */
    w->ctx.redis.timeout_ms = (int)(c->redis_timeout_ms + c->writer_block_ms);
    snprintf(w->consumer, sizeof w->consumer, "%s", consumer);
    return 0;
}

void writer_close(struct writer *w)
{
    worker_ctx_close(&w->ctx);
    free(w->skus);
    w->skus = NULL;
}

/* ---- threads ------------------------------------------------------------- */

struct order_writer {
    atomic_int stopping;
    size_t n;
    pthread_t *tids;
    struct writer *writers;
};

struct writer_arg {
    struct order_writer *ow;
    struct writer *w;
};

static void *writer_main(void *arg)
{
    struct writer_arg *a = arg;
    struct order_writer *ow = a->ow;
    struct writer *w = a->w;
    free(a);
    while (!atomic_load(&ow->stopping))
        if (writer_poll(w) < 0)
            usleep((useconds_t)w->ctx.cfg->writer_retry_ms * 1000);
    return NULL;
}

struct order_writer *order_writer_start(const struct cfg *c, char *err, size_t errlen)
{
    struct order_writer *ow = calloc(1, sizeof *ow);
    if (!ow)
        abort();
    ow->n = (size_t)c->writer_threads;
    ow->tids = calloc(ow->n ? ow->n : 1, sizeof *ow->tids);
    ow->writers = calloc(ow->n ? ow->n : 1, sizeof *ow->writers);
    if (!ow->tids || !ow->writers)
        abort();
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    size_t started = 0;
    for (; started < ow->n; started++) {
        size_t i = started;
        char consumer[96];
        snprintf(consumer, sizeof consumer, "%s-%d-%zu", host, (int)getpid(), i);
        if (writer_init(&ow->writers[i], c, consumer, err, errlen) != 0)
            break;
        ow->writers[i].part = i;
        ow->writers[i].nparts = ow->n;
        struct writer_arg *a = malloc(sizeof *a);
        if (!a)
            abort();
        *a = (struct writer_arg){ow, &ow->writers[i]};
        if (pthread_create(&ow->tids[i], NULL, writer_main, a) != 0) {
            snprintf(err, errlen, "cannot start writer thread");
            free(a);
            writer_close(&ow->writers[i]);
            break;
        }
    }
    if (started < ow->n) {
        /* Stop the threads already running before the caller frees what
         * they use (the config, the lock library's threads). */
        ow->n = started;
        order_writer_stop(ow);
        return NULL;
    }
    return ow;
}

void order_writer_stop(struct order_writer *ow)
{
    if (!ow)
        return;
    atomic_store(&ow->stopping, 1);
    for (size_t i = 0; i < ow->n; i++) {
        pthread_join(ow->tids[i], NULL);
        writer_close(&ow->writers[i]);
    }
    free(ow->tids);
    free(ow->writers);
    free(ow);
}
