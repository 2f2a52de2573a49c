/*
 * Every HTTP answer of the daemon, asked of the real binary against the real
 * Redis and PostgreSQL of the test stack: status codes and bodies, and what
 * each answer left behind in both stores.
 */
#include <check.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/buyer_token.h"
#include "core/keys.h"
#include "harness.h"

#define CT_JSON "Content-Type: application/json\r\n"
#define DRAIN_MS 15000
#define POLL_MS 15000

/* ---- helpers ------------------------------------------------------------- */

static void start(struct th_daemon *d, const char *const *extra_env)
{
    th_daemon_start(d, extra_env);
}

/* Stops the daemon and asserts it shut down cleanly on SIGTERM. */
static void stop(struct th_daemon *d)
{
    int st = th_daemon_stop(d);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "seckilld did not exit cleanly (status %d)", st);
}

/* One request; a connection error fails the test. */
static void req(int port, const char *method, const char *path, const char *headers,
                const char *body, struct th_response *r)
{
    ck_assert_msg(th_http(port, method, path, headers, body, r) == 0, "%s %s: no HTTP answer",
                  method, path);
}

static void admin(int port, const char *method, const char *path, const char *body,
                  struct th_response *r)
{
    ck_assert_msg(th_admin(port, method, path, body, r) == 0, "%s %s: no HTTP answer", method,
                  path);
}

/* Asserts the status and, when 'error' is given, {"error": error}. */
static void expect(const struct th_response *r, int status, const char *error, const char *what)
{
    ck_assert_msg(r->status == status, "%s: expected %d, got %d %s", what, status, r->status,
                  r->body);
    json_t *o = json_loads(r->body, 0, NULL);
    ck_assert_msg(json_is_object(o), "%s: body is not a JSON object: %s", what, r->body);
    json_decref(o);
    if (error) {
        char e[64];
        th_json_str(r->body, "error", e, sizeof e);
        ck_assert_msg(strcmp(e, error) == 0, "%s: expected error \"%s\", got %s", what, error,
                      r->body);
    }
}

/* An error answer whose "detail" is a non-empty string. */
static void expect_detail(const struct th_response *r, int status, const char *error,
                          const char *what)
{
    expect(r, status, error, what);
    char d[256];
    th_json_str(r->body, "detail", d, sizeof d);
    ck_assert_msg(d[0] != '\0', "%s: no detail in %s", what, r->body);
}

static void expect_str(const char *body, const char *key, const char *want)
{
    char got[256];
    th_json_str(body, key, got, sizeof got);
    ck_assert_msg(strcmp(got, want) == 0, "\"%s\": expected \"%s\" in %s", key, want, body);
}

static void expect_int(const char *body, const char *key, long long want)
{
    long long got = th_json_int(body, key, -999999);
    ck_assert_msg(got == want, "\"%s\": expected %lld, got %lld in %s", key, want, got, body);
}

/* 1 if body's key is JSON true, 0 if false, -1 if absent or anything else. */
static int json_bool(const char *body, const char *key)
{
    json_t *o = json_loads(body, 0, NULL);
    json_t *v = o ? json_object_get(o, key) : NULL;
    int r = json_is_true(v) ? 1 : json_is_false(v) ? 0 : -1;
    json_decref(o);
    return r;
}

static int json_is_null_at(const char *body, const char *key)
{
    json_t *o = json_loads(body, 0, NULL);
    int r = o && json_is_null(json_object_get(o, key));
    json_decref(o);
    return r;
}

static int order(int port, int64_t sku, int64_t user, int64_t qty, const char *idem,
                 struct th_response *r)
{
    return th_order(port, sku, user, qty, idem, r);
}

/* POST of 'body' to SKU sku's orders with extra header lines (the
 * Authorization among them, or not).  Returns the status. */
static int order_raw(int port, int64_t sku, const char *headers, const char *body,
                     struct th_response *r)
{
    char path[64], h[2048];
    snprintf(path, sizeof path, "/api/v1/skus/%lld/orders", (long long)sku);
    snprintf(h, sizeof h, CT_JSON "%s", headers ? headers : "");
    req(port, "POST", path, h, body, r);
    return r->status;
}

/* GET /api/v1/orders/{id} as buyer 'user' (0: without a token).  Returns the
 * status. */
static int get_order(int port, int64_t user, long long id, struct th_response *r)
{
    char path[64], auth[TH_BUYER_AUTH_MAX];
    snprintf(path, sizeof path, "/api/v1/orders/%lld", id);
    req(port, "GET", path, user ? th_buyer_auth(user, auth, sizeof auth) : NULL, NULL, r);
    return r->status;
}

/* An order that must be accepted: 201 confirmed (durable mode, the default),
 * or 202 pending when no commit came in time (a daemon without writers).
 * Checks the body, returns the order id. */
static long long order_ok(int port, int64_t sku, int64_t user, int64_t qty)
{
    struct th_response r;
    order(port, sku, user, qty, NULL, &r);
    ck_assert_msg(r.status == 201 || r.status == 202, "order: expected 201 or 202, got %d %s",
                  r.status, r.body);
    expect(&r, r.status, NULL, "order");
    expect_str(r.body, "status", r.status == 201 ? "confirmed" : "pending");
    expect_int(r.body, "sku_id", sku);
    expect_int(r.body, "user_id", user);
    expect_int(r.body, "qty", qty);
    ck_assert_msg(json_bool(r.body, "replayed") == -1, "a first order is not a replay: %s", r.body);
    long long id = th_json_int(r.body, "order_id", 0);
    ck_assert_msg(id > 0, "no order_id in %s", r.body);
    return id;
}

static void create_sku_body(int port, const char *body, struct th_response *r)
{
    admin(port, "POST", "/admin/v1/skus", body, r);
}

/* POST a stock adjustment of sku; returns the status. */
static int adjust(int port, int64_t sku, long long delta, const char *reason, struct th_response *r)
{
    char path[96], body[256];
    snprintf(path, sizeof path, "/admin/v1/skus/%lld/stock-adjustments", (long long)sku);
    snprintf(body, sizeof body, "{\"delta\":%lld,\"reason\":\"%s\"}", delta, reason);
    admin(port, "POST", path, body, r);
    return r->status;
}

static long long redis_dbsize(void)
{
    redisContext *r = th_redis_admin(); /* DBSIZE is no command of the service */
    redisReply *rep = redisCommand(r, "DBSIZE");
    ck_assert(rep && rep->type == REDIS_REPLY_INTEGER);
    long long n = rep->integer;
    freeReplyObject(rep);
    redisFree(r);
    return n;
}

