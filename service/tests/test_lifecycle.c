/*
 * The order's life after the writer (service/order/order_life.c) on the real
 * Redis and PostgreSQL of the test stack: pay, cancel, expiry, and the
 * return of units to both stores exactly once whatever races (pay against
 * expiry, cancel against expiry, two sweepers, a process killed between the
 * database and Redis, a retry, a rebuild of Redis in between).  The modules
 * are called directly, so that the races can be arranged; the last tests
 * drive the same through real seckilld processes over HTTP, two of them
 * settling the same returns in one.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/embedded.h"
#include "core/keys.h"
#include "core/metrics.h"
#include "harness.h"
#include "order/order.h"
#include "order/order_life.h"
#include "order/order_writer.h"
#include "sku/sku.h"

static struct cfg cfg;

static void setup(void)
{
    th_cfg(&cfg);
    th_reset();
}

static void teardown(void)
{
    cfg_free(&cfg);
}

static void ctx_open(struct worker_ctx *w)
{
    char err[160];
    ck_assert_msg(worker_ctx_init(w, &cfg, err, sizeof err) == 0, "%s", err);
}

static void create_sku(int64_t id, int64_t stock, int limit, int64_t window_s)
{
    th_sku_create_direct(&cfg, id, stock, limit, window_s);
}

static int64_t reserve(int64_t sku, int64_t user, int64_t qty)
{
    return th_reserve(&cfg, sku, user, qty);
}

/* Runs one writer until the SKU's stream is empty. */
static void write_all(int64_t sku)
{
    struct writer w;
    char err[160];
    ck_assert(writer_init(&w, &cfg, "lifecycle-test", err, sizeof err) == 0);
    for (int i = 0; i < 50; i++)
        if (writer_poll(&w) == 0)
            break;
    writer_close(&w);
    th_wait_drained(sku, 5000);
}

static long long q_int(const char *fmt, long long arg)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, arg);
    PGconn *c = th_pg();
    long long v = th_pg_int(c, sql);
    PQfinish(c);
    return v;
}

static void q_admin(const char *fmt, long long arg)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, arg);
    PGconn *c = th_pg_admin();
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK,
                  "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

static long long redis_held(int64_t sku, int64_t user)
{
    char key[KEYS_MAX];
    keys_sku(key, sku, KEY_BOUGHT);
    redisContext *r = th_redis();
    redisReply *rep = redisCommand(r, "HGET %s %lld", key, (long long)user);
    ck_assert(rep != NULL);
    long long v = rep->type == REDIS_REPLY_STRING ? atoll(rep->str) : 0;
    freeReplyObject(rep);
    redisFree(r);
    return v;
}

static const char *status_of(int64_t order, char *buf, size_t cap)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT status FROM orders WHERE id = %lld", (long long)order);
    PGconn *c = th_pg();
    PGresult *r = PQexec(c, sql);
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    snprintf(buf, cap, "%s", PQntuples(r) ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    PQfinish(c);
    return buf;
}

static enum life_result cancel(int64_t order, int64_t buyer)
{
    struct worker_ctx w;
    ctx_open(&w);
    json_t *out = NULL;
    enum life_result res = order_cancel(&w, order, buyer, &out);
    json_decref(out);
    worker_ctx_close(&w);
    return res;
}

static enum life_result pay(int64_t order, const char *ref, char *state, size_t cap)
{
    struct worker_ctx w;
    ctx_open(&w);
    json_t *out = NULL;
    enum life_result res = order_pay(&w, order, ref, &out);
    if (state)
        snprintf(state, cap, "%s",
                 out && json_is_string(json_object_get(out, "status"))
                     ? json_string_value(json_object_get(out, "status"))
                     : "");
    json_decref(out);
    worker_ctx_close(&w);
    return res;
}

static int64_t sweep(void)
{
    struct worker_ctx w;
    ctx_open(&w);
    struct life_sweep s;
    int64_t cursor = 0;
    ck_assert_int_eq(order_life_sweep(&w, 1000, 1000, &cursor, &s), 0);
    worker_ctx_close(&w);
    return s.expired;
}

/* Makes the SKU's confirmed orders due now (their window passed). */
static void make_due(int64_t sku)
{
    q_admin("UPDATE orders SET expires_at = now() - interval '1 second' "
            "WHERE sku_id = %lld AND status = 'confirmed'",
            sku);
}

