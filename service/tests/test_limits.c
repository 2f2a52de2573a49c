/*
 * Rate limits, asked of the real daemon against the real Redis and
 * PostgreSQL: a buyer's orders on one SKU (kept in Redis, so shared by
 * instances), the buyer API per client address, and failed admin
 * authentications per address.  The harness turns every limit off; each test
 * here sets the ones it proves, tight.
 *
 * No assertion depends on speed: buckets that must stay empty refill once a
 * minute, and the bound on what passed grows with the time the test took;
 * refills are waited for with a bound.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/clock.h"
#include "core/keys.h"
#include "harness.h"

#define CT_JSON "Content-Type: application/json\r\n"
#define DRAIN_MS 15000
#define REFILL_WAIT_MS 15000
#define POLL_MS 50
#define WRONG_TOKEN "Authorization: Bearer not-the-admin-token\r\n"
#define RIGHT_TOKEN "Authorization: Bearer " TH_ADMIN_TOKEN "\r\n"

/* ---- helpers ------------------------------------------------------------- */

static void req(int port, const char *method, const char *path, const char *headers,
                const char *body, struct th_response *r)
{
    ck_assert_msg(th_http(port, method, path, headers, body, r) == 0, "%s %s: no HTTP answer",
                  method, path);
}

/* One order of 1 unit of sku by user, with an Idempotency-Key unless NULL. */
static void order(int port, long long sku, long long user, const char *idem, struct th_response *r)
{
    char path[64], body[64], auth[TH_BUYER_AUTH_MAX], headers[TH_BUYER_AUTH_MAX + 256];
    snprintf(path, sizeof path, "/api/v1/skus/%lld/orders", sku);
    snprintf(body, sizeof body, "{\"user_id\":%lld,\"qty\":1}", user);
    snprintf(headers, sizeof headers, CT_JSON "%s%s%s%s", th_buyer_auth(user, auth, sizeof auth),
             idem ? "Idempotency-Key: " : "", idem ? idem : "", idem ? "\r\n" : "");
    req(port, "POST", path, headers, body, r);
}

/* GET of an order as buyer 1 (a buyer token is needed; a missing order is 404). */
static void lookup(int port, const char *path, struct th_response *r)
{
    char auth[TH_BUYER_AUTH_MAX];
    req(port, "GET", path, th_buyer_auth(1, auth, sizeof auth), NULL, r);
}

static int accepted(const struct th_response *r)
{
    return r->status == 201 || r->status == 202;
}

/* Asserts r is a 429 rate_limited with a Retry-After of 1..max_s seconds. */
static void assert_limited(const struct th_response *r, long long max_s)
{
    ck_assert_msg(r->status == 429, "expected 429, got %d %s", r->status, r->body);
    char code[32];
    th_json_str(r->body, "error", code, sizeof code);
    ck_assert_str_eq(code, "rate_limited");
    long long secs = -1;
    for (const char *line = r->headers; *line;) {
        if (strncasecmp(line, "Retry-After:", 12) == 0)
            secs = atoll(line + 12);
        const char *next = strstr(line, "\r\n");
        if (!next)
            break;
        line = next + 2;
    }
    ck_assert_msg(secs >= 1 && secs <= max_s, "Retry-After %lld, want 1..%lld (headers: %s)", secs,
                  max_s, r->headers);
}

/* Orders, units, in the database for sku. */
static long long db_orders(long long sku)
{
    char q[128];
    snprintf(q, sizeof q, "SELECT count(*) FROM orders WHERE sku_id = %lld", sku);
    PGconn *c = th_pg();
    long long n = th_pg_int(c, q);
    PQfinish(c);
    return n;
}

/* ---- a buyer's orders on one SKU ---------------------------------------- */

