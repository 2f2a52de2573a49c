#include "lt_check.h"

#include <hiredis.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/embedded.h"
#include "core/keys.h"
#include "lt_life.h"
#include "lt_load.h"
#include "lt_redis.h"
#include "order/order.h"

#define PG_CONNECT_TIMEOUT_S "10"
#define PG_STATEMENT_TIMEOUT "SET statement_timeout = '120s'"
#define REDIS_TIMEOUT_MS 5000
#define DRAIN_POLL_MS 50
#define SETTLE_POLL_MS 100
#define COPY_LINE_MAX 256 /* longest COPY row written by copy_printf */
#define SCAN_COUNT "1000"
#define SCAN_MAX_ROUNDS 10000000 /* HSCAN rounds; bounded in time as well */
#define COPY_CHUNK 65536

static const struct {
    const char *name, *key;
} check_info[LT_CHK_COUNT] = {
    [LT_CHK_DRAINED] = {"order stream drained", "drained"},
    [LT_CHK_LC_SETTLED] = {"lifecycle settled: deadlines passed, returns in Redis", "lc_settled"},
    [LT_CHK_ANSWERS] = {"only expected answers (201/202/409/503/unknown)", "answers"},
    [LT_CHK_SOLD] = {"units sold = answered - given back + unknown-outcome", "sold"},
    [LT_CHK_I1_LEDGER] = {"I1 stock >= 0, = initial + deltas - sold = ledger", "i1_ledger"},
    [LT_CHK_I1_RUN] = {"I1 stock = before + run's deltas - run's sales", "i1_run"},
    [LT_CHK_I1_ADMIN] = {"I1 admin ledger = deltas answered 200", "i1_admin"},
    [LT_CHK_I2_STOCK] = {"I2 Redis stock = skus.stock", "i2_stock"},
    [LT_CHK_I2_HELD] = {"I2 Redis units held = confirmed + paid, per user", "i2_held"},
    [LT_CHK_I2_JOURNAL] = {"I2 no reservation left pending", "i2_journal"},
    [LT_CHK_I3_LIMIT] = {"I3 no user above the per-user limit", "i3_limit"},
    [LT_CHK_I4_ANSWERED] = {"I4 201 confirmed, 409+id rejected, 202 one row", "i4_answered"},
    [LT_CHK_I4_ROWS] = {"I4 no row without an answer or an unknown", "i4_rows"},
    [LT_CHK_I4_IDEM] = {"I4 same Idempotency-Key, same order", "i4_idempotency"},
    [LT_CHK_I4_LEDGER] = {"I4 one ledger write per order, as its state says", "i4_ledger"},
    [LT_CHK_LC_RETURNS] = {"every unit given back once (return, cancel rows)", "lc_returns"},
    [LT_CHK_LC_ANSWERS] = {"pay/cancel answers = the rows' final states", "lc_answers"},
    [LT_CHK_LC_LEFT] = {"orders left alone expired, none paid/cancelled unasked", "lc_left"},
    [LT_CHK_LC_PAY_AGAIN] = {"a pay sent twice with one ref: 200 twice", "lc_pay_again"},
};

const char *lt_check_name(enum lt_check_id id)
{
    return check_info[id].name;
}

const char *lt_check_key(enum lt_check_id id)
{
    return check_info[id].key;
}

/* ---- SQL ------------------------------------------------------------------ */

/* $1 sku */
static const char SQL_SKU[] = "SELECT stock, initial_stock, per_user_limit, payment_window_s, "
                              "buckets FROM skus WHERE id = $1";
static const char SQL_MAX_ORDER[] = "SELECT coalesce(max(id), 0) FROM orders WHERE sku_id = $1";
static const char SQL_MAX_LEDGER[] =
    "SELECT coalesce(max(id), 0) FROM stock_ledger WHERE sku_id = $1";
/* Orders that hold their units: the others (rejected, cancelled, expired)
 * never took any or gave them back. */
#define SOLD "('confirmed', 'paid')"
/* $1 sku, $2 first order id of the run - 1 */
static const char SQL_RUN[] =
    "SELECT count(*), coalesce(sum(qty) FILTER (WHERE status IN " SOLD "), 0),"
    " count(*) FILTER (WHERE status = 'rejected'),"
    " coalesce(sum(qty) FILTER (WHERE status = 'rejected'), 0),"
    " coalesce(floor(extract(epoch FROM min(created_at)) * 1e6), 0)::bigint,"
    " coalesce(floor(extract(epoch FROM max(created_at)) * 1e6), 0)::bigint"
    " FROM orders WHERE sku_id = $1 AND id > $2";
/* $1 sku, $2 last ledger id before the run */
static const char SQL_ADMIN[] = "SELECT coalesce(sum(delta), 0), count(*) FROM stock_ledger"
                                " WHERE sku_id = $1 AND kind = 'admin' AND id > $2";
/* $1 sku, $2 last ledger id before the run, $3 last order id before it: units
 * that orders older than the run gave back during it (cancelled, expired) */
static const char SQL_EARLY_RETURNS[] =
    "SELECT coalesce(sum(delta), 0) FROM stock_ledger"
    " WHERE sku_id = $1 AND kind = 'return' AND id > $2 AND order_id <= $3";
/* $1 sku */
static const char SQL_LIMIT[] =
    "SELECT o.user_id, sum(o.qty) AS units, s.per_user_limit FROM orders o"
    " JOIN skus s ON s.id = o.sku_id WHERE o.sku_id = $1 AND o.status IN " SOLD
    " GROUP BY o.user_id, s.per_user_limit HAVING sum(o.qty) > s.per_user_limit"
    " ORDER BY o.user_id LIMIT 1000";
static const char SQL_HELD_TEMP[] =
    "CREATE TEMP TABLE lt_held (user_id bigint PRIMARY KEY, units bigint NOT NULL)";
static const char SQL_HELD[] =
    "SELECT coalesce(d.user_id, h.user_id) AS user_id, coalesce(d.units, 0) AS db_units,"
    " coalesce(h.units, 0) AS redis_units FROM"
    " (SELECT user_id, sum(qty) AS units FROM orders WHERE sku_id = $1 AND status IN " SOLD
    "  GROUP BY user_id) d FULL JOIN lt_held h ON h.user_id = d.user_id"
    " WHERE coalesce(d.units, 0) <> coalesce(h.units, 0) ORDER BY 1 LIMIT 1000";
/* promise: 'c' 201 confirmed, 'p' 202 pending, 'r' 409 rejected (lt_answers.h) */
static const char SQL_ANSWERS_TEMP[] =
    "CREATE TEMP TABLE lt_answers (id bigint NOT NULL, user_id bigint NOT NULL,"
    " qty bigint NOT NULL, promise \"char\" NOT NULL)";