START_TEST(test_cancel_confirmed_returns_units_once)
{
    create_sku(1, 10, 3, 600);
    int64_t a = reserve(1, 7, 2), b = reserve(1, 8, 1);
    write_all(1);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 7);
    ck_assert_int_eq(cancel(a, 7), LIFE_OK);
    char st[16];
    ck_assert_str_eq(status_of(a, st, sizeof st), "cancelled");
    ck_assert_int_eq(q_int("SELECT stock FROM skus WHERE id = %lld", 1), 9);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 9);
    ck_assert_int_eq(redis_held(1, 7), 0); /* the buyer may buy again */
    ck_assert_int_eq(redis_held(1, 8), 1);
    /* a retry changes nothing and says so */
    ck_assert_int_eq(cancel(a, 7), LIFE_REPLAYED);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 9);
    ck_assert_int_eq(q_int("SELECT count(*) FROM stock_ledger WHERE order_id = %lld AND kind = "
                           "'return' AND delta = 2",
                           a),
                     1);
    /* another buyer's order is not found for them; an order id never issued neither */
    ck_assert_int_eq(cancel(b, 7), LIFE_NOT_FOUND);
    ck_assert_int_eq(cancel(b + 1000, 8), LIFE_NOT_FOUND);
    ck_assert_int_eq(
        q_int("SELECT count(*) FROM orders WHERE return_settled = false AND %lld > 0", 1), 0);
    th_assert_invariants(1);
}
END_TEST

START_TEST(test_pay_is_idempotent_on_its_reference)
{
    create_sku(2, 10, 3, 600);
    int64_t a = reserve(2, 1, 1), b = reserve(2, 2, 1);
    write_all(2);
    char st[16];
    ck_assert_int_eq(pay(a, "ref-a", NULL, 0), LIFE_OK);
    ck_assert_str_eq(status_of(a, st, sizeof st), "paid");
    ck_assert_int_eq(pay(a, "ref-a", NULL, 0), LIFE_REPLAYED);
    ck_assert_int_eq(pay(a, "ref-other", NULL, 0), LIFE_REF_CONFLICT);
    ck_assert_int_eq(pay(b, "ref-a", NULL, 0), LIFE_REF_CONFLICT); /* the ref paid a */
    ck_assert_str_eq(status_of(b, st, sizeof st), "confirmed");
    /* paid is final for the buyer: no cancel */
    ck_assert_int_eq(cancel(a, 1), LIFE_WRONG_STATE);
    /* a cancelled order cannot be paid, and says what it is */
    ck_assert_int_eq(cancel(b, 2), LIFE_OK);
    ck_assert_int_eq(pay(b, "ref-b", st, sizeof st), LIFE_WRONG_STATE);
    ck_assert_str_eq(st, "cancelled");
    ck_assert_int_eq(pay(b + 1000, "ref-x", NULL, 0), LIFE_NOT_FOUND);
    ck_assert_int_eq(q_int("SELECT stock FROM skus WHERE id = %lld", 2), 9);
    th_assert_invariants(2);
}
END_TEST

START_TEST(test_without_a_window_confirmed_is_final_and_never_expires)
{
    create_sku(3, 5, 2, 0);
    int64_t a = reserve(3, 1, 1);
    write_all(3);
    ck_assert_int_eq(q_int("SELECT count(*) FROM orders WHERE id = %lld AND expires_at IS NULL", a),
                     1);
    char st[16];
    ck_assert_int_eq(pay(a, "ref", st, sizeof st), LIFE_WRONG_STATE);
    ck_assert_str_eq(st, "confirmed");
    ck_assert_int_eq(sweep(), 0);
    ck_assert_str_eq(status_of(a, st, sizeof st), "confirmed");
    /* ... nor cancelled: confirmed is final; a pending order still may be */
    ck_assert_int_eq(cancel(a, 1), LIFE_WRONG_STATE);
    int64_t b = reserve(3, 2, 1);
    ck_assert_int_eq(cancel(b, 2), LIFE_OK);
    write_all(3);
    ck_assert_str_eq(status_of(b, st, sizeof st), "cancelled");
    th_assert_invariants(3);
}
END_TEST

/* A pending order cancelled before any writer reached it is written as
 * cancelled: no stock taken in the database, its units back in Redis. */