/* The single integer answer of sql, formatted like printf. */
static long long pg_int(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static long long pg_int(const char *fmt, ...)
{
    char sql[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    PGconn *c = th_pg();
    long long v = th_pg_int(c, sql);
    PQfinish(c);
    return v;
}

static long long pg_stock(int64_t sku)
{
    return pg_int("SELECT stock FROM skus WHERE id = %lld", (long long)sku);
}

/* Polls GET /api/v1/orders/{id} as its buyer 'user' (bounded) until its
 * status is 'want'; every answer on the way must be 200 with status "pending"
 * or 'want'. */
static void wait_order_status(int port, int64_t user, long long id, const char *want)
{
    for (int waited = 0;; waited += 20) {
        struct th_response r;
        get_order(port, user, id, &r);
        ck_assert_msg(r.status != 404,
                      "order %lld was accepted, yet GET answered 404 while it was being decided "
                      "(order_lookup reads the database, then the journal: see order_lookup.c): %s",
                      id, r.body);
        expect(&r, 200, NULL, "GET order");
        expect_int(r.body, "order_id", id);
        char st[32];
        th_json_str(r.body, "status", st, sizeof st);
        if (strcmp(st, want) == 0)
            return;
        ck_assert_msg(strcmp(st, "pending") == 0, "order %lld: unexpected status in %s", id,
                      r.body);
        ck_assert_msg(waited < POLL_MS, "order %lld still %s after %d ms", id, st, waited);
        th_sleep_ms(20);
    }
}

static void rfc3339(time_t t, char *out, size_t cap)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- the order path -------------------------------------------------------- */

START_TEST(test_order_accepted_then_confirmed)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);

    long long id = order_ok(d.port, 1, 7, 2);
    wait_order_status(d.port, 7, id, "confirmed");

    struct th_response r;
    get_order(d.port, 7, id, &r);
    expect(&r, 200, NULL, "GET confirmed order");
    expect_int(r.body, "sku_id", 1);
    expect_int(r.body, "user_id", 7);
    expect_int(r.body, "qty", 2);
    expect_str(r.body, "status", "confirmed");

    req(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &r);
    expect(&r, 200, NULL, "GET sku");
    expect_int(r.body, "id", 1);
    expect_int(r.body, "available", 8);
    expect_int(r.body, "per_user_limit", 5);
    expect_str(r.body, "name", "sku 1");
    ck_assert_msg(th_json_int(r.body, "db_stock", -1) == -1, "the public view shows no db_stock");

    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE id = %lld AND status = 'confirmed' "
                            "AND qty = 2 AND user_id = 7",
                            id),
                     1);
    ck_assert_int_eq(pg_stock(1), 8);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_sold_out_answers_409)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 2, 1);

    order_ok(d.port, 1, 1, 1);
    order_ok(d.port, 1, 2, 1);
    struct th_response r;
    order(d.port, 1, 3, 1, NULL, &r);
    expect(&r, 409, "sold_out", "third buyer");
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 0);

    req(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &r);
    expect(&r, 200, NULL, "GET sku");
    expect_int(r.body, "available", 0);

    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = 1"), 2);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = 1 AND user_id = 3"), 0);
    ck_assert_int_eq(pg_stock(1), 0);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_limit_exceeded_answers_409)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 100, 2);

    struct th_response r;
    order_ok(d.port, 1, 1, 1);
    order_ok(d.port, 1, 1, 1);
    order(d.port, 1, 1, 1, NULL, &r);
    expect_detail(&r, 409, "limit_exceeded", "third unit of user 1");

    order(d.port, 1, 2, 3, NULL, &r);
    expect_detail(&r, 409, "limit_exceeded", "3 units at once, limit 2");
    order_ok(d.port, 1, 2, 2); /* the limit itself is allowed */
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 96);

    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT coalesce(sum(qty), 0) FROM orders WHERE user_id = 1"), 2);
    ck_assert_int_eq(pg_int("SELECT coalesce(sum(qty), 0) FROM orders WHERE user_id = 2"), 2);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_sale_not_active_before_start_and_after_end)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    time_t now = time(NULL);
    char future[40], past_start[40], past_end[40], far[40], body[512];
    rfc3339(now + 3600, future, sizeof future);
    rfc3339(now - 7200, past_start, sizeof past_start);
    rfc3339(now - 3600, past_end, sizeof past_end);
    rfc3339(now + 7200, far, sizeof far);

    struct th_response r;
    snprintf(body, sizeof body,
             "{\"id\":1,\"name\":\"later\",\"stock\":5,\"per_user_limit\":1,"
             "\"sale_starts_at\":\"%s\"}",
             future);
    create_sku_body(d.port, body, &r);
    expect(&r, 201, NULL, "create future sale");
    char want[48];
    snprintf(want, sizeof want, "%.19s.000Z", future);
    expect_str(r.body, "sale_starts_at", want);
    ck_assert(json_is_null_at(r.body, "sale_ends_at"));

    snprintf(body, sizeof body,
             "{\"id\":2,\"name\":\"over\",\"stock\":5,\"per_user_limit\":1,"
             "\"sale_starts_at\":\"%s\",\"sale_ends_at\":\"%s\"}",
             past_start, past_end);
    create_sku_body(d.port, body, &r);
    expect(&r, 201, NULL, "create ended sale");

    snprintf(body, sizeof body,
             "{\"id\":3,\"name\":\"open\",\"stock\":5,\"per_user_limit\":1,"
             "\"sale_starts_at\":\"%s\",\"sale_ends_at\":\"%s\"}",
             past_start, far);
    create_sku_body(d.port, body, &r);
    expect(&r, 201, NULL, "create open sale");

    order(d.port, 1, 1, 1, NULL, &r);
    expect(&r, 409, "sale_not_active", "before the start");
    order(d.port, 2, 1, 1, NULL, &r);
    expect(&r, 409, "sale_not_active", "after the end");
    order_ok(d.port, 3, 1, 1); /* inside the window */

    req(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &r);
    expect(&r, 200, NULL, "GET future sku");
    expect_str(r.body, "sale_starts_at", want);
    expect_int(r.body, "available", 5);

    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 5);
    ck_assert_int_eq(th_sku_int(2, KEY_STOCK), 5);
    ck_assert_int_eq(th_stream_len(1), 0);
    ck_assert_int_eq(th_stream_len(2), 0);
    th_wait_drained(3, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id IN (1, 2)"), 0);
    th_assert_invariants(1);
    th_assert_invariants(2);
    th_assert_invariants(3);
    stop(&d);
}
END_TEST

START_TEST(test_unknown_sku_answers_404)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    struct th_response r;
    order(d.port, 42, 1, 1, NULL, &r);
    expect(&r, 404, "unknown_sku", "order on a SKU never created");
    req(d.port, "GET", "/api/v1/skus/999", NULL, NULL, &r);
    expect(&r, 404, "unknown_sku", "GET unknown sku");
    get_order(d.port, 1, 123, &r);
    expect(&r, 404, "unknown_order", "GET unknown order");
    admin(d.port, "GET", "/admin/v1/skus/999", NULL, &r);
    expect(&r, 404, "unknown_sku", "admin GET unknown sku");

    /* An order id whose epoch exists but whose sequence number was never issued. */
    th_create_sku(d.port, 1, 5, 1);
    long long id = order_ok(d.port, 1, 1, 1);
    get_order(d.port, 1, id + 1, &r);
    expect(&r, 404, "unknown_order", "GET never issued order id");

    ck_assert_int_eq(pg_int("SELECT count(*) FROM skus WHERE id <> 1"), 0);
    th_wait_drained(1, DRAIN_MS);
    stop(&d);
}
END_TEST

struct bad_request {
    const char *what;
    const char *path;
    const char *headers;
    const char *body;
};