/* $1 sku, $2 whether a 202 without a row is allowed (Redis lost it) */
static const char SQL_ANSWERED[] =
    "SELECT a.id, a.promise, a.user_id, a.qty, o.sku_id AS row_sku, o.user_id AS row_user,"
    " o.qty AS row_qty, o.status AS row_status,"
    " (SELECT count(*) FROM lt_answers b WHERE b.id = a.id) AS answers_with_id"
    " FROM lt_answers a LEFT JOIN orders o ON o.id = a.id"
    " WHERE (o.id IS NULL AND NOT (a.promise = 'p' AND $2::boolean))"
    "    OR o.sku_id <> $1 OR o.user_id <> a.user_id OR o.qty <> a.qty"
    "    OR (a.promise = 'c' AND (o.status NOT IN ('confirmed', 'paid', 'cancelled', 'expired')"
    "                             OR o.reason IS NOT NULL))"
    "    OR (a.promise = 'r' AND o.status <> 'rejected')"
    "    OR (SELECT count(*) FROM lt_answers b WHERE b.id = a.id) <> 1"
    " ORDER BY a.id LIMIT 1000";
static const char SQL_ANSWERED_SUMS[] =
    "SELECT count(*), coalesce(sum(a.qty), 0),"
    " coalesce(sum(o.qty) FILTER (WHERE o.status = 'rejected'), 0),"
    " coalesce(sum(o.qty) FILTER (WHERE o.status IN ('cancelled', 'expired')), 0),"
    " count(*) FILTER (WHERE a.promise = 'c'), count(*) FILTER (WHERE a.promise = 'r'),"
    " count(*) FILTER (WHERE a.promise = 'p'),"
    " count(*) FILTER (WHERE a.promise = 'p' AND o.id IS NULL),"
    " coalesce(sum(a.qty) FILTER (WHERE a.promise = 'p' AND o.id IS NULL), 0)"
    " FROM lt_answers a LEFT JOIN orders o ON o.id = a.id";
/* $1 sku, $2 first order id - 1 */
static const char SQL_UNANSWERED[] =
    "SELECT o.id, o.user_id, o.qty, o.status, o.reason FROM orders o"
    " WHERE o.sku_id = $1 AND o.id > $2"
    "   AND NOT EXISTS (SELECT 1 FROM lt_answers a WHERE a.id = o.id) ORDER BY o.id LIMIT 1000";
static const char SQL_UNANSWERED_SUMS[] =
    "SELECT count(*), coalesce(sum(o.qty) FILTER (WHERE o.status IN " SOLD "), 0)"
    " FROM orders o WHERE o.sku_id = $1 AND o.id > $2"
    "   AND NOT EXISTS (SELECT 1 FROM lt_answers a WHERE a.id = o.id)";
/* $1 sku, $2 first order id - 1: the one ledger row the writer wrote per
 * order, of the kind and delta its state says: 'rejection' (0) for a rejected
 * order, 'cancel' (0) for one cancelled before it was written, else 'order'
 * (-qty; a cancelled or expired order's 'return' is LT_CHK_LC_RETURNS's). */
#define WRITE_KINDS "('order', 'rejection', 'cancel')"
static const char SQL_LEDGER_ROWS[] =
    "SELECT o.id, o.status, o.reason, o.qty,"
    " count(l.id) FILTER (WHERE l.kind IN " WRITE_KINDS ") AS ledger_rows,"
    " coalesce(sum(l.delta) FILTER (WHERE l.kind IN " WRITE_KINDS "), 0) AS delta"
    " FROM orders o LEFT JOIN stock_ledger l ON l.order_id = o.id"
    " WHERE o.sku_id = $1 AND o.id > $2 GROUP BY o.id, o.status, o.reason, o.qty"
    " HAVING count(l.id) FILTER (WHERE l.kind IN " WRITE_KINDS ") <> 1"
    "    OR count(l.id) FILTER (WHERE l.kind = CASE WHEN o.status = 'rejected' THEN 'rejection'"
    "                                               WHEN o.reason = 'cancelled' THEN 'cancel'"
    "                                               ELSE 'order' END) <> 1"
    "    OR coalesce(sum(l.delta) FILTER (WHERE l.kind IN " WRITE_KINDS "), 0)"
    "       <> CASE WHEN o.status = 'rejected' OR o.reason = 'cancelled' THEN 0 ELSE -o.qty END"
    " ORDER BY o.id LIMIT 1000";

/* ---- SQL of the lifecycle -------------------------------------------------------- */

/* $1 sku, $2 whether every deadline must have passed (else only those due
 * now): what the sweep and the returns still have to do */
#define SETTLE_WHERE                                                                               \
    " sku_id = $1 AND ((status = 'confirmed' AND expires_at IS NOT NULL"                           \
    "                   AND ($2::boolean OR expires_at <= now()))"                                 \
    "                  OR return_settled = false)"
static const char SQL_SETTLE[] = "SELECT count(*) FROM orders WHERE" SETTLE_WHERE;
static const char SQL_UNSETTLED[] =
    "SELECT id, user_id, status, expires_at, expires_at <= now() AS overdue, return_settled"
    " FROM orders WHERE" SETTLE_WHERE " ORDER BY id LIMIT 1000";
/* $1 sku, $2 first order id - 1 */
static const char SQL_LIFE_FACTS[] =
    "SELECT count(*) FILTER (WHERE status = 'paid'), count(*) FILTER (WHERE status = 'expired'),"
    " count(*) FILTER (WHERE status = 'cancelled' AND reason = 'cancelled'),"
    " count(*) FILTER (WHERE status = 'cancelled' AND reason IS NULL),"
    " (SELECT coalesce(sum(delta), 0) FROM stock_ledger"
    "   WHERE sku_id = $1 AND kind = 'return' AND order_id > $2)"
    " FROM orders WHERE sku_id = $1 AND id > $2";
/* $1 sku: every order of the SKU, the run's or not.  A cancelled or expired
 * order that took units (an 'order' row: it was confirmed) gave exactly them
 * back, once, saying why; no other order gave anything back; one cancelled
 * before it was written has its 'cancel' row (0) and never took units. */
static const char SQL_RETURNS[] =
    "SELECT o.id, o.status, o.reason, o.qty,"
    " count(l.id) FILTER (WHERE l.kind = 'order') AS order_rows,"
    " count(l.id) FILTER (WHERE l.kind = 'return') AS return_rows,"
    " coalesce(sum(l.delta) FILTER (WHERE l.kind = 'return'), 0) AS returned,"
    " string_agg(l.reason, ',') FILTER (WHERE l.kind = 'return') AS return_reason,"
    " count(l.id) FILTER (WHERE l.kind = 'cancel') AS cancel_rows"
    " FROM orders o LEFT JOIN stock_ledger l ON l.order_id = o.id"
    " WHERE o.sku_id = $1 GROUP BY o.id, o.status, o.reason, o.qty"
    " HAVING CASE WHEN o.status IN ('cancelled', 'expired')"
    "              AND count(l.id) FILTER (WHERE l.kind = 'order') > 0"
    "             THEN count(l.id) FILTER (WHERE l.kind = 'return') <> 1"
    "               OR coalesce(sum(l.delta) FILTER (WHERE l.kind = 'return'), 0) <> o.qty"
    "               OR count(l.id) FILTER (WHERE l.kind = 'return'"
    "                                        AND l.reason IS DISTINCT FROM o.status) > 0"
    "             ELSE count(l.id) FILTER (WHERE l.kind = 'return') <> 0 END"
    "     OR (o.status = 'cancelled' AND o.reason = 'cancelled'"
    "         AND (count(l.id) FILTER (WHERE l.kind = 'cancel') <> 1"
    "              OR count(l.id) FILTER (WHERE l.kind = 'order') <> 0))"
    " ORDER BY o.id LIMIT 1000";