START_TEST(test_pending_cancel_is_written_as_cancelled)
{
    create_sku(4, 10, 3, 600);
    int64_t a = reserve(4, 5, 3), b = reserve(4, 6, 1);
    ck_assert_int_eq(th_sku_int(4, KEY_STOCK), 6);
    ck_assert_int_eq(cancel(a, 5), LIFE_OK);
    ck_assert_int_eq(cancel(a, 5), LIFE_REPLAYED);
    ck_assert_int_eq(cancel(b, 5), LIFE_NOT_FOUND); /* another buyer's pending order */
    write_all(4);
    char st[16];
    ck_assert_str_eq(status_of(a, st, sizeof st), "cancelled");
    ck_assert_str_eq(status_of(b, st, sizeof st), "confirmed");
    ck_assert_int_eq(q_int("SELECT count(*) FROM orders WHERE id = %lld AND reason = 'cancelled' "
                           "AND cancelled_at IS NOT NULL AND expires_at IS NULL",
                           a),
                     1);
    ck_assert_int_eq(q_int("SELECT count(*) FROM stock_ledger WHERE order_id = %lld AND kind = "
                           "'cancel' AND delta = 0",
                           a),
                     1);
    ck_assert_int_eq(q_int("SELECT stock FROM skus WHERE id = %lld", 4), 9);
    ck_assert_int_eq(th_sku_int(4, KEY_STOCK), 9);
    ck_assert_int_eq(redis_held(4, 5), 0);
    /* cancelling it again after the write: already cancelled */
    ck_assert_int_eq(cancel(a, 5), LIFE_REPLAYED);
    ck_assert_int_eq(th_sku_int(4, KEY_STOCK), 9);
    /* the writer counted one pending order cancelled and one confirmed */
    size_t len;
    char *m = metrics_render(&len);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_nonnull(
        strstr(m, "seckill_order_transitions_total{from=\"pending\",to=\"cancelled\"} 1\n"));
    ck_assert_ptr_nonnull(
        strstr(m, "seckill_order_transitions_total{from=\"pending\",to=\"confirmed\"} 1\n"));
    free(m);
    th_assert_invariants(4);
}
END_TEST

START_TEST(test_expiry_returns_units_and_refuses_late_payment)
{
    create_sku(5, 10, 5, 600);
    int64_t a = reserve(5, 1, 2), b = reserve(5, 2, 3);
    write_all(5);
    ck_assert_int_eq(pay(b, "ref-b", NULL, 0), LIFE_OK);
    make_due(5);
    /* due but not swept yet: the payment is refused, as expired */
    char st[16];
    ck_assert_int_eq(pay(a, "ref-a", st, sizeof st), LIFE_WRONG_STATE);
    ck_assert_str_eq(st, "expired");
    ck_assert_int_eq(sweep(), 1);
    ck_assert_int_eq(sweep(), 0);
    ck_assert_str_eq(status_of(a, st, sizeof st), "expired");
    ck_assert_str_eq(status_of(b, st, sizeof st), "paid");
    ck_assert_int_eq(q_int("SELECT stock FROM skus WHERE id = %lld", 5), 7);
    ck_assert_int_eq(th_sku_int(5, KEY_STOCK), 7);
    ck_assert_int_eq(redis_held(5, 1), 0);
    ck_assert_int_eq(redis_held(5, 2), 3);
    ck_assert_int_eq(cancel(a, 1), LIFE_WRONG_STATE);
    th_assert_invariants(5);
}
END_TEST

/* A sweep works on a bounded number of SKUs and the next goes on after the
 * last: no SKU waits behind others for ever. */
START_TEST(test_sweeps_take_turns_over_the_skus)
{
    for (int64_t sku = 6; sku <= 8; sku++) {
        create_sku(sku, 10, 5, 600);
        (void)reserve(sku, 1, 1);
        write_all(sku);
        make_due(sku);
    }
    struct worker_ctx w;
    ctx_open(&w);
    struct life_sweep s;
    int64_t cursor = 0;
    ck_assert_int_eq(order_life_sweep(&w, 1000, 2, &cursor, &s), 0);
    ck_assert_int_eq(s.skus, 2);
    ck_assert_int_eq(cursor, 7);
    ck_assert_int_eq(q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND status = "
                           "'confirmed'",
                           8),
                     1);
    ck_assert_int_eq(order_life_sweep(&w, 1000, 2, &cursor, &s), 0);
    ck_assert_int_eq(s.skus, 1);
    ck_assert_int_eq(cursor, 0); /* a short page: from the start next time */
    ck_assert_int_eq(
        q_int("SELECT count(*) FROM orders WHERE status = 'confirmed' AND %lld > 0", 1), 0);
    worker_ctx_close(&w);
    for (int64_t sku = 6; sku <= 8; sku++)
        th_assert_invariants(sku);
}
END_TEST

/* ---- races ---------------------------------------------------------------- */

#define RACE_ORDERS 40

struct racer {
    int kind; /* 0 sweep, 1 pay all, 2 cancel all */
    const int64_t *orders, *users;
    pthread_barrier_t *start;
    int ok; /* pays or cancels that succeeded */
};