START_TEST(test_malformed_orders_answer_400)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);

    static char big[6000], long_key[256];
    int n = snprintf(big, sizeof big, "{\"user_id\":1,\"qty\":1");
    memset(big + n, ' ', 5000);
    snprintf(big + n + 5000, sizeof big - (size_t)n - 5000, "}");
    ck_assert(strlen(big) > 4096 && strlen(big) < 16384);
    snprintf(long_key, sizeof long_key, "Idempotency-Key: %0129d\r\n" CT_JSON, 0);

    const char *p = "/api/v1/skus/1/orders";
    const char *ok = "{\"user_id\":1,\"qty\":1}";
    const struct bad_request cases[] = {
        {"float qty", p, CT_JSON, "{\"user_id\":1,\"qty\":1.0}"},
        {"exponent qty", p, CT_JSON, "{\"user_id\":1,\"qty\":1e0}"},
        {"float user", p, CT_JSON, "{\"user_id\":1.0,\"qty\":1}"},
        {"string qty", p, CT_JSON, "{\"user_id\":1,\"qty\":\"1\"}"},
        {"string user", p, CT_JSON, "{\"user_id\":\"1\",\"qty\":1}"},
        {"bool qty", p, CT_JSON, "{\"user_id\":1,\"qty\":true}"},
        {"null qty", p, CT_JSON, "{\"user_id\":1,\"qty\":null}"},
        {"negative qty", p, CT_JSON, "{\"user_id\":1,\"qty\":-1}"},
        {"negative user", p, CT_JSON, "{\"user_id\":-1,\"qty\":1}"},
        {"zero qty", p, CT_JSON, "{\"user_id\":1,\"qty\":0}"},
        {"missing qty", p, CT_JSON, "{\"user_id\":1}"},
        {"empty object", p, CT_JSON, "{}"},
        {"unknown field", p, CT_JSON, "{\"user_id\":1,\"qty\":1,\"price\":0}"},
        {"duplicate key", p, CT_JSON, "{\"user_id\":1,\"qty\":1,\"qty\":1}"},
        {"array body", p, CT_JSON, "[1,2]"},
        {"number body", p, CT_JSON, "1"},
        {"string body", p, CT_JSON, "\"x\""},
        {"trailing garbage", p, CT_JSON, "{\"user_id\":1,\"qty\":1}x"},
        {"two objects", p, CT_JSON, "{\"user_id\":1,\"qty\":1}{}"},
        {"truncated", p, CT_JSON, "{\"user_id\":1,\"qty\":"},
        {"empty body", p, CT_JSON, ""},
        {"qty above max_qty_per_order", p, CT_JSON, "{\"user_id\":1,\"qty\":1001}"},
        {"user_id 0", p, CT_JSON, "{\"user_id\":0,\"qty\":1}"},
        {"huge qty", p, CT_JSON, "{\"user_id\":1,\"qty\":99999999999999999999}"},
        {"huge user", p, CT_JSON, "{\"user_id\":99999999999999999999,\"qty\":1}"},
        {"text/plain", p, "Content-Type: text/plain\r\n", ok},
        {"latin1 charset", p, "Content-Type: application/json; charset=iso-8859-1\r\n", ok},
        {"missing Content-Type", p, NULL, ok},
        {"oversized body", p, CT_JSON, big},
        {"Idempotency-Key with a space", p, "Idempotency-Key: a b\r\n" CT_JSON, ok},
        {"Idempotency-Key of 129 bytes", p, long_key, ok},
        {"empty Idempotency-Key", p, "Idempotency-Key: \r\n" CT_JSON, ok},
        {"sku id abc", "/api/v1/skus/abc/orders", CT_JSON, ok},
        {"sku id 0", "/api/v1/skus/0/orders", CT_JSON, ok},
        {"sku id -1", "/api/v1/skus/-1/orders", CT_JSON, ok},
        {"sku id 01", "/api/v1/skus/01/orders", CT_JSON, ok},
        {"sku id +1", "/api/v1/skus/+1/orders", CT_JSON, ok},
        {"sku id 2^64", "/api/v1/skus/18446744073709551616/orders", CT_JSON, ok},
    };
    char auth[TH_BUYER_AUTH_MAX], headers[1024];
    th_buyer_auth(1, auth, sizeof auth); /* a valid buyer: only the request is wrong */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct th_response r;
        snprintf(headers, sizeof headers, "%s%s", auth, cases[i].headers ? cases[i].headers : "");
        req(d.port, "POST", cases[i].path, headers, cases[i].body, &r);
        expect_detail(&r, 400, "invalid_request", cases[i].what);
    }

    /* Nothing lost, nothing taken. */
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 10);
    ck_assert_int_eq(th_stream_len(1), 0);
    char seq[KEYS_MAX];
    keys_sku(seq, 1, KEY_SEQ);
    redisContext *rc = th_redis();
    ck_assert_int_eq(th_redis_int(rc, seq), 0);
    redisFree(rc);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders"), 0);
    ck_assert_int_eq(pg_stock(1), 10);

    /* The body all the header and path cases carried is itself fine. */
    order_ok(d.port, 1, 1, 1);
    th_wait_drained(1, DRAIN_MS);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_idempotent_retry_returns_same_order_and_takes_stock_once)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    const char *key = "retry-7f3a:order#1";

    struct th_response r;
    order(d.port, 1, 5, 2, key, &r);
    expect(&r, 201, NULL, "first try");
    expect_str(r.body, "status", "confirmed");
    ck_assert(json_bool(r.body, "replayed") == -1);
    long long id = th_json_int(r.body, "order_id", 0);
    ck_assert(id > 0);
    for (int i = 0; i < 2; i++) {
        order(d.port, 1, 5, 2, key, &r);
        expect(&r, 201, NULL, "retry");
        expect_int(r.body, "order_id", id);
        expect_int(r.body, "qty", 2);
        ck_assert_msg(json_bool(r.body, "replayed") == 1, "retry not marked replayed: %s", r.body);
    }
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 8);

    order(d.port, 1, 5, 1, key, &r);
    expect_detail(&r, 422, "idempotency_key_reused", "same key, other qty");
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 8);
    /* Keys are scoped to the user: another buyer's key can never collide
     * with (or reveal) this one; it is simply another request. */
    order(d.port, 1, 6, 2, key, &r);
    expect(&r, 201, NULL, "same key, other user");
    ck_assert(th_json_int(r.body, "order_id", 0) != id);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 6);

    /* The same key on another SKU is another request. */
    th_create_sku(d.port, 2, 10, 5);
    order(d.port, 2, 5, 2, key, &r);
    expect(&r, 201, NULL, "same key, other sku");
    ck_assert(json_bool(r.body, "replayed") == -1);
    ck_assert(th_json_int(r.body, "order_id", 0) != id);

    th_wait_drained(1, DRAIN_MS);
    th_wait_drained(2, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = 1"), 2);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE id = %lld AND qty = 2 AND "
                            "idempotency_key = 'retry-7f3a:order#1'",
                            id),
                     1);
    ck_assert_int_eq(pg_stock(1), 6);

    /* A retry after the order was decided still names it, now confirmed. */
    order(d.port, 1, 5, 2, key, &r);
    expect(&r, 201, NULL, "retry after confirmation");
    expect_int(r.body, "order_id", id);
    expect_str(r.body, "status", "confirmed");
    ck_assert(json_bool(r.body, "replayed") == 1);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 6);
    th_assert_invariants(1);
    th_assert_invariants(2);
    stop(&d);
}
END_TEST

START_TEST(test_unavailable_when_redis_down)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 5, 1);
    stop(&d);

    char url[96];
    snprintf(url, sizeof url, "SECKILL_REDIS_URL=redis://127.0.0.1:%d/0", th_free_port());
    const char *env[] = {url, NULL};
    start(&d, env);
    struct th_response r;
    order(d.port, 1, 1, 1, NULL, &r);
    expect_detail(&r, 503, "unavailable", "order without Redis");
    req(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &r);
    expect(&r, 503, "unavailable", "GET sku without Redis");
    adjust(d.port, 1, 5, "restock", &r);
    expect(&r, 503, "unavailable", "adjust without Redis");
    req(d.port, "GET", "/healthz", NULL, NULL, &r);
    expect(&r, 503, NULL, "healthz without Redis");
    expect_str(r.body, "status", "unavailable");
    expect_str(r.body, "redis", "down");
    expect_str(r.body, "postgres", "ok");
    stop(&d);

    /* Nothing moved in either store. */
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 5);
    ck_assert_int_eq(pg_stock(1), 5);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders"), 0);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM stock_ledger WHERE kind = 'admin'"), 0);
    th_assert_invariants(1);
}
END_TEST

/* Sets Redis's maxmemory to 'value' (a CONFIG value); returns the one it had
 * in old (cap bytes). */
static void redis_maxmemory(const char *value, char *old, size_t cap)
{
    redisContext *rc = th_redis_admin(); /* CONFIG is no command of the service */
    redisReply *rep = redisCommand(rc, "CONFIG GET maxmemory");
    ck_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
    if (old)
        snprintf(old, cap, "%s", rep->element[1]->str);
    freeReplyObject(rep);
    rep = redisCommand(rc, "CONFIG SET maxmemory %s", value);
    ck_assert_msg(rep && rep->type == REDIS_REPLY_STATUS, "CONFIG SET maxmemory %s", value);
    freeReplyObject(rep);
    redisFree(rc);
}

/* A Redis command's integer answer, asked as the admin user. */
static long long redis_admin_int(const char *cmd, const char *key)
{
    redisContext *rc = th_redis_admin();
    redisReply *rep = redisCommand(rc, "%s %s", cmd, key);
    ck_assert(rep && rep->type == REDIS_REPLY_INTEGER);
    long long v = rep->integer;
    freeReplyObject(rep);
    redisFree(rc);
    return v;
}

/* The Retry-After seconds of r (-1: none). */
static long long retry_after(const struct th_response *r)
{
    const char *h = strcasestr(r->headers, "\r\nRetry-After:");
    if (!h && strncasecmp(r->headers, "Retry-After:", 12) == 0)
        h = r->headers - 2;
    return h ? atoll(h + 2 + 12) : -1;
}