/* What the lifecycle phase sent and got, one row per order it planned. */
static const char SQL_LIFE_TEMP[] =
    "CREATE TEMP TABLE lt_life (id bigint NOT NULL, user_id bigint NOT NULL,"
    " plan \"char\" NOT NULL, code int NOT NULL, error text NOT NULL, state text NOT NULL,"
    " replayed boolean NOT NULL, ref_ok boolean NOT NULL, code2 int NOT NULL,"
    " error2 text NOT NULL, state2 text NOT NULL, replayed2 boolean NOT NULL,"
    " ref_ok2 boolean NOT NULL)";
/* $1 the payment_ref prefix ("lt-SEED-").  A pay answered 200 paid the order
 * with its ref; one refused (409 order_not_payable) names the state its row
 * ends in (or 'pending': not written yet), never paid; a cancel answered 200
 * cancelled it; one refused (409 order_not_cancellable) names the state its
 * row is in: paid, expired, rejected, or confirmed (final without a payment
 * window).  No answer, a 503 or a 429 (a rate
 * limit refused it: the order is as if it had not been sent) leaves it open.
 * An order without a row is I4's. */
static const char SQL_LIFE_ANSWERS[] =
    "SELECT l.id, l.plan, l.code, l.error, l.state, l.ref_ok, o.status AS row_status,"
    " o.reason AS row_reason, o.payment_ref AS row_ref"
    " FROM lt_life l JOIN orders o ON o.id = l.id"
    " WHERE (l.plan = 'p' AND NOT ("
    "         (l.code = 200 AND l.state = 'paid' AND l.ref_ok AND o.status = 'paid'"
    "          AND o.payment_ref = $1::text || l.id::text)"
    "      OR (l.code = 409 AND l.error = 'order_not_payable' AND o.status <> 'paid'"
    "          AND (l.state = 'pending' OR (l.state IN ('cancelled', 'expired', 'rejected')"
    "                                       AND o.status = l.state)))"
    "      OR l.code IN (0, 429, 503)))"
    "    OR (l.plan = 'c' AND NOT ("
    "         (l.code = 200 AND l.state = 'cancelled' AND o.status = 'cancelled')"
    "      OR (l.code = 409 AND l.error = 'order_not_cancellable'"
    "          AND l.state IN ('paid', 'expired', 'rejected', 'confirmed')"
    "          AND o.status = l.state)"
    "      OR l.code IN (0, 429, 503)))"
    " ORDER BY l.id LIMIT 1000";
/* $1 sku, $2 first order id - 1, $3 whether the SKU has a payment window.
 * Only the run pays and cancels the run's orders; one it left alone expired
 * (or was rejected), or without a window is still confirmed. */
static const char SQL_LIFE_LEFT[] =
    "SELECT o.id, o.user_id, o.status, o.reason, l.plan, l.code"
    " FROM orders o LEFT JOIN lt_life l ON l.id = o.id"
    " WHERE o.sku_id = $1 AND o.id > $2 AND ("
    "       (o.status = 'paid' AND l.plan IS DISTINCT FROM 'p')"
    "    OR (o.status = 'cancelled' AND l.plan IS DISTINCT FROM 'c')"
    "    OR (l.plan = 'w' AND o.status NOT IN ('rejected',"
    "                                          CASE WHEN $3::boolean THEN 'expired'"
    "                                               ELSE 'confirmed' END)))"
    " ORDER BY o.id LIMIT 1000";
/* $1 the payment_ref prefix.  The second pay with the same ref: after a 200,
 * 200 again and "replayed"; after a refusal a refusal; the order paid once
 * with that ref whenever one of the two said 200. */
static const char SQL_LIFE_PAY_AGAIN[] =
    "SELECT l.id, l.code, l.state, l.code2, l.error2, l.state2, l.replayed2, l.ref_ok2,"
    " o.status AS row_status, o.payment_ref AS row_ref"
    " FROM lt_life l JOIN orders o ON o.id = l.id"
    " WHERE l.plan = 'p' AND l.code2 <> -1 AND NOT ("
    "        (l.code2 = 200 AND l.state2 = 'paid' AND l.ref_ok2 AND o.status = 'paid'"
    "         AND o.payment_ref = $1::text || l.id::text AND (l.replayed2 OR l.code <> 200))"
    "     OR (l.code2 = 409 AND l.error2 = 'order_not_payable' AND l.code <> 200"
    "         AND o.status <> 'paid')"
    "     OR l.code2 IN (0, 429, 503))"
    " ORDER BY l.id LIMIT 1000";

/* ---- helpers ---------------------------------------------------------------- */

struct ctx {
    const struct lt_opts *o;
    int64_t sku;
    PGconn *pg;
    struct lt_redis redis;
    char *err;
    size_t errlen;
};

static void item_set(struct lt_check_result *r, enum lt_check_id id, int ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void item_set(struct lt_check_result *r, enum lt_check_id id, int ok, const char *fmt, ...)
{
    struct lt_check_item *it = &r->item[id];
    it->state = ok ? LT_CHECK_PASSED : LT_CHECK_FAILED;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->detail, sizeof it->detail, fmt, ap);
    va_end(ap);
    if (!ok)
        r->ok = 0;
}

/* Appends up to LT_CHECK_MAX_ROWS rows of res to the item, header first. */
static void item_rows(struct lt_check_item *it, const PGresult *res)
{
    size_t len = strlen(it->rows);
    int nf = PQnfields(res), nt = PQntuples(res);
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (len < sizeof it->rows) {                                                               \
            int w_ = snprintf(it->rows + len, sizeof it->rows - len, __VA_ARGS__);                 \
            len += w_ > 0 ? (size_t)w_ : 0;                                                        \
        }                                                                                          \
    } while (0)
    for (int c = 0; c < nf; c++)
        PUT("%s%s", c ? "\t" : "", PQfname(res, c));
    PUT("\n");
    for (int t = 0; t < nt && t < LT_CHECK_MAX_ROWS; t++) {
        for (int c = 0; c < nf; c++)
            PUT("%s%s", c ? "\t" : "", PQgetisnull(res, t, c) ? "NULL" : PQgetvalue(res, t, c));
        PUT("\n");
    }
    if (nt > LT_CHECK_MAX_ROWS)
        PUT("... %d rows in all%s\n", nt, nt >= 1000 ? " (at least)" : "");
