/*
 * Many buyers at once against the real daemon, Redis and PostgreSQL: nothing
 * oversold, nothing duplicated, nothing lost, proven from the database.
 */
#include <check.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/keys.h"
#include "harness.h"

#define BUYERS 1000

struct buyer {
    struct load *load;
    struct evhttp_connection *conn;
    int status;
    long long order_id;
    int64_t qty;
};

struct load {
    struct event_base *base;
    int outstanding;
    struct buyer *buyers;
};

static void on_answer(struct evhttp_request *req, void *arg)
{
    struct buyer *b = arg;
    b->status = req ? evhttp_request_get_response_code(req) : -1;
    if (req && (b->status == 201 || b->status == 409)) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        char *body = calloc(1, n + 1);
        evbuffer_copyout(in, body, n);
        b->order_id = th_json_int(body, "order_id", 0);
        free(body);
    }
    if (--b->load->outstanding == 0)
        event_base_loopbreak(b->load->base);
}

/* Fires n orders at once, one connection each (all in flight together), for
 * users first_user.. (order i by first_user + i % users; users 0: n) with
 * quantities from qty_of(i).  Fills buyers[]. */
static void fire(int port, int64_t sku, struct buyer *buyers, int n, int64_t first_user, int users,
                 int64_t (*qty_of)(int))
{
    if (users <= 0)
        users = n;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct load load = {event_base_new(), n, buyers};
    char path[64];
    snprintf(path, sizeof path, "/api/v1/skus/%lld/orders", (long long)sku);
    for (int i = 0; i < n; i++) {
        struct buyer *b = &buyers[i];
        b->load = &load;
        b->qty = qty_of ? qty_of(i) : 1;
        b->conn = evhttp_connection_base_new(load.base, NULL, "127.0.0.1", (ev_uint16_t)port);
        ck_assert(b->conn != NULL);
        evhttp_connection_set_timeout(b->conn, 60);
        struct evhttp_request *req = evhttp_request_new(on_answer, b);
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        evhttp_add_header(h, "Host", "127.0.0.1");
        evhttp_add_header(h, "Content-Type", "application/json");
        char token[TH_BUYER_AUTH_MAX], auth[TH_BUYER_AUTH_MAX + 8];
        int64_t user = first_user + i % users;
        snprintf(auth, sizeof auth, "Bearer %s", th_buyer_token(user, token, sizeof token));
        evhttp_add_header(h, "Authorization", auth);
        char body[96];
        snprintf(body, sizeof body, "{\"user_id\":%lld,\"qty\":%lld}", (long long)user,
                 (long long)b->qty);
        evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
        ck_assert_int_eq(evhttp_make_request(b->conn, req, EVHTTP_REQ_POST, path), 0);
    }
    event_base_dispatch(load.base);
    for (int i = 0; i < n; i++)
        evhttp_connection_free(buyers[i].conn);
    event_base_free(load.base);
}

/* Every 201 (durable mode: committed) is exactly one confirmed row, every 409
 * that names an order (the database refused what Redis reserved) one rejected
 * row; no row without such an answer. */
static long long check_orders(int64_t sku, struct buyer *b, int n)
{
    PGconn *c = th_pg();
    long long accepted_units = 0, rows = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(b[i].status == 201 || b[i].status == 409, "buyer %d got %d", i, b[i].status);
        if (b[i].order_id <= 0)
            continue;
        int ok = b[i].status == 201;
        rows++;
        accepted_units += ok ? b[i].qty : 0;
        char q[200];
        snprintf(q, sizeof q,
                 "SELECT count(*) FROM orders WHERE id = %lld AND qty = %lld AND status = '%s'",
                 b[i].order_id, (long long)b[i].qty, ok ? "confirmed" : "rejected");
        ck_assert_msg(th_pg_int(c, q) == 1, "order %lld of a %d is not exactly one %s row",
                      b[i].order_id, b[i].status, ok ? "confirmed" : "rejected");
    }
    char q[160];
    snprintf(q, sizeof q, "SELECT count(*) FROM orders WHERE sku_id = %lld", (long long)sku);
    ck_assert_int_eq(th_pg_int(c, q), rows);
    PQfinish(c);
    return accepted_units;
}

START_TEST(test_thousand_buyers_for_hundred_units_sell_exactly_hundred)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 1, 100, 1);
    struct buyer *b = calloc(BUYERS, sizeof *b);
    fire(d.port, 1, b, BUYERS, 1, 0, NULL);
    th_wait_drained(1, 30000);

    long long sold = check_orders(1, b, BUYERS);
    ck_assert_int_eq(sold, 100);
    PGconn *c = th_pg();
    ck_assert_int_eq(th_pg_int(c, "SELECT stock FROM skus WHERE id = 1"), 0);
    ck_assert_int_eq(th_pg_int(c, "SELECT count(*) FROM orders WHERE status = 'confirmed'"), 100);
    PQfinish(c);
    char key[KEYS_MAX];
    keys_sku(key, 1, KEY_STOCK);
    redisContext *r = th_redis();
    ck_assert_int_eq(th_redis_int(r, key), 0);
    redisFree(r);
    th_assert_invariants(1);
    free(b);
    th_daemon_stop(&d);
}
END_TEST