START_TEST(test_full_redis_answers_503_store_full_takes_nothing_and_heals)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_FULL_RETRY_AFTER_S=7", "SECKILL_RECONCILE_INTERVAL_MS=200", NULL};
    start(&d, env);
    th_create_sku(d.port, 1, 5, 2);
    order_ok(d.port, 1, 1, 1);
    th_wait_drained(1, DRAIN_MS);
    char journal[KEYS_MAX], bought[KEYS_MAX], idem[KEYS_MAX];
    keys_sku(journal, 1, KEY_JOURNAL);
    keys_sku(bought, 1, KEY_BOUGHT);
    keys_idem(idem, 1, 2, "full-1");
    long long stock = th_sku_int(1, KEY_STOCK), stream = th_stream_len(1);
    long long jlen = redis_admin_int("HLEN", journal), blen = redis_admin_int("HLEN", bought);

    /* Redis holds more than its bound: every write that needs memory is
     * refused.  The answers are checked once the bound is back, so that a
     * failure leaves Redis usable for the next test. */
    char old[64];
    redis_maxmemory("1", old, sizeof old);
    struct th_response keyed, unkeyed, delta, created;
    order(d.port, 1, 2, 1, "full-1", &keyed);
    order(d.port, 1, 3, 1, NULL, &unkeyed);
    adjust(d.port, 1, 3, "restock", &delta);
    create_sku_body(d.port, "{\"id\":2,\"name\":\"b\",\"stock\":5,\"per_user_limit\":1}", &created);
    /* nothing taken: stock, stream, journal, held units, no remembered key */
    long long stock_full = th_sku_int(1, KEY_STOCK), stream_full = th_stream_len(1);
    long long jlen_full = redis_admin_int("HLEN", journal),
              blen_full = redis_admin_int("HLEN", bought);
    long long idem_full = redis_admin_int("EXISTS", idem);
    redis_maxmemory(old, NULL, 0);

    expect_detail(&keyed, 503, "store_full", "order while Redis is full");
    ck_assert_int_eq(retry_after(&keyed), 7);
    expect_detail(&unkeyed, 503, "store_full", "order without a key while Redis is full");
    expect_detail(&delta, 503, "store_full", "stock delta while Redis is full");
    ck_assert_int_eq(retry_after(&delta), 7);
    expect_detail(&created, 503, "store_full", "SKU create while Redis is full");
    ck_assert_int_eq(stock_full, stock);
    ck_assert_int_eq(stream_full, stream);
    ck_assert_int_eq(jlen_full, jlen);
    ck_assert_int_eq(blen_full, blen);
    ck_assert_int_eq(idem_full, 0);
    ck_assert_int_eq(pg_stock(1), 4);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM stock_ledger WHERE kind = 'admin'"), 0);
    /* the SKU create committed before its load was refused, and says so */
    ck_assert(strstr(created.body, "in the database"));
    ck_assert_int_eq(pg_int("SELECT count(*) FROM skus WHERE id = 2"), 1);

    /* memory comes back: the same request is taken, once */
    struct th_response r;
    order(d.port, 1, 2, 1, "full-1", &r);
    expect(&r, 201, NULL, "the same order once Redis has room");
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), stock - 1);
    ck_assert_int_eq(adjust(d.port, 1, 3, "restock", &r), 200);
    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_stock(1), 6);
    th_assert_invariants(1);
    /* and the reconciler loads the SKU Redis had no room for */
    int waited = 0;
    while (th_sku_int(2, KEY_STOCK) != 5 && waited < DRAIN_MS) {
        th_sleep_ms(50);
        waited += 50;
    }
    ck_assert_int_eq(th_sku_int(2, KEY_STOCK), 5);
    stop(&d);
}
END_TEST

/* A full Redis refuses what adds memory, not what frees it: the writer still
 * takes its SKU's lock, writes the stream's orders to PostgreSQL and trims
 * the stream (the lock functions and the settle functions are allow-oom). */
START_TEST(test_full_redis_still_drains_the_orders_it_holds)
{
    th_reset();
    struct th_daemon d;
    const char *reserve_only[] = {"SECKILL_ORDER_ACK=reserved", "SECKILL_WRITER_THREADS=0", NULL};
    start(&d, reserve_only);
    th_create_sku(d.port, 1, 10, 5);
    struct th_response r;
    for (int user = 1; user <= 3; user++) {
        order(d.port, 1, user, 1, NULL, &r);
        expect(&r, 202, NULL, "an order no writer takes yet");
    }
    stop(&d);
    ck_assert_int_eq(th_stream_len(1), 3);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders"), 0);

    char old[64];
    redis_maxmemory("1", old, sizeof old);
    start(&d, NULL); /* writers on */
    int waited = 0;
    while (pg_int("SELECT count(*) FROM orders") < 3 && waited < DRAIN_MS) {
        th_sleep_ms(50);
        waited += 50;
    }
    long long written = pg_int("SELECT count(*) FROM orders");
    order(d.port, 1, 4, 1, NULL, &r);
    long long stream_full = th_stream_len(1);
    redis_maxmemory(old, NULL, 0);

    ck_assert_msg(written == 3, "%lld of 3 orders written while Redis was full", written);
    expect_detail(&r, 503, "store_full", "a new order while Redis is full");
    ck_assert_int_le(stream_full, 3);
    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_stock(1), 7);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_refusal_is_remembered_refusal_ttl_s_an_order_idempotency_ttl_s)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_REFUSAL_TTL_S=30", NULL};
    start(&d, env);
    th_create_sku(d.port, 1, 1, 1);
    struct th_response r;
    order(d.port, 1, 1, 1, "mine", &r);
    expect(&r, 201, NULL, "the only unit");
    order(d.port, 1, 2, 1, "late", &r);
    expect(&r, 409, "sold_out", "a buyer too late");
    order(d.port, 1, 2, 1, "late", &r); /* the same answer while remembered */
    expect(&r, 409, "sold_out", "the same request again");
    char taken[KEYS_MAX], refused[KEYS_MAX];
    keys_idem(taken, 1, 1, "mine");
    keys_idem(refused, 1, 2, "late");
    long long ttl = redis_admin_int("TTL", refused);
    ck_assert_msg(ttl > 0 && ttl <= 30, "a refusal lives refusal_ttl_s, not %lld s", ttl);
    ttl = redis_admin_int("TTL", taken);
    ck_assert_msg(ttl > 3600, "an order's key keeps idempotency_ttl_s, not %lld s", ttl);
    th_wait_drained(1, DRAIN_MS);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_sku_lost_by_redis_is_restored_by_the_service)
{
    th_reset();
    struct th_daemon d;
    /* A long interval: only the buyer's 503 can make the restore this prompt. */
    const char *env[] = {"SECKILL_RECONCILE_INTERVAL_MS=600000", NULL};
    start(&d, env);
    th_create_sku(d.port, 1, 5, 1);
    order_ok(d.port, 1, 1, 1);
    th_wait_drained(1, DRAIN_MS);
    redisContext *rc = th_redis_admin();
    redisReply *rep = redisCommand(rc, "FLUSHALL"); /* Redis lost its data */
    ck_assert(rep && rep->type != REDIS_REPLY_ERROR);
    freeReplyObject(rep);
    redisFree(rc);

    /* Meanwhile: an accurate 503 with Retry-After, and nothing sold. */
    struct th_response r;
    order(d.port, 1, 2, 1, NULL, &r);
    expect_detail(&r, 503, "unavailable", "order on a SKU Redis does not hold");
    ck_assert_msg(strstr(r.body, "restored"), "the 503 says why: %s", r.body);
    /* No operator: the service reloads it by itself, promptly. */
    int waited = 0;
    for (; order(d.port, 1, 2, 1, NULL, &r) == 503 && waited < POLL_MS; waited += 50)
        th_sleep_ms(50);
    expect(&r, 201, NULL, "order once the service restored the SKU");
    order(d.port, 1, 1, 1, NULL, &r); /* the restore kept user 1's unit */
    expect(&r, 409, "limit_exceeded", "user 1 again after the restore");
    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_stock(1), 3);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 3);
    /* Redis agrees with the database and nothing is in flight: nothing to reload. */
    admin(d.port, "POST", "/admin/v1/skus/1/reload", NULL, &r);
    expect_detail(&r, 409, "already_loaded", "reload of a SKU that agrees");
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_healthz_ok)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    struct th_response r;
    req(d.port, "GET", "/healthz", NULL, NULL, &r);
    expect(&r, 200, NULL, "healthz");
    expect_str(r.body, "status", "ok");
    expect_str(r.body, "redis", "ok");
    expect_str(r.body, "postgres", "ok");
    req(d.port, "POST", "/healthz", CT_JSON, "{}", &r);
    expect(&r, 405, "method_not_allowed", "POST healthz");
    stop(&d);
}
END_TEST

START_TEST(test_script_flush_is_survived)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    order_ok(d.port, 1, 1, 1);

    redisContext *rc = th_redis_admin();
    redisReply *rep = redisCommand(rc, "SCRIPT FLUSH");
    ck_assert(rep && rep->type != REDIS_REPLY_ERROR);
    freeReplyObject(rep);
    redisFree(rc);

    long long id = order_ok(d.port, 1, 2, 1);
    struct th_response r;
    adjust(d.port, 1, 1, "after flush", &r); /* the blocking path's scripts too */
    expect(&r, 200, NULL, "adjust after SCRIPT FLUSH");
    expect_int(r.body, "available", 9);
    wait_order_status(d.port, 2, id, "confirmed");
    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE status = 'confirmed'"), 2);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

/* ---- admin ------------------------------------------------------------------- */