#undef PUT
    if (len >= sizeof it->rows)
        it->rows[sizeof it->rows - 1] = '\0';
}

static void item_line(struct lt_check_item *it, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void item_line(struct lt_check_item *it, const char *fmt, ...)
{
    size_t len = strlen(it->rows);
    if (len + 1 >= sizeof it->rows)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->rows + len, sizeof it->rows - len, fmt, ap);
    va_end(ap);
}

/* Runs a query with text parameters.  NULL (message in err) unless it
 * returned rows or completed. */
static PGresult *q(struct ctx *c, const char *sql, int n, const char *const *params)
{
    PGresult *r = PQexecParams(c->pg, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return r;
    snprintf(c->err, c->errlen, "query failed: %s (%.80s...)", PQerrorMessage(c->pg), sql);
    PQclear(r);
    return NULL;
}

static int64_t iv(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* A parent of stock buckets (SQL_SKU's row r, its column 4) holds no stock
 * or orders itself: checked alone it would pass with nothing looked at.
 * Returns 1 with a message in err for one, 0 otherwise. */
static int split_refused(const PGresult *r, int64_t sku, char *err, size_t errlen)
{
    int64_t n = iv(r, 0, 4);
    if (n <= 1)
        return 0;
    snprintf(err, errlen,
             "SKU %" PRId64 " is split into %" PRId64 " stock buckets, which hold its stock and "
             "orders: check it with --buckets %" PRId64 " in the run that sells it",
             sku, n, n);
    return 1;
}

static int connect_all(struct ctx *c)
{
    const char *kw[] = {"connect_timeout", "dbname", NULL};
    const char *vals[] = {PG_CONNECT_TIMEOUT_S, c->o->pg_dsn, NULL};
    c->pg = PQconnectdbParams(kw, vals, 1);
    if (PQstatus(c->pg) != CONNECTION_OK) {
        snprintf(c->err, c->errlen, "cannot connect to PostgreSQL: %s", PQerrorMessage(c->pg));
        return -1;
    }
    PGresult *r = q(c, PG_STATEMENT_TIMEOUT, 0, NULL);
    if (!r)
        return -1;
    PQclear(r);
    if (lt_redis_init(&c->redis, c->o->redis_url, REDIS_TIMEOUT_MS, c->err, c->errlen) != 0)
        return -1;
    if (lt_redis_connect(&c->redis) != 0) {
        const struct rlock_url *t = &c->redis.target;
        if (t->nsentinels)
            snprintf(c->err, c->errlen,
                     "cannot connect to Redis: no master '%s' reachable via %d "
                     "Sentinels",
                     t->master, t->nsentinels);
        else if (t->nseeds)
            snprintf(c->err, c->errlen, "cannot connect to the Redis Cluster of %d seed nodes",
                     t->nseeds);
        else
            snprintf(c->err, c->errlen, "cannot connect to Redis at %s:%d", t->host, t->port);
        return -1;
    }
    return 0;
}

static void disconnect_all(struct ctx *c)
{
    if (c->pg)
        PQfinish(c->pg);
    c->pg = NULL;
    lt_redis_close(&c->redis);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until XLEN of the SKU's stream is 0.  Returns 0, or -1 (err set). */
static int wait_drained(struct ctx *c, double *waited_s)
{
    char key[KEYS_MAX];
    keys_sku(key, c->sku, KEY_STREAM);
    const char *argv[] = {"XLEN", key};
    uint64_t t0 = lt_now_us(), limit = (uint64_t)c->o->drain_timeout_s * 1000000ULL;
    for (;;) {
        redisReply *rep = lt_redis_cmd(&c->redis, 2, argv);
        long long n = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
        if (rep)
            freeReplyObject(rep);
        uint64_t el = lt_now_us() - t0;
        *waited_s = (double)el / 1e6;
        if (n == 0)
            return 0;
        if (el >= limit) {
            snprintf(c->err, c->errlen,
                     n < 0 ? "Redis did not answer XLEN %s"
                           : "order stream %s not drained after %d s (%lld entries left)",
                     key, c->o->drain_timeout_s, n);
            return -1;
        }
        sleep_ms(DRAIN_POLL_MS);
    }
}

static int redis_get_int(struct ctx *c, enum keys_kind kind, int64_t *out)
{
    char key[KEYS_MAX];
    keys_sku(key, c->sku, kind);
    const char *argv[] = {"GET", key};
    redisReply *rep = lt_redis_cmd(&c->redis, 2, argv);
    if (!rep) {
        snprintf(c->err, c->errlen, "Redis did not answer GET %s", key);
        return -1;
    }
    *out = rep->type == REDIS_REPLY_STRING ? strtoll(rep->str, NULL, 10) : -1;
    freeReplyObject(rep);
    return 0;
}

/* Streams text rows into "COPY table FROM STDIN". */
struct copy {
    struct ctx *c;
    char buf[COPY_CHUNK];
    size_t len;
    int failed;
};

static void copy_flush(struct copy *cp)
{
    if (cp->len && !cp->failed && PQputCopyData(cp->c->pg, cp->buf, (int)cp->len) != 1)
        cp->failed = 1;
    cp->len = 0;
}

/* One row of two numbers, or of three and a promise letter when 'promise'
 * is not 0. */
static void copy_row(struct copy *cp, int64_t a, int64_t b, int64_t c3, char promise)
{
    if (cp->len + 80 > sizeof cp->buf)
        copy_flush(cp);
    int w = promise ? snprintf(cp->buf + cp->len, sizeof cp->buf - cp->len,
                               "%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%c\n", a, b, c3, promise)
                    : snprintf(cp->buf + cp->len, sizeof cp->buf - cp->len,
                               "%" PRId64 "\t%" PRId64 "\n", a, b);
    cp->len += (size_t)w;
}

static int copy_begin(struct ctx *c, const char *table)
{
    char sql[96];
    snprintf(sql, sizeof sql, "COPY %s FROM STDIN", table);
    PGresult *r = PQexec(c->pg, sql);
    int ok = PQresultStatus(r) == PGRES_COPY_IN;
    if (!ok)
        snprintf(c->err, c->errlen, "%s: %s", sql, PQerrorMessage(c->pg));
    PQclear(r);
    return ok ? 0 : -1;
}

static int copy_end(struct copy *cp)
{
    copy_flush(cp);
    struct ctx *c = cp->c;
    if (PQputCopyEnd(c->pg, cp->failed ? "client failed" : NULL) != 1)
        cp->failed = 1;
    PGresult *r = PQgetResult(c->pg);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        cp->failed = 1;
    if (cp->failed)
        snprintf(c->err, c->errlen, "COPY failed: %s", PQerrorMessage(c->pg));
    PQclear(r);
    while ((r = PQgetResult(c->pg)))
        PQclear(r);
    return cp->failed ? -1 : 0;
}

static void copy_printf(struct copy *cp, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One COPY row of any shape (at most COPY_LINE_MAX bytes). */
static void copy_printf(struct copy *cp, const char *fmt, ...)
{
    if (cp->len + COPY_LINE_MAX > sizeof cp->buf)
        copy_flush(cp);
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(cp->buf + cp->len, sizeof cp->buf - cp->len, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof cp->buf - cp->len) {
        cp->failed = 1; /* a row cut short must not go in */
        return;
    }
    cp->len += (size_t)w;
}

/* One HSCAN round.  Returns the reply (caller frees) or NULL. */
static redisReply *hscan(struct ctx *c, const char *key, const char *cursor)
{
    const char *argv[] = {"HSCAN", key, cursor, "COUNT", SCAN_COUNT};
    redisReply *rep = lt_redis_cmd(&c->redis, 5, argv);
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_STRING || rep->element[1]->type != REDIS_REPLY_ARRAY) {
        snprintf(c->err, c->errlen, "HSCAN %s failed", key);
        if (rep)
            freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

/* Copies the Redis 'bought' hash into lt_held.  Returns 0 or -1. */
static int load_held(struct ctx *c)
{
    PGresult *r = q(c, SQL_HELD_TEMP, 0, NULL);
    if (!r)
        return -1;
    PQclear(r);
    if (copy_begin(c, "lt_held") != 0)
        return -1;
    struct copy *cp = calloc(1, sizeof *cp);
    if (!cp) {
        snprintf(c->err, c->errlen, "out of memory");
        return -1;
    }
    cp->c = c;
    char key[KEYS_MAX], cursor[32] = "0";
    keys_sku(key, c->sku, KEY_BOUGHT);
    uint64_t t0 = lt_now_us(), limit = (uint64_t)c->o->drain_timeout_s * 1000000ULL;
    int rounds = 0, done = 0;
    while (!done && !cp->failed) {
        redisReply *rep = hscan(c, key, cursor);
        if (!rep) {
            cp->failed = 1;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        redisReply *kv = rep->element[1];
        for (size_t i = 0; i + 1 < kv->elements; i += 2)
            if (keys_bought_is_user(kv->element[i]->str)) /* not a buyer's bucket */
                copy_row(cp, strtoll(kv->element[i]->str, NULL, 10),
                         strtoll(kv->element[i + 1]->str, NULL, 10), 0, 0);
        freeReplyObject(rep);
        done = strcmp(cursor, "0") == 0;
        if (!done && (++rounds >= SCAN_MAX_ROUNDS || lt_now_us() - t0 > limit)) {
            snprintf(c->err, c->errlen, "HSCAN %s did not finish in bounds", key);
            cp->failed = 1;
        }
    }
    int rc = copy_end(cp);
    free(cp);
    return rc;
}

/* Counts journal entries still 'pending' and lists the first few. */
static int scan_journal(struct ctx *c, struct lt_check_item *it, int64_t *pending)
{
    char key[KEYS_MAX], cursor[32] = "0";
    keys_sku(key, c->sku, KEY_JOURNAL);
    uint64_t t0 = lt_now_us(), limit = (uint64_t)c->o->drain_timeout_s * 1000000ULL;
    *pending = 0;
    for (int rounds = 0;; rounds++) {
        redisReply *rep = hscan(c, key, cursor);
        if (!rep)
            return -1;
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        redisReply *kv = rep->element[1];
        for (size_t i = 0; i + 1 < kv->elements; i += 2) {
            struct order_decision d;
            order_parse_state(kv->element[i + 1]->str, &d);
            if (d.status != ORDER_PENDING)
                continue;
            if (*pending == 0)
                item_line(it, "order_id\tjournal\n");
            if (*pending < LT_CHECK_MAX_ROWS)
                item_line(it, "%s\t%s\n", kv->element[i]->str, kv->element[i + 1]->str);
            (*pending)++;
        }
        freeReplyObject(rep);
        if (strcmp(cursor, "0") == 0)
            return 0;
        if (rounds >= SCAN_MAX_ROUNDS || lt_now_us() - t0 > limit) {
            snprintf(c->err, c->errlen, "HSCAN %s did not finish in bounds", key);
            return -1;
        }
    }
}

/* Writes one table's rows of the recorded answers into cp. */
typedef void rows_fn(struct copy *cp, const struct lt_answers *a);

/* Makes the temporary table 'table' (by the statement 'create'), copies the
 * rows 'rows' writes into it, indexes it by id and analyzes it.  Returns 0,
 * or -1 with c->err set. */
static int load_table(struct ctx *c, const char *create, const char *table, rows_fn *rows,
                      const struct lt_answers *a)
{
    PGresult *r = q(c, create, 0, NULL);
    if (!r)
        return -1;
    PQclear(r);
    if (copy_begin(c, table) != 0)
        return -1;
    struct copy *cp = calloc(1, sizeof *cp);
    if (!cp) {
        snprintf(c->err, c->errlen, "out of memory");
        return -1;
    }
    cp->c = c;
    rows(cp, a);
    int rc = copy_end(cp);
    free(cp);
    if (rc != 0)
        return -1;
    char sql[80];
    snprintf(sql, sizeof sql, "CREATE INDEX ON %s (id)", table);
    if (!(r = q(c, sql, 0, NULL)))
        return -1;
    PQclear(r);
    snprintf(sql, sizeof sql, "ANALYZE %s", table);
    if (!(r = q(c, sql, 0, NULL)))
        return -1;
    PQclear(r);
    return 0;
}

/* The answers naming an order, into lt_answers (SQL_ANSWERS_TEMP). */
static void answer_rows(struct copy *cp, const struct lt_answers *a)
{
    for (size_t i = 0; i < a->n; i++)
        copy_row(cp, a->orders[i].id, a->orders[i].user, a->orders[i].qty,
                 (char)a->orders[i].promise);
}

/* The lifecycle phase's records, into lt_life (SQL_LIFE_TEMP).  The words
 * are lower-case letters and '_', "?" or "" (lt_life): plain COPY text. */
static void life_rows(struct copy *cp, const struct lt_answers *a)
{
    for (size_t i = 0; i < a->nacts; i++) {
        const struct lt_act *t = &a->acts[i];
        copy_printf(cp, "%" PRId64 "\t%" PRId64 "\t%c\t%d\t%s\t%s\t%c\t%c\t%d\t%s\t%s\t%c\t%c\n",
                    t->id, t->user, (char)t->plan, t->first.code, t->first.error, t->first.state,
                    t->first.replayed ? 't' : 'f', t->first.ref_ok ? 't' : 'f', t->second.code,
                    t->second.error, t->second.state, t->second.replayed ? 't' : 'f',
                    t->second.ref_ok ? 't' : 'f');
    }
}

/* ---- the checks --------------------------------------------------------------- */

int lt_check_baseline(const struct lt_opts *o, int64_t sku, struct lt_baseline *b, char *err,
                      size_t errlen)
{
    struct ctx c = {.o = o, .sku = sku, .err = err, .errlen = errlen};
    memset(b, 0, sizeof *b);
    int rc = -1;
    double waited;
    char sid[24];
    snprintf(sid, sizeof sid, "%" PRId64, sku);
    const char *p[] = {sid};
    PGresult *r1 = NULL, *r2 = NULL, *r3 = NULL;
    if (connect_all(&c) != 0 || wait_drained(&c, &waited) != 0)
        goto out;
    if (!(r1 = q(&c, SQL_SKU, 1, p)) || !(r2 = q(&c, SQL_MAX_ORDER, 1, p)) ||
        !(r3 = q(&c, SQL_MAX_LEDGER, 1, p)))
        goto out;
    if (PQntuples(r1) != 1) {
        snprintf(err, errlen, "SKU %" PRId64 " is not in the database", sku);
        goto out;
    }
    if (split_refused(r1, sku, err, errlen))
        goto out;
    b->known = 1;
    b->stock = iv(r1, 0, 0);
    b->max_order_id = iv(r2, 0, 0);
    b->max_ledger_id = iv(r3, 0, 0);
    rc = 0;
out:
    PQclear(r1);
    PQclear(r2);
    PQclear(r3);
    disconnect_all(&c);
    return rc;
}

int lt_check_drain(const struct lt_opts *o, int64_t sku, char *err, size_t errlen)
{
    struct ctx c = {.o = o, .sku = sku, .err = err, .errlen = errlen};
    double waited;
    int rc = connect_all(&c) == 0 && wait_drained(&c, &waited) == 0 ? 0 : -1;
    disconnect_all(&c);
    return rc;
}

void lt_check_admin_ledger(struct lt_check_result *r, const struct lt_answers *a, const char *who)
{
    const struct lt_check_facts *f = &r->f;
    if (a->admin_unknown == 0)
        item_set(r, LT_CHK_I1_ADMIN, f->admin_ledger_sum == a->admin_applied,
                 "%sadmin ledger since the start: %+" PRId64 " in %" PRId64
                 " rows; deltas answered 200: %+" PRId64 " in %" PRIu64 " (409: %" PRIu64 ")",
                 who, f->admin_ledger_sum, f->admin_ledger_rows, a->admin_applied, a->admin_ok,
                 a->admin_refused);
    else /* each unanswered delta may or may not have been applied */
        item_set(r, LT_CHK_I1_ADMIN,
                 llabs(f->admin_ledger_sum - a->admin_applied) <= a->admin_unknown_abs,
                 "%sadmin ledger %+" PRId64 ", answered 200 %+" PRId64 ", %" PRIu64
                 " deltas unanswered (|sum| <= %" PRId64 ")",
                 who, f->admin_ledger_sum, a->admin_applied, a->admin_unknown,
                 a->admin_unknown_abs);
}

/* I1 from the service's own query, and the SKU's facts. */
static int check_i1(struct ctx *c, const struct lt_answers *a, struct lt_check_result *r,
                    const char *const *p)
{
    struct lt_check_facts *f = &r->f;
    PGresult *res = q(c, SQL_SKU, 1, p);
    if (!res)
        return -1;
    if (PQntuples(res) != 1 || split_refused(res, c->sku, c->err, c->errlen)) {
        if (PQntuples(res) != 1)
            snprintf(c->err, c->errlen, "SKU %" PRId64 " is not in the database", c->sku);
        PQclear(res);
        return -1;
    }
    f->db_stock = iv(res, 0, 0);
    f->initial_stock = iv(res, 0, 1);
    f->per_user_limit = iv(res, 0, 2);
    f->payment_window_s = iv(res, 0, 3);
    PQclear(res);

    if (!(res = q(c, sql_text("invariant_check"), 1, p)))
        return -1;
    item_set(r, LT_CHK_I1_LEDGER, PQntuples(res) == 0,
             "stock %" PRId64 ", initial %" PRId64 ", invariant_check.sql: %d violating rows",
             f->db_stock, f->initial_stock, PQntuples(res));
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_I1_LEDGER], res);
    PQclear(res);

    char base_ledger[24];
    snprintf(base_ledger, sizeof base_ledger, "%" PRId64, a->base.max_ledger_id);
    const char *pa[] = {p[0], base_ledger};
    if (!(res = q(c, SQL_ADMIN, 2, pa)))
        return -1;
    f->admin_ledger_sum = iv(res, 0, 0);
    f->admin_ledger_rows = iv(res, 0, 1);
    PQclear(res);
    if (!a->base.known)
        return 0;
    char base_order[24];
    snprintf(base_order, sizeof base_order, "%" PRId64, a->base.max_order_id);
    const char *pe[] = {p[0], base_ledger, base_order};
    if (!(res = q(c, SQL_EARLY_RETURNS, 3, pe)))
        return -1;
    f->early_returned_units = iv(res, 0, 0);
    PQclear(res);
    if (!a->admin_in_group)
        lt_check_admin_ledger(r, a, "");
    int64_t expect =
        a->base.stock + f->admin_ledger_sum - f->run_confirmed_units + f->early_returned_units;
    item_set(r, LT_CHK_I1_RUN, f->db_stock == expect && f->db_stock >= 0,
             "stock %" PRId64 " = %" PRId64 " before %+" PRId64 " deltas - %" PRId64
             " sold + %" PRId64 " given back by older orders = %" PRId64,
             f->db_stock, a->base.stock, f->admin_ledger_sum, f->run_confirmed_units,
             f->early_returned_units, expect);
    return 0;
}

static int check_i2_i3(struct ctx *c, struct lt_check_result *r, const char *const *p)
{
    struct lt_check_facts *f = &r->f;
    if (redis_get_int(c, KEY_STOCK, &f->redis_stock) != 0)
        return -1;
    item_set(r, LT_CHK_I2_STOCK, f->redis_stock == f->db_stock,
             "Redis %" PRId64 "%s, database %" PRId64, f->redis_stock,
             f->redis_stock < 0 ? " (missing)" : "", f->db_stock);

    if (load_held(c) != 0)
        return -1;
    PGresult *res = q(c, SQL_HELD, 1, p);
    if (!res)
        return -1;
    item_set(r, LT_CHK_I2_HELD, PQntuples(res) == 0, "%d users differ", PQntuples(res));
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_I2_HELD], res);
    PQclear(res);

    int64_t pending;
    if (scan_journal(c, &r->item[LT_CHK_I2_JOURNAL], &pending) != 0)
        return -1;
    item_set(r, LT_CHK_I2_JOURNAL, pending == 0, "%" PRId64 " journal entries still pending",
             pending);

    if (!(res = q(c, SQL_LIMIT, 1, p)))
        return -1;
    item_set(r, LT_CHK_I3_LIMIT, PQntuples(res) == 0, "limit %" PRId64 ", %d users above it",
             f->per_user_limit, PQntuples(res));
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_I3_LIMIT], res);
    PQclear(res);
    return 0;
}

static int check_i4(struct ctx *c, const struct lt_answers *a, struct lt_check_result *r,
                    const char *const *p2)
{
    struct lt_check_facts *f = &r->f;
    PGresult *res = q(c, SQL_LEDGER_ROWS, 2, p2);
    if (!res)
        return -1;
    item_set(r, LT_CHK_I4_LEDGER, PQntuples(res) == 0,
             "%" PRId64 " orders, %d without exactly one matching order/rejection/cancel row",
             f->run_orders, PQntuples(res));
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_I4_LEDGER], res);
    PQclear(res);
    if (!a->base.known)
        return 0;

    if (load_table(c, SQL_ANSWERS_TEMP, "lt_answers", answer_rows, a) != 0)
        return -1;
    if (!(res = q(c, SQL_ANSWERED_SUMS, 0, NULL)))
        return -1;
    f->answered_orders = iv(res, 0, 0);
    f->answered_units = iv(res, 0, 1);
    f->answered_rejected_units = iv(res, 0, 2);
    f->answered_returned_units = iv(res, 0, 3);
    f->answered_confirmed = iv(res, 0, 4);
    f->answered_rejected = iv(res, 0, 5);
    f->answered_pending = iv(res, 0, 6);
    f->lost_pending_orders = iv(res, 0, 7);
    f->lost_pending_units = iv(res, 0, 8);
    PQclear(res);

    const char *pa[] = {p2[0], c->o->allow_lost_pending ? "true" : "false"};
    if (!(res = q(c, SQL_ANSWERED, 2, pa)))
        return -1;
    char lost[96] = "";
    if (c->o->allow_lost_pending)
        snprintf(lost, sizeof lost, "; %" PRId64 " 202s lost with Redis's writes (allowed)",
                 f->lost_pending_orders);
    item_set(r, LT_CHK_I4_ANSWERED, PQntuples(res) == 0,
             "%zu orders answered (201 %" PRId64 ", 409+id %" PRId64 ", 202 %" PRId64
             "), %d without their row%s",
             a->n, f->answered_confirmed, f->answered_rejected, f->answered_pending, PQntuples(res),
             lost);
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_I4_ANSWERED], res);
    PQclear(res);

    if (!(res = q(c, SQL_UNANSWERED_SUMS, 2, p2)))
        return -1;
    f->unanswered_rows = iv(res, 0, 0);
    f->unanswered_confirmed_units = iv(res, 0, 1);
    PQclear(res);
    item_set(r, LT_CHK_I4_ROWS, (uint64_t)f->unanswered_rows <= a->unknown,
             "%" PRId64 " rows without an answer, %" PRIu64 " requests of unknown outcome",
             f->unanswered_rows, a->unknown);
    if ((uint64_t)f->unanswered_rows > a->unknown) {
        if (!(res = q(c, SQL_UNANSWERED, 2, p2)))
            return -1;
        item_rows(&r->item[LT_CHK_I4_ROWS], res);
        PQclear(res);
    }

    item_set(r, LT_CHK_I4_IDEM, a->idem_mismatch == 0,
             "%" PRIu64 " retries answered with another order or a refusal", a->idem_mismatch);
    item_set(r, LT_CHK_ANSWERS, a->unexpected == 0,
             "%" PRIu64 " answers outside 201/202/409/503/no answer", a->unexpected);

    /* Every answered order counts unless its row says rejected, cancelled or
     * expired (its units came back), or it was a 202 that Redis lost (only
     * when that is allowed): a lost 201 is still owed. */
    int64_t lost_units = c->o->allow_lost_pending ? f->lost_pending_units : 0;
    int64_t expect = f->answered_units - f->answered_rejected_units - f->answered_returned_units -
                     lost_units + f->unanswered_confirmed_units;
    item_set(r, LT_CHK_SOLD, f->run_confirmed_units == expect,
             "sold %" PRId64 " = %" PRId64 " answered - %" PRId64 " rejected - %" PRId64
             " cancelled or expired - %" PRId64 " lost 202s + %" PRId64
             " of unknown outcome = %" PRId64,
             f->run_confirmed_units, f->answered_units, f->answered_rejected_units,
             f->answered_returned_units, lost_units, f->unanswered_confirmed_units, expect);
    return 0;
}