static int64_t mixed_qty(int i)
{
    return 1 + i % 3;
}

START_TEST(test_limit_holds_when_each_user_sends_many_orders_at_once)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 2, 1000, 3);
    /* 50 users, 8 concurrent orders each of 1-3 units: at most 3 units per user. */
    enum { USERS = 50, EACH = 8 };
    struct buyer *b = calloc(USERS * EACH, sizeof *b);
    for (int k = 0; k < EACH; k++)
        fire(d.port, 2, b + k * USERS, USERS, 1, 0, mixed_qty);
    th_wait_drained(2, 30000);
    check_orders(2, b, USERS * EACH);
    th_assert_invariants(2);
    free(b);
    th_daemon_stop(&d);
}
END_TEST

struct admin_race {
    int port;
    int64_t sku;
    long long applied; /* sum of the deltas answered 200 */
    int refused;
};

static void *admin_deltas(void *arg)
{
    struct admin_race *a = arg;
    static const int deltas[] = {+7, -3, +5, -8, +2, -1, +10, -6, +4, -2};
    char path[96];
    snprintf(path, sizeof path, "/admin/v1/skus/%lld/stock-adjustments", (long long)a->sku);
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof deltas / sizeof deltas[0]; i++) {
            char body[96];
            snprintf(body, sizeof body, "{\"delta\":%d,\"reason\":\"race %d\"}", deltas[i], round);
            struct th_response r;
            if (th_admin(a->port, "POST", path, body, &r) != 0)
                continue;
            if (r.status == 200)
                a->applied += deltas[i];
            else if (r.status == 409)
                a->refused++;
        }
    return NULL;
}

START_TEST(test_admin_deltas_racing_buyers_keep_stock_exact)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 3, 60, 5);
    struct admin_race a = {d.port, 3, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, admin_deltas, &a);
    struct buyer *b = calloc(600, sizeof *b);
    for (int wave = 0; wave < 3; wave++)
        fire(d.port, 3, b + wave * 200, 200, 1 + wave * 200, 0, mixed_qty);
    pthread_join(t, NULL);
    th_wait_drained(3, 30000);

    long long sold = check_orders(3, b, 600);
    PGconn *c = th_pg();
    long long stock = th_pg_int(c, "SELECT stock FROM skus WHERE id = 3");
    long long ledger_admin = th_pg_int(
        c, "SELECT coalesce(sum(delta), 0) FROM stock_ledger WHERE sku_id = 3 AND kind = 'admin'");
    PQfinish(c);
    /* Every delta the API accepted is in the ledger; none it refused is. */
    ck_assert_int_eq(ledger_admin, a.applied);
    ck_assert_int_eq(stock, 60 + a.applied - sold);
    th_assert_invariants(3);
    free(b);
    th_daemon_stop(&d);
}
END_TEST

/* Orders of one loop turn go to Redis together (reserve_batch_max a call):
 * buyers who appear several times in a batch, stock that runs out inside
 * one, and still nothing oversold, no buyer over the limit, every answer one
 * row. */
START_TEST(test_batched_orders_never_oversell)
{
    th_reset();
    struct th_daemon d;
    const char *const env[] = {"SECKILL_RESERVE_BATCH_MAX=8", NULL};
    th_daemon_start(&d, env);
    th_create_sku(d.port, 3, 150, 2);
    long long calls = th_metric(d.port, "seckill_reserve_calls_total");
    long long orders = th_metric(d.port, "seckill_reserve_call_orders_total");
    /* 300 buyers, each three times among 900 orders at once, 1-3 units each */
    enum { ORDERS = 900, USERS = 300 };
    struct buyer *b = calloc(ORDERS, sizeof *b);
    fire(d.port, 3, b, ORDERS, 1, USERS, mixed_qty);
    th_wait_drained(3, 30000);
    long long sold = check_orders(3, b, ORDERS);
    ck_assert_int_eq(sold, 150); /* far more asked than held: all of it, no more */
    th_assert_invariants(3);
    calls = th_metric(d.port, "seckill_reserve_calls_total") - calls;
    orders = th_metric(d.port, "seckill_reserve_call_orders_total") - orders;
    /* the orders Redis saw (the rest were answered by the sold-out flag)
     * went in fewer calls than orders, never more than 8 a call */
    ck_assert_int_le(orders, ORDERS);
    ck_assert_msg(calls < orders, "%lld orders in %lld calls: none batched", orders, calls);
    ck_assert_int_ge(calls * 8, orders);
    fprintf(stderr, "batched: %lld orders in %lld reserve calls\n", orders, calls);
    free(b);
    th_daemon_stop(&d);
}
END_TEST

static Suite *concurrency_suite(void)
{
    Suite *s = suite_create("concurrency");
    TCase *tc = tcase_create("buyers");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_thousand_buyers_for_hundred_units_sell_exactly_hundred);
    tcase_add_test(tc, test_limit_holds_when_each_user_sends_many_orders_at_once);
    tcase_add_test(tc, test_admin_deltas_racing_buyers_keep_stock_exact);
    tcase_add_test(tc, test_batched_orders_never_oversell);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(concurrency_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