START_TEST(test_admin_requires_bearer_token)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    const char *sku = "{\"id\":1,\"name\":\"x\",\"stock\":5,\"per_user_limit\":1}";
    struct th_response r;
    req(d.port, "POST", "/admin/v1/skus", CT_JSON, sku, &r);
    expect_detail(&r, 401, "unauthorized", "no Authorization");
    req(d.port, "POST", "/admin/v1/skus", "Authorization: Bearer wrong-token\r\n" CT_JSON, sku, &r);
    expect(&r, 401, "unauthorized", "wrong token");
    req(d.port, "POST", "/admin/v1/skus", "Authorization: Bearer " TH_ADMIN_TOKEN "x\r\n" CT_JSON,
        sku, &r);
    expect(&r, 401, "unauthorized", "token with a byte more");
    req(d.port, "POST", "/admin/v1/skus", "Authorization: Basic " TH_ADMIN_TOKEN "\r\n" CT_JSON,
        sku, &r);
    expect(&r, 401, "unauthorized", "right token, Basic scheme");
    req(d.port, "GET", "/admin/v1/skus/1", NULL, NULL, &r);
    expect(&r, 401, "unauthorized", "GET without token");
    req(d.port, "POST", "/admin/v1/skus/1/stock-adjustments", CT_JSON,
        "{\"delta\":1,\"reason\":\"x\"}", &r);
    expect(&r, 401, "unauthorized", "adjust without token");
    ck_assert_int_eq(pg_int("SELECT count(*) FROM skus"), 0);
    ck_assert_int_eq(redis_dbsize(), 0);

    req(d.port, "POST", "/admin/v1/skus", "Authorization: bearer " TH_ADMIN_TOKEN "\r\n" CT_JSON,
        sku, &r);
    expect(&r, 201, NULL, "right token (scheme in any case)");
    admin(d.port, "GET", "/admin/v1/skus/1", NULL, &r);
    expect(&r, 200, NULL, "GET with the right token");
    expect_int(r.body, "db_stock", 5);
    stop(&d);

    /* An empty admin token disables the admin API. */
    const char *env[] = {"SECKILL_ADMIN_TOKEN=", NULL};
    start(&d, env);
    const char *sku2 = "{\"id\":2,\"name\":\"y\",\"stock\":5,\"per_user_limit\":1}";
    req(d.port, "POST", "/admin/v1/skus", "Authorization: Bearer \r\n" CT_JSON, sku2, &r);
    expect(&r, 401, "unauthorized", "empty bearer, empty admin token");
    req(d.port, "POST", "/admin/v1/skus", "Authorization: Bearer\r\n" CT_JSON, sku2, &r);
    expect(&r, 401, "unauthorized", "bare Bearer, empty admin token");
    req(d.port, "POST", "/admin/v1/skus", CT_JSON, sku2, &r);
    expect(&r, 401, "unauthorized", "no header, empty admin token");
    admin(d.port, "POST", "/admin/v1/skus", sku2, &r);
    expect(&r, 401, "unauthorized", "the test token, empty admin token");
    admin(d.port, "GET", "/admin/v1/skus/1", NULL, &r);
    expect(&r, 401, "unauthorized", "GET, empty admin token");
    stop(&d);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM skus WHERE id = 2"), 0);
}
END_TEST

START_TEST(test_admin_create_duplicate_answers_409)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    struct th_response r;
    create_sku_body(d.port, "{\"id\":1,\"name\":\"first\",\"stock\":5,\"per_user_limit\":2}", &r);
    expect(&r, 201, NULL, "create");
    expect_int(r.body, "id", 1);
    expect_str(r.body, "name", "first");
    expect_int(r.body, "stock", 5);
    expect_int(r.body, "available", 5);
    expect_int(r.body, "per_user_limit", 2);
    ck_assert(json_is_null_at(r.body, "sale_starts_at"));
    ck_assert(json_is_null_at(r.body, "sale_ends_at"));

    create_sku_body(d.port, "{\"id\":1,\"name\":\"second\",\"stock\":99,\"per_user_limit\":9}", &r);
    expect_detail(&r, 409, "sku_exists", "same id again");

    /* The first SKU is untouched in both stores. */
    ck_assert_int_eq(pg_stock(1), 5);
    ck_assert_int_eq(pg_int("SELECT initial_stock FROM skus WHERE id = 1"), 5);
    ck_assert_int_eq(pg_int("SELECT per_user_limit FROM skus WHERE id = 1"), 2);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM stock_ledger WHERE sku_id = 1"), 1);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM sku_epochs WHERE sku_id = 1"), 1);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 5);
    req(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &r);
    expect(&r, 200, NULL, "GET sku");
    expect_str(r.body, "name", "first");
    expect_int(r.body, "per_user_limit", 2);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_admin_create_without_id_skips_ids_taken_explicitly)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    struct th_response r;
    create_sku_body(d.port, "{\"id\":1,\"name\":\"a\",\"stock\":1,\"per_user_limit\":1}", &r);
    expect(&r, 201, NULL, "explicit id 1");
    create_sku_body(d.port, "{\"id\":2,\"name\":\"b\",\"stock\":1,\"per_user_limit\":1}", &r);
    expect(&r, 201, NULL, "explicit id 2");
    /* The sequence still starts at 1: both taken ids must be skipped. */
    create_sku_body(d.port, "{\"name\":\"c\",\"stock\":1,\"per_user_limit\":1}", &r);
    expect(&r, 201, NULL, "generated id");
    expect_int(r.body, "id", 3);
    req(d.port, "HEAD", "/api/v1/skus/3", NULL, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, ""); /* HEAD answers like GET, without a body */
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_admin_create_invalid_answers_400)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    const char *bodies[][2] = {
        {"negative stock", "{\"id\":5,\"name\":\"x\",\"stock\":-1,\"per_user_limit\":1}"},
        {"missing name", "{\"id\":5,\"stock\":10,\"per_user_limit\":1}"},
        {"empty name", "{\"id\":5,\"name\":\"\",\"stock\":10,\"per_user_limit\":1}"},
        {"per_user_limit 0", "{\"id\":5,\"name\":\"x\",\"stock\":10,\"per_user_limit\":0}"},
        {"missing stock", "{\"id\":5,\"name\":\"x\",\"per_user_limit\":1}"},
        {"id 0", "{\"id\":0,\"name\":\"x\",\"stock\":10,\"per_user_limit\":1}"},
        {"unknown field", "{\"id\":5,\"name\":\"x\",\"stock\":10,\"per_user_limit\":1,\"p\":1}"},
        {"ends before starts",
         "{\"id\":5,\"name\":\"x\",\"stock\":10,\"per_user_limit\":1,"
         "\"sale_starts_at\":\"2030-01-02T00:00:00Z\",\"sale_ends_at\":\"2030-01-01T00:00:00Z\"}"},
        {"ends when it starts",
         "{\"id\":5,\"name\":\"x\",\"stock\":10,\"per_user_limit\":1,"
         "\"sale_starts_at\":\"2030-01-01T00:00:00Z\",\"sale_ends_at\":\"2030-01-01T00:00:00Z\"}"},
        {"not a timestamp",
         "{\"id\":5,\"name\":\"x\",\"stock\":10,\"per_user_limit\":1,\"sale_starts_at\":\"soon\"}"},
        {"not JSON", "id=5&name=x"},
    };
    struct th_response r;
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        create_sku_body(d.port, bodies[i][1], &r);
        expect_detail(&r, 400, "invalid_request", bodies[i][0]);
    }
    req(d.port, "POST", "/admin/v1/skus",
        "Authorization: Bearer " TH_ADMIN_TOKEN "\r\nContent-Type: text/plain\r\n",
        "{\"id\":5,\"name\":\"x\",\"stock\":10,\"per_user_limit\":1}", &r);
    expect_detail(&r, 400, "invalid_request", "admin create as text/plain");
    ck_assert_int_eq(pg_int("SELECT count(*) FROM skus"), 0);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM stock_ledger"), 0);
    ck_assert_int_eq(redis_dbsize(), 0);
    stop(&d);
}
END_TEST