/* Waits until neither the expiry sweep nor the returns to Redis have work
 * left on the SKU (SETTLE_WHERE).  A run that created the SKU with a window
 * waits for every deadline of its orders (up to the window + the lifecycle
 * timeout), anything else only for what is overdue.  Returns 0 with
 * LT_CHK_LC_SETTLED set, or -1 when a query failed. */
static int wait_settled(struct ctx *c, struct lt_check_result *r)
{
    const struct lt_opts *o = c->o;
    int all = o->mode == LT_MODE_RUN && o->payment_window_s > 0;
    int bound_s = (all ? o->payment_window_s : 0) + o->lifecycle_timeout_s;
    char sid[24];
    snprintf(sid, sizeof sid, "%" PRId64, c->sku);
    const char *p[] = {sid, all ? "true" : "false"};
    uint64_t t0 = lt_now_us(), limit = (uint64_t)bound_s * 1000000ULL;
    int64_t left;
    for (;;) {
        PGresult *res = q(c, SQL_SETTLE, 2, p);
        if (!res)
            return -1;
        left = iv(res, 0, 0);
        PQclear(res);
        uint64_t el = lt_now_us() - t0;
        r->f.settle_s = (double)el / 1e6;
        if (left == 0 || el >= limit)
            break;
        sleep_ms(SETTLE_POLL_MS);
    }
    item_set(r, LT_CHK_LC_SETTLED, left == 0,
             "%" PRId64 " orders %s or with units not back in Redis after %.2f s (bound %d s)",
             left, all ? "with a deadline" : "past their deadline", r->f.settle_s, bound_s);
    if (left) {
        PGresult *res = q(c, SQL_UNSETTLED, 2, p);
        if (!res)
            return -1;
        item_rows(&r->item[LT_CHK_LC_SETTLED], res);
        PQclear(res);
    }
    return 0;
}