START_TEST(test_a_buyer_past_the_burst_gets_429_and_the_refused_take_nothing)
{
    th_reset();
    const char *env[] = {"SECKILL_RATE_BUYER_ORDERS_PER_MIN=1", "SECKILL_RATE_BUYER_ORDERS_BURST=5",
                         NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 1, 1000, 1000);
    long long t0 = clock_mono_ms();
    int ok = 0, limited = 0;
    for (int i = 0; i < 300; i++) {
        struct th_response r;
        order(d.port, 1, 7, NULL, &r);
        if (i < 5)
            ck_assert_msg(accepted(&r), "order %d of a full bucket: %d %s", i, r.status, r.body);
        if (accepted(&r)) {
            ok++;
        } else {
            assert_limited(&r, 60); /* one order a minute */
            limited++;
        }
    }
    long long minutes = (clock_mono_ms() - t0) / 60000;
    ck_assert_msg(ok <= 5 + 1 + minutes, "%d orders passed a bucket of 5 refilled once a minute",
                  ok);
    ck_assert_int_eq(ok + limited, 300);
    /* the bucket is the buyer's: another buyer orders freely */
    struct th_response r;
    order(d.port, 1, 8, NULL, &r);
    ck_assert_msg(accepted(&r), "another buyer: %d %s", r.status, r.body);

    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(db_orders(1), ok + 1); /* a 429 is no order */
    char key[KEYS_MAX];
    keys_sku(key, 1, KEY_STOCK);
    redisContext *rc = th_redis();
    ck_assert_int_eq(th_redis_int(rc, key), 1000 - (ok + 1)); /* nor any stock */
    redisFree(rc);
    th_assert_invariants(1);
    ck_assert_int_eq(th_metric(d.port, "seckill_rate_limited_total{scope=\"buyer\"}"), limited);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_the_buyer_bucket_holds_across_two_instances)
{
    th_reset();
    const char *env[] = {"SECKILL_RATE_BUYER_ORDERS_PER_MIN=1", "SECKILL_RATE_BUYER_ORDERS_BURST=4",
                         NULL};
    struct th_daemon a, b;
    th_daemon_start(&a, env);
    th_daemon_start(&b, env);
    th_create_sku(a.port, 2, 100, 100);
    long long t0 = clock_mono_ms();
    int ok = 0, limited_a = 0, limited_b = 0;
    for (int i = 0; i < 20; i++) {
        struct th_daemon *d = i % 2 ? &b : &a;
        struct th_response r;
        order(d->port, 2, 9, NULL, &r);
        if (accepted(&r)) {
            ok++;
            continue;
        }
        assert_limited(&r, 60);
        *(d == &a ? &limited_a : &limited_b) += 1;
    }
    /* Two buckets of 4 would have let 8 through. */
    long long minutes = (clock_mono_ms() - t0) / 60000;
    ck_assert_msg(ok >= 4 && ok <= 4 + 1 + minutes, "%d orders passed one bucket of 4 shared", ok);
    ck_assert_msg(limited_a > 0 && limited_b > 0, "both instances refuse: %d, %d", limited_a,
                  limited_b);
    th_wait_drained(2, DRAIN_MS);
    ck_assert_int_eq(db_orders(2), ok);
    th_assert_invariants(2);
    th_daemon_stop(&a);
    th_daemon_stop(&b);
}
END_TEST

START_TEST(test_an_idempotency_replay_takes_no_token_and_a_429_is_not_remembered)
{
    th_reset();
    const char *env[] = {"SECKILL_RATE_BUYER_ORDERS_PER_MIN=1", "SECKILL_RATE_BUYER_ORDERS_BURST=2",
                         NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 3, 100, 100);
    struct th_response first, r;
    order(d.port, 3, 11, "key-one", &first);
    ck_assert_msg(accepted(&first), "%d %s", first.status, first.body);
    long long id = th_json_int(first.body, "order_id", 0);
    for (int i = 0; i < 10; i++) {
        order(d.port, 3, 11, "key-one", &r);
        ck_assert_msg(accepted(&r), "replay %d: %d %s", i, r.status, r.body);
        ck_assert_int_eq(th_json_int(r.body, "order_id", 0), id);
    }
    /* ten replays later the bucket of 2 still has its second order */
    order(d.port, 3, 11, "key-two", &r);
    ck_assert_msg(accepted(&r), "the second order of the bucket: %d %s", r.status, r.body);
    long long t_empty = clock_mono_ms();
    order(d.port, 3, 11, "key-three", &r);
    int passed = accepted(&r); /* only if a minute went by: one order a minute */
    if (!passed || clock_mono_ms() - t_empty < 60000)
        assert_limited(&r, 60);
    /* a replay is answered from its stored result even with the bucket empty */
    order(d.port, 3, 11, "key-one", &r);
    ck_assert_msg(accepted(&r), "replay with an empty bucket: %d %s", r.status, r.body);
    ck_assert_int_eq(th_json_int(r.body, "order_id", 0), id);
    /* the 429 left nothing under its key: a retry may pass later */
    char key[KEYS_MAX];
    keys_idem(key, 3, 11, "key-three");
    redisContext *rc = th_redis();
    redisReply *ex = redisCommand(rc, "EXISTS %s", key);
    ck_assert(ex && ex->type == REDIS_REPLY_INTEGER);
    ck_assert_int_eq(ex->integer, passed);
    freeReplyObject(ex);
    redisFree(rc);
    th_wait_drained(3, DRAIN_MS);
    ck_assert_int_eq(db_orders(3), 2 + passed);
    th_assert_invariants(3);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_a_buyers_bucket_refills)
{
    th_reset();
    const char *env[] = {"SECKILL_RATE_BUYER_ORDERS_PER_MIN=120", /* one every 0.5 s */
                         "SECKILL_RATE_BUYER_ORDERS_BURST=1", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 4, 100, 100);
    struct th_response r;
    int limited = 0;
    for (int i = 0; i < 50 && !limited; i++) {
        order(d.port, 4, 12, NULL, &r);
        if (!accepted(&r)) {
            assert_limited(&r, 1);
            limited = 1;
        }
    }
    ck_assert_msg(limited, "50 orders in a row never met the bucket of 1");
    int again = 0;
    for (int waited = 0; waited < REFILL_WAIT_MS && !again; waited += POLL_MS) {
        th_sleep_ms(POLL_MS);
        order(d.port, 4, 12, NULL, &r);
        again = accepted(&r);
        if (!again)
            assert_limited(&r, 1);
    }
    ck_assert_msg(again, "the bucket did not refill within %d ms", REFILL_WAIT_MS);
    th_wait_drained(4, DRAIN_MS);
    th_assert_invariants(4);
    th_daemon_stop(&d);
}
END_TEST