START_TEST(test_admin_adjust_relative_deltas)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    struct th_response r;

    adjust(d.port, 1, 10, "restock", &r);
    expect(&r, 200, NULL, "+10");
    expect_int(r.body, "sku_id", 1);
    expect_int(r.body, "delta", 10);
    expect_int(r.body, "stock", 20);
    expect_int(r.body, "available", 20);

    adjust(d.port, 1, -3, "shrinkage", &r);
    expect(&r, 200, NULL, "-3");
    expect_int(r.body, "delta", -3);
    expect_int(r.body, "stock", 17);
    expect_int(r.body, "available", 17);

    adjust(d.port, 1, -100, "too much", &r);
    expect_detail(&r, 409, "insufficient_stock", "-100");
    expect_int(r.body, "stock", 17);
    ck_assert_int_eq(pg_stock(1), 17);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 17);

    adjust(d.port, 1, 0, "nothing", &r);
    expect_detail(&r, 400, "invalid_request", "delta 0");
    admin(d.port, "POST", "/admin/v1/skus/1/stock-adjustments", "{\"delta\":1}", &r);
    expect_detail(&r, 400, "invalid_request", "no reason");
    admin(d.port, "POST", "/admin/v1/skus/1/stock-adjustments", "{\"delta\":1.5,\"reason\":\"x\"}",
          &r);
    expect_detail(&r, 400, "invalid_request", "fractional delta");
    adjust(d.port, 999, 5, "ghost", &r);
    expect(&r, 404, "unknown_sku", "adjust unknown sku");
    adjust(d.port, 999, -5, "ghost", &r);
    expect(&r, 404, "unknown_sku", "negative adjust of unknown sku");
    ck_assert_int_eq(pg_stock(1), 17);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 17);

    /* One order, decided, so that the admin view has something to count. */
    order_ok(d.port, 1, 1, 2);
    th_wait_drained(1, DRAIN_MS);
    admin(d.port, "GET", "/admin/v1/skus/1", NULL, &r);
    expect(&r, 200, NULL, "admin GET");
    expect_int(r.body, "id", 1);
    expect_int(r.body, "initial_stock", 10);
    expect_int(r.body, "db_stock", 15);
    expect_int(r.body, "redis_available", 15);
    expect_int(r.body, "available", 15);
    expect_int(r.body, "in_flight_units", 0);
    expect_int(r.body, "confirmed_units", 2);
    expect_int(r.body, "confirmed_orders", 1);
    expect_int(r.body, "rejected_orders", 0);
    expect_int(r.body, "pending_orders", 0);

    ck_assert_int_eq(
        pg_int("SELECT count(*) FROM stock_ledger WHERE sku_id = 1 AND kind = 'admin'"), 2);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM stock_ledger WHERE sku_id = 1 AND kind = 'admin' "
                            "AND delta = 10 AND stock_after = 20 AND reason = 'restock'"),
                     1);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM stock_ledger WHERE sku_id = 1 AND kind = 'admin' "
                            "AND delta = -3 AND stock_after = 17 AND reason = 'shrinkage'"),
                     1);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM stock_ledger WHERE sku_id = 999"), 0);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_negative_delta_refused_when_units_are_in_flight)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_WRITER_THREADS=0", "SECKILL_ORDER_ACK_WAIT_MS=100", NULL};
    start(&d, env); /* no writer: reservations stay in flight (202 pending) */
    th_create_sku(d.port, 1, 5, 10);
    long long id = order_ok(d.port, 1, 1, 4);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 1);
    ck_assert_int_eq(pg_stock(1), 5);

    struct th_response r;
    admin(d.port, "GET", "/admin/v1/skus/1", NULL, &r);
    expect(&r, 200, NULL, "admin GET in flight");
    expect_int(r.body, "db_stock", 5);
    expect_int(r.body, "redis_available", 1);
    expect_int(r.body, "in_flight_units", 4);
    expect_int(r.body, "pending_orders", 1);
    expect_int(r.body, "confirmed_units", 0);
    get_order(d.port, 1, id, &r);
    expect(&r, 200, NULL, "GET pending order");
    expect_str(r.body, "status", "pending");
    expect_int(r.body, "sku_id", 1);

    adjust(d.port, 1, -3, "recount", &r);
    expect_detail(&r, 409, "insufficient_stock", "-3 with 4 of 5 units in flight");
    expect_int(r.body, "available", 1);
    ck_assert_int_eq(pg_stock(1), 5);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 1);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM stock_ledger WHERE kind = 'admin'"), 0);

    adjust(d.port, 1, -1, "recount", &r);
    expect(&r, 200, NULL, "-1 with 1 unit free");
    expect_int(r.body, "stock", 4);
    expect_int(r.body, "available", 0);
    stop(&d);

    /* A daemon with a writer decides the order in flight: it fits exactly. */
    start(&d, NULL);
    wait_order_status(d.port, 1, id, "confirmed");
    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_stock(1), 0);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 0);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_order_ids_unique_across_daemon_restart)
{
    th_reset();
    struct th_daemon d;
    long long ids[6];
    start(&d, NULL);
    th_create_sku(d.port, 1, 100, 100);
    for (int i = 0; i < 3; i++)
        ids[i] = order_ok(d.port, 1, 1 + i, 1);
    stop(&d);
    start(&d, NULL);
    for (int i = 3; i < 6; i++)
        ids[i] = order_ok(d.port, 1, 1 + i, 1);
    th_wait_drained(1, DRAIN_MS);
    for (int i = 0; i < 6; i++) {
        for (int j = 0; j < i; j++)
            ck_assert_msg(ids[i] != ids[j], "order id %lld given twice", ids[i]);
        ck_assert_msg(pg_int("SELECT count(*) FROM orders WHERE id = %lld AND user_id = %d AND "
                             "status = 'confirmed'",
                             ids[i], 1 + i) == 1,
                      "order %lld has no row", ids[i]);
    }
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders"), 6);
    ck_assert_int_eq(pg_stock(1), 94);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_unknown_route_404_and_wrong_method_405)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 5, 1);
    const struct {
        const char *method, *path;
        int status;
        const char *error;
    } cases[] = {
        {"GET", "/", 404, "not_found"},
        {"GET", "/nothing-here", 404, "not_found"},
        {"GET", "/api/v1", 404, "not_found"},
        {"GET", "/api/v1/things/1", 404, "not_found"},
        {"GET", "/api/v2/skus/1", 404, "not_found"},
        {"GET", "/api/v1/skus", 404, "not_found"},
        {"GET", "/api/v1/skus/1/orders/2", 404, "not_found"},
        {"GET", "/api/v1/skus/1/reviews", 404, "not_found"},
        {"GET", "/admin/v1/skus/1/history", 404, "not_found"},
        {"GET", "/admin/v1/other", 404, "not_found"},
        {"GET", "/healthz/deep", 404, "not_found"},
        {"GET", "/api/v1/skus/1/orders", 405, "method_not_allowed"},
        {"PUT", "/api/v1/skus/1/orders", 405, "method_not_allowed"},
        {"POST", "/api/v1/skus/1", 405, "method_not_allowed"},
        {"DELETE", "/api/v1/skus/1", 405, "method_not_allowed"},
        {"PATCH", "/api/v1/orders/1", 405, "method_not_allowed"},
        {"POST", "/api/v1/orders/1", 405, "method_not_allowed"},
        {"PUT", "/healthz", 405, "method_not_allowed"},
        {"DELETE", "/admin/v1/skus", 405, "method_not_allowed"}, /* GET lists, POST creates */
        {"POST", "/admin/v1/sale", 405, "method_not_allowed"},
        {"DELETE", "/admin/v1/orders/1", 405, "method_not_allowed"},
        {"GET", "/admin/v1/orders/1/cancel", 405, "method_not_allowed"},
        {"POST", "/admin/v1/skus/1", 405, "method_not_allowed"},
        {"DELETE", "/admin/v1/skus/1", 405, "method_not_allowed"},
        {"GET", "/admin/v1/skus/1/stock-adjustments", 405, "method_not_allowed"},
    };
    const char *auth = "Authorization: Bearer " TH_ADMIN_TOKEN "\r\n" CT_JSON;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct th_response r;
        char what[128];
        snprintf(what, sizeof what, "%s %s", cases[i].method, cases[i].path);
        req(d.port, cases[i].method, cases[i].path, auth, NULL, &r);
        expect(&r, cases[i].status, cases[i].error, what);
    }
    ck_assert_int_eq(pg_stock(1), 5);
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 5);
    stop(&d);
}
END_TEST

/* ---- buyer identity ---------------------------------------------------------- */

/* The "Authorization: Bearer <token>\r\n" line of a token signed by hand:
 * 'secret' (NULL: the daemon's), user, and exp relative to now. */
static char *auth_line(const char *secret, int64_t user, long long exp_from_now, char *out,
                       size_t cap)
{
    const char *key = secret ? secret : TH_BUYER_SECRET;
    char token[TH_BUYER_AUTH_MAX - 32]; /* room for the header's name */
    long long now = (long long)time(NULL);
    ck_assert(buyer_token_sign(key, strlen(key), user, now - 7200, now + exp_from_now, token,
                               sizeof token) > 0);
    snprintf(out, cap, "Authorization: Bearer %s\r\n", token);
    return out;
}