/* The lifecycle: units given back once (every order of the SKU), and, when
 * the run had a lifecycle phase, its answers against the rows. */
static int check_life(struct ctx *c, const struct lt_answers *a, struct lt_check_result *r,
                      const char *const *p2)
{
    struct lt_check_facts *f = &r->f;
    PGresult *res = q(c, SQL_LIFE_FACTS, 2, p2);
    if (!res)
        return -1;
    f->lc_paid = iv(res, 0, 0);
    f->lc_expired = iv(res, 0, 1);
    f->lc_cancelled_early = iv(res, 0, 2);
    f->lc_cancelled_late = iv(res, 0, 3);
    f->lc_returned_units = iv(res, 0, 4);
    PQclear(res);
    if (!(res = q(c, SQL_RETURNS, 1, p2)))
        return -1;
    item_set(r, LT_CHK_LC_RETURNS, PQntuples(res) == 0,
             "run: %" PRId64 " units back from %" PRId64 " cancelled and %" PRId64
             " expired orders, %" PRId64 " cancelled unwritten; %d orders of the SKU wrong",
             f->lc_returned_units, f->lc_cancelled_late, f->lc_expired, f->lc_cancelled_early,
             PQntuples(res));
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_LC_RETURNS], res);
    PQclear(res);
    if (a->nacts == 0)
        return 0; /* no lifecycle phase (or no order): no answers to compare */

    if (load_table(c, SQL_LIFE_TEMP, "lt_life", life_rows, a) != 0)
        return -1;
    char prefix[LT_PAYMENT_REF_PREFIX_MAX];
    lt_life_payment_ref_prefix(prefix, sizeof prefix, c->o->seed);
    const char *pr[] = {prefix};
    const struct lt_life_counts *n = &a->life;
    if (!(res = q(c, SQL_LIFE_ANSWERS, 1, pr)))
        return -1;
    item_set(r, LT_CHK_LC_ANSWERS, PQntuples(res) == 0,
             "pays %" PRIu64 " (200 %" PRIu64 ", 409 %" PRIu64 ", open %" PRIu64
             "), cancels %" PRIu64 " (200 %" PRIu64 ", 409 %" PRIu64 ", open %" PRIu64
             "); %d disagree with their row",
             n->pays, n->pay_ok, n->pay_refused, n->pay_unknown, n->cancels, n->cancel_ok,
             n->cancel_refused, n->cancel_unknown, PQntuples(res));
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_LC_ANSWERS], res);
    PQclear(res);

    const char *pl[] = {p2[0], p2[1], f->payment_window_s > 0 ? "true" : "false"};
    if (!(res = q(c, SQL_LIFE_LEFT, 3, pl)))
        return -1;
    item_set(r, LT_CHK_LC_LEFT, PQntuples(res) == 0,
             "%" PRIu64 " left alone (%" PRIu64 " unsent), window %" PRId64
             " s; %d orders in a state nobody asked for",
             n->walks, n->unsent, f->payment_window_s, PQntuples(res));
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_LC_LEFT], res);
    PQclear(res);

    if (!(res = q(c, SQL_LIFE_PAY_AGAIN, 1, pr)))
        return -1;
    item_set(r, LT_CHK_LC_PAY_AGAIN, PQntuples(res) == 0,
             "%" PRIu64 " pays sent twice, %" PRIu64 " answered 200 the second time; %d wrong",
             n->pay_again, n->pay_again_ok, PQntuples(res));
    if (PQntuples(res))
        item_rows(&r->item[LT_CHK_LC_PAY_AGAIN], res);
    PQclear(res);
    return 0;
}