static void *race_main(void *arg)
{
    struct racer *r = arg;
    struct worker_ctx w;
    ctx_open(&w);
    pthread_barrier_wait(r->start);
    if (r->kind == 0) {
        /* sweeps across the deadlines, in small batches: more interleaving */
        for (int i = 0; i < 40; i++) {
            struct life_sweep s;
            int64_t cursor = 0;
            ck_assert_int_eq(order_life_sweep(&w, 7, 1000, &cursor, &s), 0);
            th_sleep_ms(10);
        }
    } else {
        for (int i = 0; i < RACE_ORDERS; i++) {
            json_t *out = NULL;
            char ref[32];
            snprintf(ref, sizeof ref, "race-%d", i);
            enum life_result res = r->kind == 1 ? order_pay(&w, r->orders[i], ref, &out)
                                                : order_cancel(&w, r->orders[i], r->users[i], &out);
            r->ok += res == LIFE_OK;
            ck_assert(res == LIFE_OK || res == LIFE_WRONG_STATE);
            json_decref(out);
        }
    }
    worker_ctx_close(&w);
    return NULL;
}

/* Runs racers of the given kinds at once on RACE_ORDERS due orders of SKU
 * 'sku'; returns the successes of the non-sweeping racer. */
static int race(int64_t sku, const int *kinds, int n)
{
    create_sku(sku, 1000, 5, 600);
    int64_t orders[RACE_ORDERS], users[RACE_ORDERS];
    for (int i = 0; i < RACE_ORDERS; i++) {
        users[i] = 100 + i;
        orders[i] = reserve(sku, users[i], 1 + i % 3);
    }
    write_all(sku);
    /* deadlines spread over the next 300 ms, so that the sweepers and the
     * payer or canceller meet on some orders */
    q_admin("UPDATE orders SET expires_at = now() + (id % 10) * interval '30 ms' "
            "WHERE sku_id = %lld",
            sku);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    pthread_t t[4];
    struct racer r[4];
    for (int i = 0; i < n; i++) {
        r[i] = (struct racer){.kind = kinds[i], .orders = orders, .users = users, .start = &start};
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_main, &r[i]), 0);
    }
    int ok = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        ok += r[i].ok;
    }
    pthread_barrier_destroy(&start);
    /* whatever is left due now is swept (the pay racer may have missed some) */
    th_sleep_ms(400);
    (void)sweep();
    /* one final state each; exactly the cancelled and expired ones came back */
    ck_assert_int_eq(q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND status NOT IN "
                           "('paid', 'cancelled', 'expired')",
                           sku),
                     0);
    ck_assert_int_eq(q_int("SELECT count(*) FROM orders o WHERE sku_id = %lld AND "
                           "(status = 'paid') = EXISTS (SELECT 1 FROM stock_ledger l WHERE "
                           "l.order_id = o.id AND l.kind = 'return')",
                           sku),
                     0);
    th_assert_invariants(sku);
    return ok;
}