/* Asserts a 401 with its challenge; 'presented': a token was sent. */
static void expect_401(const struct th_response *r, int presented, const char *what)
{
    expect_detail(r, 401, "unauthorized", what);
    ck_assert_msg(strcasestr(r->headers, "WWW-Authenticate: Bearer realm=\"seckill\""),
                  "%s: no Bearer challenge in %s", what, r->headers);
    ck_assert_msg(!presented == !strstr(r->headers, "error=\"invalid_token\""), "%s: challenge %s",
                  what, r->headers);
}

START_TEST(test_order_without_a_valid_buyer_token_answers_401)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    char wrong_secret[TH_BUYER_AUTH_MAX], expired[TH_BUYER_AUTH_MAX], long_tok[1400];
    char long_lived[TH_BUYER_AUTH_MAX];
    auth_line("another-secret-that-is-32-bytes-long!", 1, 3600, wrong_secret, sizeof wrong_secret);
    auth_line(NULL, 1, -3600, expired, sizeof expired);
    /* issued 2 h ago, valid for a day more: beyond buyer_token_max_ttl_s (86400) */
    auth_line(NULL, 1, 86400, long_lived, sizeof long_lived);
    /* alg none, claims {"sub":"1","exp":4102444800}, no signature */
    const char *alg_none = "Authorization: Bearer eyJhbGciOiJub25lIn0."
                           "eyJzdWIiOiIxIiwiZXhwIjo0MTAyNDQ0ODAwfQ.\r\n";
    int n = snprintf(long_tok, sizeof long_tok, "Authorization: Bearer ");
    memset(long_tok + n, 'a', 1100);
    snprintf(long_tok + n + 1100, sizeof long_tok - (size_t)n - 1100, "\r\n");
    const struct {
        const char *what, *headers;
        int presented;
    } cases[] = {
        {"no Authorization", NULL, 0},
        {"Basic scheme", "Authorization: Basic dXNlcjpwYXNz\r\n", 0},
        {"Bearer without a token", "Authorization: Bearer \r\n", 0},
        {"the admin token", "Authorization: Bearer " TH_ADMIN_TOKEN "\r\n", 1},
        {"signed with another secret", wrong_secret, 1},
        {"expired", expired, 1},
        {"alg none", alg_none, 1},
        {"over max_buyer_token_bytes", long_tok, 1},
        {"living longer than buyer_token_max_ttl_s", long_lived, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct th_response r;
        order_raw(d.port, 1, cases[i].headers, "{\"qty\":1}", &r);
        expect_401(&r, cases[i].presented, cases[i].what);
    }
    struct th_response r;
    order_raw(d.port, 1, expired, "{\"qty\":1}", &r);
    expect_str(r.body, "detail", "the buyer token has expired");
    order_raw(d.port, 1, long_lived, "{\"qty\":1}", &r); /* as any invalid token */
    expect_str(r.body, "detail", "the buyer token is not valid");
    /* Nothing was taken, nothing queued. */
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 10);
    ck_assert_int_eq(th_stream_len(1), 0);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders"), 0);
    stop(&d);
}
END_TEST

/* The second buyer secret, and the one after it, for the rotation test. */
#define NEXT_SECRET "the-next-buyer-secret-0123456789abcdef"

/* An order of 1 unit of sku 1 by 'user' with a token signed by 'secret'
 * under 'kid' (NULL: none); returns the status. */
static int order_signed(int port, const char *secret, const char *kid, int64_t user)
{
    char token[TH_BUYER_AUTH_MAX - 32], headers[TH_BUYER_AUTH_MAX + 64];
    long long now = (long long)time(NULL);
    ck_assert(buyer_token_sign_kid(secret, strlen(secret), kid, user, now, now + 600, token,
                                   sizeof token) > 0);
    snprintf(headers, sizeof headers, "Authorization: Bearer %s\r\n", token);
    struct th_response r;
    order_raw(port, 1, headers, "{\"qty\":1}", &r);
    if (r.status == 401)
        expect_401(&r, 1, "a token of a key the daemon does not hold");
    return r.status;
}

/* A rotation as docs/api.md tells it: add the next secret under its kid
 * (tokens of both work), sign with it, drop the old one once its tokens
 * have expired.  No buyer is logged out at any step but the last, and then
 * only tokens of the dropped secret. */
START_TEST(test_a_buyer_secret_rotates_without_logging_buyers_out)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 100, 5);
    ck_assert_int_eq(order_signed(d.port, TH_BUYER_SECRET, NULL, 1), 201);
    stop(&d);

    /* 1. add: the old tokens (no kid) and the next key's both work */
    start(&d, (const char *const[]){"SECKILL_BUYER_TOKEN_SECRET_NEXT=" NEXT_SECRET,
                                    "SECKILL_BUYER_TOKEN_KID_NEXT=k2", NULL});
    ck_assert_int_eq(order_signed(d.port, TH_BUYER_SECRET, NULL, 1), 201);
    ck_assert_int_eq(order_signed(d.port, NEXT_SECRET, "k2", 2), 201);
    ck_assert_int_eq(order_signed(d.port, NEXT_SECRET, NULL, 2), 401);     /* no kid: the primary */
    ck_assert_int_eq(order_signed(d.port, TH_BUYER_SECRET, "k2", 2), 401); /* not k2's */
    ck_assert_int_eq(order_signed(d.port, NEXT_SECRET, "k3", 2), 401);     /* nobody's */
    stop(&d);

    /* 2. the next key becomes the only one */
    start(&d, (const char *const[]){"SECKILL_BUYER_TOKEN_SECRET=" NEXT_SECRET,
                                    "SECKILL_BUYER_TOKEN_KID=k2", NULL});
    ck_assert_int_eq(order_signed(d.port, NEXT_SECRET, "k2", 2), 201);
    ck_assert_int_eq(order_signed(d.port, TH_BUYER_SECRET, NULL, 1), 401);
    stop(&d);

    th_wait_drained(1, 15000);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders"), 4);
    th_assert_invariants(1);
}
END_TEST

START_TEST(test_body_user_id_must_be_the_token_buyer)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    char auth[TH_BUYER_AUTH_MAX];
    th_buyer_auth(7, auth, sizeof auth);
    struct th_response r;
    order_raw(d.port, 1, auth, "{\"user_id\":8,\"qty\":1}", &r);
    expect_detail(&r, 403, "forbidden", "user_id 8 with user 7's token");
    ck_assert_int_eq(th_sku_int(1, KEY_STOCK), 10);
    ck_assert_int_eq(th_stream_len(1), 0);

    order_raw(d.port, 1, auth, "{\"user_id\":7,\"qty\":1}", &r);
    expect(&r, 201, NULL, "user_id equal to the token's sub");
    expect_int(r.body, "user_id", 7);
    /* Without user_id the token names the buyer. */
    order_raw(d.port, 1, auth, "{\"qty\":2}", &r);
    expect(&r, 201, NULL, "no user_id");
    expect_int(r.body, "user_id", 7);
    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE user_id = 7"), 2);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE user_id <> 7"), 0);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_reserved_mode_accepts_the_token_buyer_with_202)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_ORDER_ACK=reserved", NULL};
    start(&d, env);
    th_create_sku(d.port, 1, 10, 5);
    char auth[TH_BUYER_AUTH_MAX];
    struct th_response r;
    order_raw(d.port, 1, th_buyer_auth(3, auth, sizeof auth), "{\"user_id\":3,\"qty\":1}", &r);
    expect(&r, 202, NULL, "reserved mode, user_id = sub");
    expect_int(r.body, "user_id", 3);
    order_raw(d.port, 1, auth, "{\"user_id\":4,\"qty\":1}", &r);
    expect_detail(&r, 403, "forbidden", "reserved mode, user_id other than sub");
    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE user_id = 3"), 1);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

/* The issue: the per-user limit was one body field away from bypassed. */
START_TEST(test_per_user_limit_cannot_be_bypassed_by_changing_the_body_user_id)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 1);
    char auth[TH_BUYER_AUTH_MAX];
    th_buyer_auth(5, auth, sizeof auth);
    struct th_response r;
    order_raw(d.port, 1, auth, "{\"qty\":1}", &r);
    expect(&r, 201, NULL, "first unit");
    for (int other = 6; other < 9; other++) {
        char body[64];
        snprintf(body, sizeof body, "{\"user_id\":%d,\"qty\":1}", other);
        order_raw(d.port, 1, auth, body, &r);
        expect(&r, 403, "forbidden", "another user_id with the same token");
    }
    order_raw(d.port, 1, auth, "{\"qty\":1}", &r);
    expect(&r, 409, "limit_exceeded", "second unit");
    th_wait_drained(1, DRAIN_MS);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders"), 1);
    ck_assert_int_eq(pg_stock(1), 9);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