int lt_check_run(const struct lt_opts *o, const struct lt_answers *a, struct lt_check_result *r,
                 char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->ok = 1;
    struct ctx c = {.o = o, .sku = a->sku, .err = err, .errlen = errlen};
    int rc = -1;
    char sid[24], base_order[24];
    snprintf(sid, sizeof sid, "%" PRId64, a->sku);
    snprintf(base_order, sizeof base_order, "%" PRId64, a->base.max_order_id);
    const char *p1[] = {sid};
    const char *p2[] = {sid, base_order};
    if (connect_all(&c) != 0)
        goto out;
    if (wait_drained(&c, &r->f.drain_s) != 0) {
        item_set(r, LT_CHK_DRAINED, 0, "%s", err);
        goto out;
    }
    item_set(r, LT_CHK_DRAINED, 1, "drained %.2f s after the check began", r->f.drain_s);
    if (wait_settled(&c, r) != 0)
        goto out;

    PGresult *res = q(&c, SQL_RUN, 2, p2);
    if (!res)
        goto out;
    r->f.run_orders = iv(res, 0, 0);
    r->f.run_confirmed_units = iv(res, 0, 1);
    r->f.run_rejected_orders = iv(res, 0, 2);
    r->f.run_rejected_units = iv(res, 0, 3);
    r->f.first_created_us = iv(res, 0, 4);
    r->f.last_created_us = iv(res, 0, 5);
    PQclear(res);

    if (check_i1(&c, a, r, p1) != 0 || check_i2_i3(&c, r, p1) != 0 || check_i4(&c, a, r, p2) != 0 ||
        check_life(&c, a, r, p2) != 0)
        goto out;
    rc = 0;
out:
    disconnect_all(&c);
    if (rc != 0)
        r->ok = 0;
    return rc;
}