/* ---- the buyer API per client address ------------------------------------ */

START_TEST(test_lookups_from_one_address_past_the_burst_get_429)
{
    th_reset();
    const char *env[] = {"SECKILL_RATE_ADDR_PER_S=1", "SECKILL_RATE_ADDR_BURST=10", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    long long t0 = clock_mono_ms();
    int answered = 0, limited = 0;
    for (int i = 0; i < 300; i++) {
        struct th_response r;
        lookup(d.port, "/api/v1/orders/12345", &r);
        if (i < 10)
            ck_assert_msg(r.status == 404, "lookup %d of a full bucket: %d %s", i, r.status,
                          r.body);
        if (r.status == 404) {
            answered++;
        } else {
            assert_limited(&r, 1);
            limited++;
        }
    }
    long long secs = (clock_mono_ms() - t0) / 1000;
    ck_assert_msg(answered <= 10 + 1 + secs, "%d lookups answered in %lld s, bucket 10 + 1/s",
                  answered, secs);
    ck_assert_int_eq(th_metric(d.port, "seckill_rate_limited_total{scope=\"addr\"}"), limited);
    /* health and metrics are not the buyer API: never limited */
    struct th_response h;
    req(d.port, "GET", "/healthz", NULL, NULL, &h);
    ck_assert_int_eq(h.status, 200);
    /* and the address's bucket refills */
    int again = 0;
    for (int waited = 0; waited < REFILL_WAIT_MS && !again; waited += POLL_MS) {
        th_sleep_ms(POLL_MS);
        struct th_response r;
        lookup(d.port, "/api/v1/orders/12345", &r);
        again = r.status == 404;
    }
    ck_assert_msg(again, "the address's bucket did not refill within %d ms", REFILL_WAIT_MS);
    th_daemon_stop(&d);
}
END_TEST

/* ---- failed admin authentications ---------------------------------------- */

/* Wrong tokens from one address past the burst get 429; the right token
 * from the same address is served all the same (it is compared first and
 * charges nothing), so a bystander behind the operator's address cannot
 * lock the operator out. */
START_TEST(test_the_right_admin_token_is_served_after_50_wrong_ones_from_its_address)
{
    th_reset();
    const char *env[] = {"SECKILL_ADMIN_AUTH_FAIL_PER_MIN=1", "SECKILL_ADMIN_AUTH_FAIL_BURST=5",
                         NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    const char *path = "/admin/v1/skus/1";
    struct th_response r;
    long long t0 = clock_mono_ms();
    int unauthorized = 0, limited = 0;
    for (int i = 0; i < 50; i++) {
        req(d.port, "GET", path, WRONG_TOKEN, NULL, &r);
        if (i < 5)
            ck_assert_msg(r.status == 401, "wrong token %d of a full bucket: %d", i, r.status);
        if (r.status == 401) {
            unauthorized++;
            continue;
        }
        assert_limited(&r, 60);
        limited++;
    }
    long long minutes = (clock_mono_ms() - t0) / 60000;
    ck_assert_msg(unauthorized <= 5 + 1 + minutes, "%d wrong tokens answered 401, burst 5",
                  unauthorized);
    ck_assert_msg(limited >= 50 - 6 - minutes, "only %d of 50 wrong tokens got 429", limited);
    /* the bucket is empty, and the right token is served, on any admin path */
    req(d.port, "GET", path, RIGHT_TOKEN, NULL, &r);
    ck_assert_msg(r.status == 404, "right token after 50 wrong ones: %d %s", r.status, r.body);
    req(d.port, "GET", "/admin/v1/no-such-thing", RIGHT_TOKEN, NULL, &r);
    ck_assert_msg(r.status == 404, "right token, unknown path: %d %s", r.status, r.body);
    /* and the wrong ones are still refused */
    req(d.port, "GET", path, WRONG_TOKEN, NULL, &r);
    if (clock_mono_ms() - t0 < 60000) {
        assert_limited(&r, 60);
        limited++;
    }
    /* the buyer API is another matter */
    lookup(d.port, "/api/v1/orders/1", &r);
    ck_assert_int_eq(r.status, 404);
    ck_assert_int_eq(th_metric(d.port, "seckill_rate_limited_total{scope=\"admin_auth\"}"),
                     limited);
    th_daemon_stop(&d);
}
END_TEST

/* The attack: a wrong token between each of the operator's
 * requests keeps the bucket empty; every right one is served anyway. */
START_TEST(test_wrong_and_right_admin_tokens_interleaved_every_right_one_is_served)
{
    th_reset();
    const char *env[] = {"SECKILL_ADMIN_AUTH_FAIL_PER_MIN=60", /* one a second */
                         "SECKILL_ADMIN_AUTH_FAIL_BURST=3", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    struct th_response r;
    int served = 0, limited = 0;
    for (int i = 0; i < 60; i++) {
        req(d.port, "GET", "/admin/v1/skus/1", WRONG_TOKEN, NULL, &r);
        if (r.status != 401) {
            assert_limited(&r, 1);
            limited++;
        }
        req(d.port, "GET", "/admin/v1/skus/1", RIGHT_TOKEN, NULL, &r);
        ck_assert_msg(r.status == 404, "right token %d: %d %s", i, r.status, r.body);
        served++;
        th_sleep_ms(20);
    }
    ck_assert_int_eq(served, 60);
    ck_assert_msg(limited > 0, "60 wrong tokens in about a second never met the bucket of 3");
    th_daemon_stop(&d);
}
END_TEST

#define PAY_TOKEN "test-payment-token-0123456789abcdef"
#define PAY_BODY "{\"payment_ref\":\"p0\"}"

/* POST of the payment callback of an order that does not exist. */
static void pay(int port, const char *token, struct th_response *r)
{
    char headers[256];
    snprintf(headers, sizeof headers, CT_JSON "Authorization: Bearer %s\r\n", token);
    req(port, "POST", "/admin/v1/orders/999999/payment", headers, PAY_BODY, r);
}

/* Drains the failure bucket behind 'refused' (burst 3): three 401s, then 429. */
static void exhaust(int port, void (*refused)(int, struct th_response *))
{
    struct th_response r;
    for (int i = 0; i < 3; i++) {
        refused(port, &r);
        ck_assert_msg(r.status == 401, "wrong token %d of a full bucket: %d %s", i, r.status,
                      r.body);
    }
    refused(port, &r);
    assert_limited(&r, 60);
}

static void wrong_admin(int port, struct th_response *r)
{
    req(port, "GET", "/admin/v1/skus/1", WRONG_TOKEN, NULL, r);
}

static void wrong_payment(int port, struct th_response *r)
{
    pay(port, "not-the-payment-token", r);
}

/* The payment callback's failures have a table of their own: emptying it
 * leaves the admin bucket alone, and the other way round; the right
 * payment token pays through either. */
START_TEST(test_the_payment_token_has_a_failure_bucket_of_its_own)
{
    th_reset();
    const char *env[] = {"SECKILL_PAYMENT_TOKEN=" PAY_TOKEN,  "SECKILL_ADMIN_AUTH_FAIL_PER_MIN=1",
                         "SECKILL_ADMIN_AUTH_FAIL_BURST=3",   "SECKILL_PAYMENT_AUTH_FAIL_PER_MIN=1",
                         "SECKILL_PAYMENT_AUTH_FAIL_BURST=3", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    long long t0 = clock_mono_ms();
    struct th_response r;
    exhaust(d.port, wrong_payment);
    pay(d.port, PAY_TOKEN, &r); /* compared: the order is unknown */
    ck_assert_msg(r.status == 404, "right payment token, bucket empty: %d %s", r.status, r.body);
    /* the admin bucket is untouched: its first wrong token is a 401 */
    exhaust(d.port, wrong_admin);
    pay(d.port, PAY_TOKEN, &r);
    ck_assert_msg(r.status == 404, "right payment token, both empty: %d %s", r.status, r.body);
    pay(d.port, TH_ADMIN_TOKEN, &r); /* the admin token pays too */
    ck_assert_msg(r.status == 404, "admin token pays, both empty: %d %s", r.status, r.body);
    req(d.port, "GET", "/admin/v1/skus/1", RIGHT_TOKEN, NULL, &r);
    ck_assert_msg(r.status == 404, "right admin token, both empty: %d %s", r.status, r.body);
    if (clock_mono_ms() - t0 < 60000) {
        ck_assert_int_eq(th_metric(d.port, "seckill_rate_limited_total{scope=\"payment_auth\"}"),
                         1);
        ck_assert_int_eq(th_metric(d.port, "seckill_rate_limited_total{scope=\"admin_auth\"}"), 1);
    }
    th_daemon_stop(&d);
}
END_TEST

/* Either setting of a bucket at 0 turns it off (the settings say so): a
 * burst of 0 with a rate must not refuse every request. */
START_TEST(test_a_zero_burst_turns_a_local_bucket_off)
{
    th_reset();
    const char *env[] = {"SECKILL_RATE_ADDR_PER_S=1", "SECKILL_RATE_ADDR_BURST=0",
                         "SECKILL_ADMIN_AUTH_FAIL_PER_MIN=1", "SECKILL_ADMIN_AUTH_FAIL_BURST=0",
                         NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    for (int i = 0; i < 20; i++) {
        struct th_response r;
        lookup(d.port, "/api/v1/orders/12345", &r);
        ck_assert_msg(r.status == 404, "lookup %d: %d %s", i, r.status, r.body);
        req(d.port, "GET", "/admin/v1/skus/1", WRONG_TOKEN, NULL, &r);
        ck_assert_msg(r.status == 401, "wrong admin token %d: %d %s", i, r.status, r.body);
    }
    struct th_response r;
    req(d.port, "GET", "/admin/v1/skus/1", RIGHT_TOKEN, NULL, &r);
    ck_assert_msg(r.status == 404, "right admin token: %d %s", r.status, r.body);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_the_admin_failure_bucket_refills)
{
    th_reset();
    const char *env[] = {"SECKILL_ADMIN_AUTH_FAIL_PER_MIN=60", /* one a second */
                         "SECKILL_ADMIN_AUTH_FAIL_BURST=2", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    struct th_response r;
    int limited = 0;
    for (int i = 0; i < 50 && !limited; i++) {
        req(d.port, "GET", "/admin/v1/skus/1", WRONG_TOKEN, NULL, &r);
        if (r.status != 401) {
            assert_limited(&r, 1);
            limited = 1;
        }
    }
    ck_assert_msg(limited, "50 wrong tokens in a row never met the bucket of 2");
    int again = 0;
    for (int waited = 0; waited < REFILL_WAIT_MS && !again; waited += POLL_MS) {
        th_sleep_ms(POLL_MS);
        req(d.port, "GET", "/admin/v1/skus/1", WRONG_TOKEN, NULL, &r);
        again = r.status == 401;
        if (!again)
            assert_limited(&r, 1);
    }
    ck_assert_msg(again, "a wrong token was still answered 429 after %d ms", REFILL_WAIT_MS);
    th_daemon_stop(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("limits");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_a_buyer_past_the_burst_gets_429_and_the_refused_take_nothing);
    tcase_add_test(tc, test_the_buyer_bucket_holds_across_two_instances);
    tcase_add_test(tc, test_an_idempotency_replay_takes_no_token_and_a_429_is_not_remembered);
    tcase_add_test(tc, test_a_buyers_bucket_refills);
    tcase_add_test(tc, test_lookups_from_one_address_past_the_burst_get_429);
    tcase_add_test(tc, test_the_right_admin_token_is_served_after_50_wrong_ones_from_its_address);
    tcase_add_test(tc, test_wrong_and_right_admin_tokens_interleaved_every_right_one_is_served);
    tcase_add_test(tc, test_the_payment_token_has_a_failure_bucket_of_its_own);
    tcase_add_test(tc, test_the_admin_failure_bucket_refills);
    tcase_add_test(tc, test_a_zero_burst_turns_a_local_bucket_off);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