START_TEST(test_pay_racing_expiry_ends_in_one_state)
{
    int ok = race(10, (const int[]){1, 0}, 2);
    ck_assert_int_eq(
        q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND status = 'paid'", 10), ok);
}
END_TEST

START_TEST(test_cancel_racing_expiry_returns_once)
{
    int ok = race(11, (const int[]){2, 0}, 2);
    ck_assert_int_eq(
        q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND status = 'cancelled'", 11), ok);
}
END_TEST

START_TEST(test_two_sweepers_expire_each_order_once)
{
    (void)race(12, (const int[]){0, 0, 0}, 3);
    ck_assert_int_eq(
        q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND status = 'expired'", 12),
        RACE_ORDERS);
}
END_TEST

/* ---- a process that dies between the database and Redis ------------------- */

/* What a daemon killed after its COMMIT and before order_release.lua leaves:
 * the orders expired and the units back in PostgreSQL, Redis not told. */
static void expire_without_redis(int64_t sku)
{
    PGconn *c = th_pg();
    char sql[64], sid[24];
    snprintf(sid, sizeof sid, "%lld", (long long)sku);
    snprintf(sql, sizeof sql, "%s", "BEGIN");
    PQclear(PQexec(c, sql));
    PGresult *r = PQexecParams(c, sql_text("orders_expire"), 2, NULL, (const char *[]){sid, "100"},
                               NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    ck_assert_int_gt(PQntuples(r), 0);
    PQclear(r);
    PQclear(PQexec(c, "COMMIT"));
    PQfinish(c);
}

START_TEST(test_return_left_by_a_dead_process_is_settled_once)
{
    create_sku(20, 10, 3, 600);
    (void)reserve(20, 1, 2);
    (void)reserve(20, 2, 1);
    write_all(20);
    make_due(20);
    expire_without_redis(20);
    ck_assert_int_eq(q_int("SELECT stock FROM skus WHERE id = %lld", 20), 10);
    ck_assert_int_eq(th_sku_int(20, KEY_STOCK), 7); /* not yet */
    ck_assert_int_eq(
        q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND return_settled = false", 20), 2);
    /* the next sweep finds the unsettled rows and finishes them */
    ck_assert_int_eq(sweep(), 0);
    ck_assert_int_eq(th_sku_int(20, KEY_STOCK), 10);
    ck_assert_int_eq(
        q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND return_settled = false", 20), 0);
    /* a settler that ran the script but died before marking the rows: the
     * retry gives nothing twice */
    q_admin("UPDATE orders SET return_settled = false WHERE sku_id = %lld", 20);
    ck_assert_int_eq(sweep(), 0);
    ck_assert_int_eq(th_sku_int(20, KEY_STOCK), 10);
    ck_assert_int_eq(redis_held(20, 1), 0);
    th_assert_invariants(20);
}
END_TEST

/* Redis rebuilt from the database after the return committed: the rebuilt
 * state has the units already, and the late settle must not add them again. */
START_TEST(test_return_settled_after_a_rebuild_is_not_doubled)
{
    create_sku(21, 10, 3, 600);
    (void)reserve(21, 1, 3);
    write_all(21);
    make_due(21);
    expire_without_redis(21);
    struct worker_ctx w;
    ctx_open(&w);
    ck_assert_int_eq(sku_rebuild(&w, 21, "test"), SKU_OK);
    worker_ctx_close(&w);
    ck_assert_int_eq(th_sku_int(21, KEY_STOCK), 10);
    ck_assert_int_eq(sweep(), 0);
    ck_assert_int_eq(th_sku_int(21, KEY_STOCK), 10);
    th_assert_invariants(21);
}
END_TEST

/* The reverse: Redis rebuilt while the order was confirmed, then cancelled:
 * the rebuilt state counted its units, so they come back to it. */
START_TEST(test_return_after_a_rebuild_reaches_the_rebuilt_state)
{
    create_sku(22, 10, 3, 600);
    int64_t a = reserve(22, 1, 3);
    write_all(22);
    struct worker_ctx w;
    ctx_open(&w);
    ck_assert_int_eq(sku_rebuild(&w, 22, "test"), SKU_OK);
    worker_ctx_close(&w);
    ck_assert_int_eq(th_sku_int(22, KEY_STOCK), 7);
    ck_assert_int_eq(redis_held(22, 1), 3);
    ck_assert_int_eq(cancel(a, 1), LIFE_OK);
    ck_assert_int_eq(th_sku_int(22, KEY_STOCK), 10);
    ck_assert_int_eq(redis_held(22, 1), 0);
    th_assert_invariants(22);
}
END_TEST

/* ---- through the daemon ----------------------------------------------------- */

static int post_buyer(int port, const char *path, int64_t user, struct th_response *out)
{
    char auth[TH_BUYER_AUTH_MAX];
    th_buyer_auth(user, auth, sizeof auth);
    ck_assert_int_eq(th_http(port, "POST", path, auth, NULL, out), 0);
    return out->status;
}

/* Creates a SKU with a payment window through the admin API; asserts 201. */
static void http_create_sku(int port, int64_t id, int64_t stock, int limit, int64_t window_s,
                            struct th_response *res)
{
    char body[192];
    snprintf(body, sizeof body,
             "{\"id\":%lld,\"name\":\"life\",\"stock\":%lld,\"per_user_limit\":%d,"
             "\"payment_window_s\":%lld}",
             (long long)id, (long long)stock, limit, (long long)window_s);
    ck_assert_int_eq(th_admin(port, "POST", "/admin/v1/skus", body, res), 0);
    ck_assert_int_eq(res->status, 201);
}

START_TEST(test_http_lifecycle_answers_and_metrics)
{
    struct th_daemon d;
    th_daemon_start(&d, (const char *const[]){"SECKILL_EXPIRY_SWEEP_INTERVAL_MS=100", NULL});
    struct th_response res;
    http_create_sku(d.port, 30, 10, 2, 600, &res);
    ck_assert_int_eq(th_json_int(res.body, "payment_window_s", -1), 600);
    int64_t ids[3];
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(th_order(d.port, 30, 40 + i, 1, NULL, &res), 201);
        ids[i] = th_json_int(res.body, "order_id", 0);
    }
    char path[96], body[96];
    /* the lookup shows the deadline */
    char auth[TH_BUYER_AUTH_MAX];
    th_buyer_auth(40, auth, sizeof auth);
    snprintf(path, sizeof path, "/api/v1/orders/%lld", (long long)ids[0]);
    ck_assert_int_eq(th_http(d.port, "GET", path, auth, NULL, &res), 0);
    ck_assert_int_eq(res.status, 200);
    ck_assert_ptr_nonnull(strstr(res.body, "\"expires_at\""));
    /* pay the first, cancel the second, let the third expire */
    snprintf(path, sizeof path, "/admin/v1/orders/%lld/payment", (long long)ids[0]);
    ck_assert_int_eq(th_admin(d.port, "POST", path, "{\"payment_ref\":\"r0\"}", &res), 0);
    ck_assert_int_eq(res.status, 200);
    ck_assert_ptr_nonnull(strstr(res.body, "\"paid_at\""));
    ck_assert_int_eq(th_admin(d.port, "POST", path, "{\"payment_ref\":\"r 0\"}", &res), 0);
    ck_assert_int_eq(res.status, 400);
    snprintf(path, sizeof path, "/api/v1/orders/%lld/cancel", (long long)ids[1]);
    ck_assert_int_eq(post_buyer(d.port, path, 41, &res), 200);
    ck_assert_ptr_nonnull(strstr(res.body, "\"cancelled_at\""));
    ck_assert_int_eq(post_buyer(d.port, path, 40, &res), 404); /* not theirs */
    snprintf(path, sizeof path, "/api/v1/orders/%lld/cancel", (long long)ids[0]);
    ck_assert_int_eq(post_buyer(d.port, path, 40, &res), 409);
    th_json_str(res.body, "status", body, sizeof body);
    ck_assert_str_eq(body, "paid");
    make_due(30);
    for (int i = 0; i < 50; i++) {
        if (q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND status = 'expired'", 30))
            break;
        th_sleep_ms(100);
    }
    char st[16];
    ck_assert_str_eq(status_of(ids[2], st, sizeof st), "expired");
    /* the payment window can change, for orders confirmed from now on */
    ck_assert_int_eq(
        th_admin(d.port, "PATCH", "/admin/v1/skus/30", "{\"payment_window_s\":0}", &res), 0);
    ck_assert_int_eq(res.status, 200);
    ck_assert_int_eq(th_json_int(res.body, "payment_window_s", -1), 0);
    ck_assert_int_eq(th_json_int(res.body, "expired_orders", -1), 1);
    ck_assert_int_eq(th_order(d.port, 30, 50, 1, NULL, &res), 201);
    ck_assert_int_eq(q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND user_id = 50 AND "
                           "expires_at IS NULL",
                           30),
                     1);
    ck_assert_int_eq(th_http(d.port, "GET", "/metrics", NULL, NULL, &res), 0);
    ck_assert_ptr_nonnull(
        strstr(res.body, "seckill_order_transitions_total{from=\"confirmed\",to=\"paid\"} 1"));
    ck_assert_ptr_nonnull(
        strstr(res.body, "seckill_order_transitions_total{from=\"confirmed\",to=\"cancelled\"} 1"));
    ck_assert_ptr_nonnull(
        strstr(res.body, "seckill_order_transitions_total{from=\"confirmed\",to=\"expired\"} 1"));
    ck_assert_ptr_nonnull(
        strstr(res.body, "seckill_order_transitions_total{from=\"pending\",to=\"confirmed\"} 4"));
    ck_assert_ptr_nonnull(
        strstr(res.body, "seckill_order_transitions_total{from=\"pending\",to=\"rejected\"} 0"));
    ck_assert_int_eq(th_daemon_stop(&d), 0);
    th_assert_invariants(30);
}
END_TEST

/* The state letter of /proc/<pid>/stat ('T' once stopped), '?' if unreadable. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    return p && p[1] == ' ' && p[2] ? p[2] : '?';
}

/* Two seckilld processes, each with its own sweeper, over the same returns.
 * The first (SECKILL_FAULT=release_before_settled) expires the orders, gives
 * their units to Redis and stops itself, the SKU's lock released, before it
 * marks them settled.  The second's sweeper then finds them unsettled and
 * gives them to Redis again: order_release.lua must give nothing twice.  The
 * first, continued, marks them settled.  Every unit comes back once, to
 * PostgreSQL (one 'return' ledger row per order) and to Redis. */
#define TWO_SKU 60
#define TWO_ORDERS 40
START_TEST(test_two_daemons_return_each_unit_once)
{
    struct th_daemon a, b;
    th_daemon_start(&a, (const char *const[]){"SECKILL_EXPIRY_SWEEP_INTERVAL_MS=10",
                                              "SECKILL_FAULT=release_before_settled", NULL});
    struct th_response res;
    http_create_sku(a.port, TWO_SKU, TWO_ORDERS, 1, 600, &res);
    for (int i = 0; i < TWO_ORDERS; i++)
        ck_assert_int_eq(th_order(a.port, TWO_SKU, 100 + i, 1, NULL, &res), 201);
    ck_assert_int_eq(th_sku_int(TWO_SKU, KEY_STOCK), 0);
    make_due(TWO_SKU);
    int i;
    for (i = 0; i < 100 && proc_state(a.pid) != 'T'; i++) /* 10 s */
        th_sleep_ms(100);
    ck_assert_msg(i < 100, "the first daemon never stopped between the return and its settling");
    const char *unsettled = "SELECT count(*) FROM orders WHERE sku_id = %lld AND "
                            "return_settled = false";
    ck_assert_int_eq(
        q_int("SELECT count(*) FROM orders WHERE sku_id = %lld AND status = 'expired'", TWO_SKU),
        TWO_ORDERS);
    ck_assert_int_eq(q_int(unsettled, TWO_SKU), TWO_ORDERS);
    ck_assert_int_eq(th_sku_int(TWO_SKU, KEY_STOCK), TWO_ORDERS); /* given, not yet settled */

    th_daemon_start(&b, (const char *const[]){"SECKILL_EXPIRY_SWEEP_INTERVAL_MS=10", NULL});
    for (i = 0; i < 100 && q_int(unsettled, TWO_SKU) > 0; i++)
        th_sleep_ms(100);
    ck_assert_int_eq(q_int(unsettled, TWO_SKU), 0);
    ck_assert_int_eq(th_metric(b.port, "seckill_returns_settled_late_total"), TWO_ORDERS);
    ck_assert_int_eq(th_sku_int(TWO_SKU, KEY_STOCK), TWO_ORDERS); /* not twice */

    ck_assert_int_eq(kill(a.pid, SIGCONT), 0);
    for (i = 0; i < 100 && proc_state(a.pid) == 'T'; i++)
        th_sleep_ms(100);
    const char *expired = "seckill_order_transitions_total{from=\"confirmed\",to=\"expired\"}";
    ck_assert_int_eq(th_metric(a.port, expired), TWO_ORDERS);
    ck_assert_int_eq(th_metric(b.port, expired), 0);
    ck_assert_int_eq(th_daemon_stop(&b), 0);
    ck_assert_int_eq(th_daemon_stop(&a), 0);
    ck_assert_int_eq(th_sku_int(TWO_SKU, KEY_STOCK), TWO_ORDERS);
    ck_assert_int_eq(q_int("SELECT count(*) FROM stock_ledger WHERE sku_id = %lld AND kind = "
                           "'return'",
                           TWO_SKU),
                     TWO_ORDERS);
    ck_assert_int_eq(q_int("SELECT stock FROM skus WHERE id = %lld", TWO_SKU), TWO_ORDERS);
    /* every buyer's unit came back to them once: each may buy again */
    for (int u = 0; u < TWO_ORDERS; u++)
        ck_assert_int_eq(redis_held(TWO_SKU, 100 + u), 0);
    th_assert_invariants(TWO_SKU);
}
END_TEST

/* The payment system's own token (payment_token) pays an order and opens
 * nothing else of the admin API; the admin token still pays too. */
#define PAY_TOKEN "test-payment-token-0123456789abcdef"
START_TEST(test_payment_token_pays_and_nothing_else)
{
    struct th_daemon d;
    th_daemon_start(&d, (const char *const[]){"SECKILL_PAYMENT_TOKEN=" PAY_TOKEN, NULL});
    struct th_response res;
    ck_assert_int_eq(th_admin(d.port, "POST", "/admin/v1/skus",
                              "{\"id\":31,\"name\":\"pay\",\"stock\":10,\"per_user_limit\":1,"
                              "\"payment_window_s\":600}",
                              &res),
                     0);
    ck_assert_int_eq(res.status, 201);
    int64_t ids[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(th_order(d.port, 31, 60 + i, 1, NULL, &res), 201);
        ids[i] = th_json_int(res.body, "order_id", 0);
    }
    const char *pay_auth =
        "Authorization: Bearer " PAY_TOKEN "\r\nContent-Type: application/json\r\n";
    char path[96];
    snprintf(path, sizeof path, "/admin/v1/orders/%lld/payment", (long long)ids[0]);
    ck_assert_int_eq(th_http(d.port, "POST", path, pay_auth, "{\"payment_ref\":\"p0\"}", &res), 0);
    ck_assert_int_eq(res.status, 200);
    /* every other admin route refuses it, as any wrong token */
    ck_assert_int_eq(th_http(d.port, "POST", "/admin/v1/skus", pay_auth,
                             "{\"id\":32,\"name\":\"x\",\"stock\":1,\"per_user_limit\":1}", &res),
                     0);
    ck_assert_int_eq(res.status, 401);
    ck_assert_int_eq(th_http(d.port, "POST", "/admin/v1/skus/31/stock-adjustments", pay_auth,
                             "{\"delta\":5}", &res),
                     0);
    ck_assert_int_eq(res.status, 401);
    ck_assert_int_eq(th_http(d.port, "GET", "/admin/v1/nowhere", pay_auth, NULL, &res), 0);
    ck_assert_int_eq(res.status, 401); /* no hint of what exists */
    /* the admin token pays as before */
    snprintf(path, sizeof path, "/admin/v1/orders/%lld/payment", (long long)ids[1]);
    ck_assert_int_eq(th_admin(d.port, "POST", path, "{\"payment_ref\":\"p1\"}", &res), 0);
    ck_assert_int_eq(res.status, 200);
    ck_assert_int_eq(th_daemon_stop(&d), 0);
    th_assert_invariants(31);
}
END_TEST

/* A SKU sold out on this instance (its local flag set) sells the unit a
 * cancel gave back at once: the cancel clears the flag here, and Redis and
 * the database both have the unit again. */
START_TEST(test_cancel_reopens_a_sold_out_sku)
{
    struct th_daemon d;
    th_daemon_start(&d, (const char *const[]){"SECKILL_SOLD_OUT_FLAG_MS=10000", NULL});
    struct th_response res;
    ck_assert_int_eq(th_admin(d.port, "POST", "/admin/v1/skus",
                              "{\"id\":31,\"name\":\"one\",\"stock\":1,\"per_user_limit\":1,"
                              "\"payment_window_s\":600}",
                              &res),
                     0);
    ck_assert_int_eq(res.status, 201);
    ck_assert_int_eq(th_order(d.port, 31, 60, 1, NULL, &res), 201);
    int64_t id = th_json_int(res.body, "order_id", 0);
    ck_assert_int_eq(th_order(d.port, 31, 61, 1, NULL, &res), 409); /* sets the flag */
    ck_assert_int_eq(th_order(d.port, 31, 62, 1, NULL, &res), 409); /* from the flag */
    char path[96];
    snprintf(path, sizeof path, "/api/v1/orders/%lld/cancel", (long long)id);
    ck_assert_int_eq(post_buyer(d.port, path, 60, &res), 200);
    /* within the flag's 10 s: only the cleared flag lets this through */
    ck_assert_int_eq(th_order(d.port, 31, 61, 1, NULL, &res), 201);
    ck_assert_int_eq(th_order(d.port, 31, 60, 1, NULL, &res), 409);
    ck_assert_int_eq(th_daemon_stop(&d), 0);
    th_assert_invariants(31);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("lifecycle");
    TCase *tc = tcase_create("lifecycle");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cancel_confirmed_returns_units_once);
    tcase_add_test(tc, test_pay_is_idempotent_on_its_reference);
    tcase_add_test(tc, test_without_a_window_confirmed_is_final_and_never_expires);
    tcase_add_test(tc, test_pending_cancel_is_written_as_cancelled);
    tcase_add_test(tc, test_expiry_returns_units_and_refuses_late_payment);
    tcase_add_test(tc, test_sweeps_take_turns_over_the_skus);
    tcase_add_test(tc, test_pay_racing_expiry_ends_in_one_state);
    tcase_add_test(tc, test_cancel_racing_expiry_returns_once);
    tcase_add_test(tc, test_two_sweepers_expire_each_order_once);
    tcase_add_test(tc, test_return_left_by_a_dead_process_is_settled_once);
    tcase_add_test(tc, test_return_settled_after_a_rebuild_is_not_doubled);
    tcase_add_test(tc, test_return_after_a_rebuild_reaches_the_rebuilt_state);
    tcase_add_test(tc, test_http_lifecycle_answers_and_metrics);
    tcase_add_test(tc, test_two_daemons_return_each_unit_once);
    tcase_add_test(tc, test_payment_token_pays_and_nothing_else);
    tcase_add_test(tc, test_cancel_reopens_a_sold_out_sku);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run(suite());
}