void lt_check_merge(struct lt_check_result *into, const struct lt_check_result *one,
                    const char *name, int first)
{
    if (first) {
        *into = *one;
        for (int i = 0; i < LT_CHK_COUNT; i++)
            if (into->item[i].state == LT_CHECK_FAILED) {
                char d[sizeof into->item[i].detail];
                snprintf(d, sizeof d, "%s: %s", name, one->item[i].detail);
                memcpy(into->item[i].detail, d, sizeof d);
            }
        return;
    }
    into->ok = into->ok && one->ok;
    for (int i = 0; i < LT_CHK_COUNT; i++) {
        struct lt_check_item *it = &into->item[i];
        const struct lt_check_item *o = &one->item[i];
        if (o->state == LT_CHECK_FAILED && it->state != LT_CHECK_FAILED) {
            *it = *o;
            char d[sizeof it->detail];
            snprintf(d, sizeof d, "%s: %s", name, o->detail);
            memcpy(it->detail, d, sizeof d);
        } else if (o->state == LT_CHECK_PASSED && it->state == LT_CHECK_SKIPPED) {
            *it = *o;
        }
    }
    struct lt_check_facts *f = &into->f;
    const struct lt_check_facts *g = &one->f;
#define SUM(x) f->x += g->x
    SUM(db_stock);
    SUM(redis_stock);
    SUM(initial_stock);
    SUM(run_orders);
    SUM(run_confirmed_units);
    SUM(run_rejected_orders);
    SUM(run_rejected_units);
    SUM(answered_orders);
    SUM(answered_units);
    SUM(answered_rejected_units);
    SUM(answered_returned_units);
    SUM(early_returned_units);
    SUM(answered_confirmed);
    SUM(answered_rejected);
    SUM(answered_pending);
    SUM(lost_pending_orders);
    SUM(lost_pending_units);
    SUM(unanswered_rows);
    SUM(unanswered_confirmed_units);
    SUM(admin_ledger_sum);
    SUM(admin_ledger_rows);
    SUM(lc_paid);
    SUM(lc_expired);
    SUM(lc_cancelled_early);
    SUM(lc_cancelled_late);
    SUM(lc_returned_units);
#undef SUM
    if (g->first_created_us && (!f->first_created_us || g->first_created_us < f->first_created_us))
        f->first_created_us = g->first_created_us;
    if (g->last_created_us > f->last_created_us)
        f->last_created_us = g->last_created_us;
    if (g->drain_s > f->drain_s)
        f->drain_s = g->drain_s;
    if (g->settle_s > f->settle_s)
        f->settle_s = g->settle_s;
}