START_TEST(test_order_is_shown_only_to_its_buyer)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    long long id = order_ok(d.port, 1, 7, 1);
    wait_order_status(d.port, 7, id, "confirmed");
    struct th_response mine, theirs, never, anon;
    get_order(d.port, 7, id, &mine);
    expect(&mine, 200, NULL, "the buyer's own order");
    expect_int(mine.body, "user_id", 7);
    /* To anybody else it is exactly a missing order. */
    get_order(d.port, 8, id, &theirs);
    expect(&theirs, 404, "unknown_order", "another buyer's order");
    get_order(d.port, 8, id + 1000, &never);
    expect(&never, 404, "unknown_order", "an id never issued");
    ck_assert_str_eq(theirs.body, never.body);
    ck_assert_msg(!strstr(theirs.body, "\"user_id\""), "leaks: %s", theirs.body);
    get_order(d.port, 0, id, &anon);
    expect_401(&anon, 0, "GET without a token");
    char wrong[TH_BUYER_AUTH_MAX], path[64];
    snprintf(path, sizeof path, "/api/v1/orders/%lld", id);
    req(d.port, "GET", path,
        auth_line("another-secret-that-is-32-bytes-long!", 7, 3600, wrong, sizeof wrong), NULL,
        &anon);
    expect_401(&anon, 1, "GET with a token of another secret");
    stop(&d);

    /* A pending order (only in Redis's journal) too. */
    const char *env[] = {"SECKILL_WRITER_THREADS=0", "SECKILL_ORDER_ACK_WAIT_MS=100", NULL};
    start(&d, env);
    long long pending = order_ok(d.port, 1, 7, 1);
    get_order(d.port, 7, pending, &mine);
    expect(&mine, 200, NULL, "the buyer's own pending order");
    expect_str(mine.body, "status", "pending");
    get_order(d.port, 8, pending, &theirs);
    expect(&theirs, 404, "unknown_order", "another buyer's pending order");
    ck_assert_str_eq(theirs.body, never.body);
    stop(&d);
}
END_TEST

/* Keys are the buyer's own: another buyer's identical key is another
 * request, which neither replays nor names the first buyer's order. */
START_TEST(test_idempotency_key_of_another_buyer_reveals_nothing)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    const char *key = "shared-key-1";
    struct th_response r;
    order(d.port, 1, 5, 2, key, &r);
    expect(&r, 201, NULL, "buyer 5");
    long long first = th_json_int(r.body, "order_id", 0);
    char auth[TH_BUYER_AUTH_MAX], headers[1024];
    /* another qty: not 422, which would tell that somebody used the key */
    snprintf(headers, sizeof headers, "%sIdempotency-Key: %s\r\n",
             th_buyer_auth(6, auth, sizeof auth), key);
    order_raw(d.port, 1, headers, "{\"qty\":1}", &r);
    expect(&r, 201, NULL, "buyer 6, same key, other qty");
    ck_assert(json_bool(r.body, "replayed") == -1);
    expect_int(r.body, "user_id", 6);
    /* the same body: not a replay of buyer 5's order */
    snprintf(headers, sizeof headers, "%sIdempotency-Key: %s\r\n",
             th_buyer_auth(7, auth, sizeof auth), key);
    order_raw(d.port, 1, headers, "{\"qty\":2}", &r);
    expect(&r, 201, NULL, "buyer 7, same key and body");
    ck_assert(json_bool(r.body, "replayed") == -1);
    ck_assert(th_json_int(r.body, "order_id", 0) != first);
    expect_int(r.body, "user_id", 7);
    th_wait_drained(1, DRAIN_MS);
    th_assert_invariants(1);
    stop(&d);
}
END_TEST

/* Redis issues an order id twice (its sequence went back): the second buyer
 * gets 409 order_rejected naming the id, and that id shows them nothing of
 * the first buyer's order. */
START_TEST(test_id_conflict_answer_does_not_show_the_other_buyers_order)
{
    th_reset();
    struct th_daemon d;
    start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    long long id = order_ok(d.port, 1, 1, 1);
    wait_order_status(d.port, 1, id, "confirmed");
    char seq[KEYS_MAX];
    keys_sku(seq, 1, KEY_SEQ);
    redisContext *rc = th_redis_admin(); /* a fault: the service's user may not DECR */
    redisReply *rep = redisCommand(rc, "DECR %s", seq); /* the sequence went back */
    ck_assert(rep && rep->type == REDIS_REPLY_INTEGER);
    freeReplyObject(rep);
    redisFree(rc);
    struct th_response r;
    order(d.port, 1, 2, 1, NULL, &r);
    expect(&r, 409, "order_rejected", "the id again");
    expect_str(r.body, "reason", "id_conflict");
    expect_int(r.body, "order_id", id);
    get_order(d.port, 2, id, &r);
    expect(&r, 404, "unknown_order", "the conflicting id, asked by the second buyer");
    get_order(d.port, 1, id, &r);
    expect(&r, 200, NULL, "the id, asked by its buyer");
    expect_int(r.body, "user_id", 1);
    th_wait_drained(1, DRAIN_MS);
    stop(&d);
}
END_TEST

START_TEST(test_serve_refuses_to_start_without_a_buyer_secret)
{
    const char *none[] = {"SECKILL_BUYER_TOKEN_SECRET=", NULL};
    int st = th_daemon_start_fails(none);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0, "no secret: status %d", st);
    const char *short_one[] = {"SECKILL_BUYER_TOKEN_SECRET=only-31-bytes-0123456789abcdefg", NULL};
    st = th_daemon_start_fails(short_one);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0, "short secret: status %d", st);
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_order_accepted_then_confirmed);
    tcase_add_test(tc, test_sold_out_answers_409);
    tcase_add_test(tc, test_limit_exceeded_answers_409);
    tcase_add_test(tc, test_sale_not_active_before_start_and_after_end);
    tcase_add_test(tc, test_unknown_sku_answers_404);
    tcase_add_test(tc, test_malformed_orders_answer_400);
    tcase_add_test(tc, test_idempotent_retry_returns_same_order_and_takes_stock_once);
    tcase_add_test(tc, test_unavailable_when_redis_down);
    tcase_add_test(tc, test_full_redis_answers_503_store_full_takes_nothing_and_heals);
    tcase_add_test(tc, test_full_redis_still_drains_the_orders_it_holds);
    tcase_add_test(tc, test_refusal_is_remembered_refusal_ttl_s_an_order_idempotency_ttl_s);
    tcase_add_test(tc, test_sku_lost_by_redis_is_restored_by_the_service);
    tcase_add_test(tc, test_healthz_ok);
    tcase_add_test(tc, test_script_flush_is_survived);
    tcase_add_test(tc, test_admin_requires_bearer_token);
    tcase_add_test(tc, test_admin_create_duplicate_answers_409);
    tcase_add_test(tc, test_admin_create_without_id_skips_ids_taken_explicitly);
    tcase_add_test(tc, test_admin_create_invalid_answers_400);
    tcase_add_test(tc, test_admin_adjust_relative_deltas);
    tcase_add_test(tc, test_negative_delta_refused_when_units_are_in_flight);
    tcase_add_test(tc, test_order_ids_unique_across_daemon_restart);
    tcase_add_test(tc, test_unknown_route_404_and_wrong_method_405);
    tcase_add_test(tc, test_order_without_a_valid_buyer_token_answers_401);
    tcase_add_test(tc, test_a_buyer_secret_rotates_without_logging_buyers_out);
    tcase_add_test(tc, test_body_user_id_must_be_the_token_buyer);
    tcase_add_test(tc, test_reserved_mode_accepts_the_token_buyer_with_202);
    tcase_add_test(tc, test_per_user_limit_cannot_be_bypassed_by_changing_the_body_user_id);
    tcase_add_test(tc, test_order_is_shown_only_to_its_buyer);
    tcase_add_test(tc, test_idempotency_key_of_another_buyer_reveals_nothing);
    tcase_add_test(tc, test_id_conflict_answer_does_not_show_the_other_buyers_order);
    tcase_add_test(tc, test_serve_refuses_to_start_without_a_buyer_secret);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(api_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
