/*
 * Nothing answered is lost and every fault heals by itself: the durable
 * acknowledgement, the reserve deadline, refusals remembered, idempotent
 * admin deltas, and the reconciler settling and rebuilding without an
 * operator.  The real daemon against the real Redis and PostgreSQL.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/embedded.h"
#include "core/keys.h"
#include "harness.h"
#include "order/order.h"
#include "rlock/url.h"
#include "store/redis_conn.h"

#define CT_JSON "Content-Type: application/json\r\n"
#define BOUND_MS 15000 /* liveness bound of every poll below, never a speed claim */

static int order(int port, int64_t sku, int64_t user, int64_t qty, const char *idem,
                 struct th_response *r)
{
    return th_order(port, sku, user, qty, idem, r);
}

static int adjust(int port, int64_t sku, long long delta, const char *idem, struct th_response *r)
{
    char path[96], body[128], headers[256];
    snprintf(path, sizeof path, "/admin/v1/skus/%lld/stock-adjustments", (long long)sku);
    snprintf(body, sizeof body, "{\"delta\":%lld,\"reason\":\"test\"}", delta);
    snprintf(headers, sizeof headers,
             "Authorization: Bearer " TH_ADMIN_TOKEN "\r\n" CT_JSON "%s%s%s",
             idem ? "Idempotency-Key: " : "", idem ? idem : "", idem ? "\r\n" : "");
    ck_assert_int_eq(th_http(port, "POST", path, headers, body, r), 0);
    return r->status;
}

static long long redis_cmd_int(const char *fmt, const char *key)
{
    redisContext *r = th_redis();
    redisReply *rep = redisCommand(r, fmt, key);
    ck_assert(rep && rep->type == REDIS_REPLY_INTEGER);
    long long v = rep->integer;
    freeReplyObject(rep);
    redisFree(r);
    return v;
}

static long long pg(const char *sql)
{
    PGconn *c = th_pg();
    long long v = th_pg_int(c, sql);
    PQfinish(c);
    return v;
}

/* Polls until Redis stock of sku equals skus.stock and no adjustment record
 * is open; fails after BOUND_MS. */
static void wait_agreement(int64_t sku)
{
    char sql[96], adj[KEYS_MAX];
    snprintf(sql, sizeof sql, "SELECT stock FROM skus WHERE id = %lld", (long long)sku);
    keys_sku(adj, sku, KEY_ADJUST);
    for (int waited = 0;; waited += 50) {
        if (th_sku_int(sku, KEY_STOCK) == pg(sql) && redis_cmd_int("HLEN %s", adj) == 0)
            return;
        ck_assert_msg(waited < BOUND_MS, "sku %lld: Redis %lld, database %lld after %d ms",
                      (long long)sku, th_sku_int(sku, KEY_STOCK), pg(sql), waited);
        th_sleep_ms(50);
    }
}

/* ---- durable acknowledgement ------------------------------------------- */

START_TEST(test_durable_answer_is_201_only_once_the_row_is_committed)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 1, 5, 2);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 1, 7, 2, NULL, &r), 201);
    long long id = th_json_int(r.body, "order_id", 0);
    char st[32];
    th_json_str(r.body, "status", st, sizeof st);
    ck_assert_str_eq(st, "confirmed");
    /* No wait here: 201 means the row is already there. */
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM orders WHERE id = %lld AND status = 'confirmed' AND qty = 2",
             id);
    ck_assert_int_eq(pg(sql), 1);
    th_daemon_stop(&d);
}
END_TEST

/* Redis believes in a unit the database does not have (an adjustment's
 * crash, lost writes): the buyer is told the truth, 409 with the order id,
 * and the reconciler, woken by the refusal, brings Redis back in line. */
START_TEST(test_database_refusal_is_the_buyers_answer_and_heals)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_RECONCILE_INTERVAL_MS=600000", NULL};
    th_daemon_start(&d, env);
    th_create_sku(d.port, 2, 1, 5);
    redisContext *rc = th_redis();
    char stock[KEYS_MAX];
    keys_sku(stock, 2, KEY_STOCK);
    redisReply *rep = redisCommand(rc, "INCRBY %s 1", stock); /* a phantom unit */
    freeReplyObject(rep);
    redisFree(rc);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 2, 1, 1, NULL, &r), 201);
    ck_assert_int_eq(order(d.port, 2, 2, 1, NULL, &r), 409);
    char err[32], status[32], reason[48];
    th_json_str(r.body, "error", err, sizeof err);
    th_json_str(r.body, "status", status, sizeof status);
    th_json_str(r.body, "reason", reason, sizeof reason);
    ck_assert_str_eq(err, "sold_out");
    ck_assert_str_eq(status, "rejected");
    ck_assert_str_eq(reason, ORDER_REASON_NO_STOCK);
    long long id = th_json_int(r.body, "order_id", 0);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM orders WHERE id = %lld AND status = 'rejected'",
             id);
    ck_assert_int_eq(pg(sql), 1);
    wait_agreement(2); /* 0 in both, without an operator or the periodic pass */
    ck_assert_int_eq(th_sku_int(2, KEY_STOCK), 0);
    th_assert_invariants(2);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_durable_answer_falls_back_to_pending_without_a_commit)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_WRITER_THREADS=0", "SECKILL_ORDER_ACK_WAIT_MS=100", NULL};
    th_daemon_start(&d, env);
    th_create_sku(d.port, 3, 5, 2);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 3, 1, 1, NULL, &r), 202);
    char st[32];
    th_json_str(r.body, "status", st, sizeof st);
    ck_assert_str_eq(st, "pending");
    th_daemon_stop(&d);
}
END_TEST

/* Two instances share the work: the one that answers has no writer, the
 * other's writer commits, and the answer is still 201. */
START_TEST(test_instance_answers_for_a_commit_of_another_instances_writer)
{
    th_reset();
    struct th_daemon front, back;
    const char *env[] = {"SECKILL_WRITER_THREADS=0", NULL};
    th_daemon_start(&front, env);
    th_daemon_start(&back, NULL);
    th_create_sku(front.port, 4, 10, 10);
    struct th_response r;
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(order(front.port, 4, 1 + i, 1, NULL, &r), 201);
        char st[32];
        th_json_str(r.body, "status", st, sizeof st);
        ck_assert_str_eq(st, "confirmed");
    }
    ck_assert_int_eq(pg("SELECT count(*) FROM orders WHERE sku_id = 4 AND status = 'confirmed'"),
                     5);
    th_daemon_stop(&back);
    th_daemon_stop(&front);
}
END_TEST

/* ---- a timeout takes nothing; refusals and deltas are idempotent --------- */

START_TEST(test_reserve_past_its_deadline_takes_nothing)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 5, 10, 5);
    th_daemon_stop(&d);
    struct cfg c;
    th_cfg(&c);
    struct redis_conn rc;
    char err[160];
    ck_assert(redis_conn_init(&rc, &c, err, sizeof err) == 0);
    embedded_init();
    struct order_reserve_call call = {0};
    /* A deadline one second ago: as when Redis runs the script after a pause. */
    order_reserve_begin(&call, 5, 60, 60, (int64_t)time(NULL) * 1000 - 1000);
    order_reserve_add(&call, 1, 2, NULL, 0, 0, 1);
    order_reserve_argv(&call);
    redisReply *rep =
        redis_conn_script(&rc, &script_reserve, call.nkeys, call.nargs, call.argv, NULL);
    struct order_reply out;
    order_parse_reply(order_reserve_reply_at(rep, 1, 0), &out);
    ck_assert_int_eq(out.result, ORDER_DEADLINE_PASSED);
    freeReplyObject(rep);
    order_reserve_free(&call);
    redis_conn_close(&rc);
    cfg_free(&c);
    ck_assert_int_eq(th_sku_int(5, KEY_STOCK), 10);
    ck_assert_int_eq(th_sku_int(5, KEY_SEQ), 0);
    char stream[KEYS_MAX];
    keys_sku(stream, 5, KEY_STREAM);
    ck_assert_int_eq(redis_cmd_int("XLEN %s", stream), 0);
}
END_TEST

struct timed_order {
    int port, delay_ms;
    int64_t user;
    struct th_response r;
};

static void *order_after(void *arg)
{
    struct timed_order *t = arg;
    th_sleep_ms(t->delay_ms);
    order(t->port, 11, t->user, 1, NULL, &t->r);
    return NULL;
}

static void *redis_pause(void *arg)
{
    th_redis_busy_ms(*(const int *)arg);
    return NULL;
}

/* Redis pauses 1.3 s (redis_timeout_ms 1000, margin 250).  Order A, sent
 * first, times out: 503, and its script, run after its deadline, takes
 * nothing.  Order B, sent 0.5 s later, is run within its deadline and gets
 * its real answer: giving up on the connection at A's timeout would have
 * thrown B's reply away and told B 503 for a reservation that exists. */
START_TEST(test_a_timeout_never_hides_a_reservation_of_another_request)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 11, 10, 5);
    pthread_t pause, a, b;
    struct timed_order oa = {.port = d.port, .delay_ms = 150, .user = 1};
    struct timed_order ob = {.port = d.port, .delay_ms = 650, .user = 2};
    static const int pause_ms = 1300;
    ck_assert_int_eq(pthread_create(&pause, NULL, redis_pause, (void *)&pause_ms), 0);
    ck_assert_int_eq(pthread_create(&a, NULL, order_after, &oa), 0);
    ck_assert_int_eq(pthread_create(&b, NULL, order_after, &ob), 0);
    pthread_join(pause, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    ck_assert_msg(oa.r.status == 503, "A: %d %s", oa.r.status, oa.r.body);
    ck_assert_msg(ob.r.status == 201, "B: %d %s", ob.r.status, ob.r.body);
    th_wait_drained(11, BOUND_MS);
    ck_assert_int_eq(pg("SELECT count(*) FROM orders WHERE sku_id = 11"), 1);
    ck_assert_int_eq(pg("SELECT count(*) FROM orders WHERE sku_id = 11 AND user_id = 2"), 1);
    ck_assert_int_eq(th_sku_int(11, KEY_STOCK), 9);
    /* A's 503 names the key that settles its outcome: A took nothing, so a
     * retry with it buys now, once, however often it is sent. */
    char key[128];
    th_json_str(oa.r.body, "idempotency_key", key, sizeof key);
    ck_assert_msg(key[0], "the 503 names no Idempotency-Key: %s", oa.r.body);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 11, 1, 1, key, &r), 201);
    ck_assert_int_eq(order(d.port, 11, 1, 1, key, &r), 201);
    ck_assert_msg(strstr(r.body, "\"replayed\":true"), "%s", r.body);
    ck_assert_int_eq(pg("SELECT count(*) FROM orders WHERE sku_id = 11 AND user_id = 1"), 1);
    ck_assert_int_eq(th_sku_int(11, KEY_STOCK), 8);
    th_assert_invariants(11);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_refusal_retried_with_the_same_key_is_refused_again)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 6, 1, 5);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 6, 1, 1, "k-first", &r), 201);
    ck_assert_int_eq(order(d.port, 6, 2, 1, "k-second", &r), 409);
    ck_assert_int_eq(adjust(d.port, 6, 5, NULL, &r), 200);
    /* Stock is back, yet the same request keeps its first answer. */
    ck_assert_int_eq(order(d.port, 6, 2, 1, "k-second", &r), 409);
    char err[32];
    th_json_str(r.body, "error", err, sizeof err);
    ck_assert_str_eq(err, "sold_out");
    ck_assert_int_eq(th_json_int(r.body, "order_id", 0), 0);
    ck_assert_int_eq(order(d.port, 6, 2, 1, "k-third", &r), 201); /* a new request */
    ck_assert_int_eq(th_sku_int(6, KEY_STOCK), 4);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_admin_delta_retried_with_the_same_key_applies_once)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 7, 10, 5);
    struct th_response r;
    ck_assert_int_eq(adjust(d.port, 7, 5, "restock-2026-11-23", &r), 200);
    ck_assert_int_eq(th_json_int(r.body, "stock", -1), 15);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(adjust(d.port, 7, 5, "restock-2026-11-23", &r), 200);
        ck_assert_int_eq(th_json_int(r.body, "stock", -1), 15);
        ck_assert_msg(strstr(r.body, "\"replayed\":true"), "not marked replayed: %s", r.body);
    }
    ck_assert_int_eq(adjust(d.port, 7, -5, "restock-2026-11-23", &r), 422);
    ck_assert_int_eq(pg("SELECT stock FROM skus WHERE id = 7"), 15);
    ck_assert_int_eq(th_sku_int(7, KEY_STOCK), 15);
    ck_assert_int_eq(pg("SELECT count(*) FROM stock_ledger WHERE sku_id = 7 AND kind = 'admin'"),
                     1);
    th_assert_invariants(7);
    th_daemon_stop(&d);
}
END_TEST

/* ---- the reconciler ------------------------------------------------------ */

/* A daemon killed between the Redis step of a delta and its COMMIT (the
 * SECKILL_FAULT point) leaves Redis ahead; the next daemon settles it at
 * start-up, with no adjustment and no operator. */
START_TEST(test_adjustment_cut_by_a_crash_is_settled_by_the_next_daemon)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 8, 10, 5);
    th_daemon_stop(&d);
    /* A short lease: the dead daemon's SKU lock outlives it by that much. */
    const char *env[] = {"SECKILL_FAULT=adjust_after_redis", "SECKILL_LOCK_TTL_MS=4000",
                         "SECKILL_PG_STATEMENT_TIMEOUT_MS=2000",
                         "SECKILL_PG_CLIENT_TIMEOUT_MS=3000", NULL};
    th_daemon_start(&d, env);
    struct th_response r;
    char path[96];
    snprintf(path, sizeof path, "/admin/v1/skus/8/stock-adjustments");
    ck_assert_int_ne(th_admin(d.port, "POST", path, "{\"delta\":7,\"reason\":\"crash\"}", &r) ==
                             0 &&
                         r.status == 200,
                     1);
    int st;
    for (int i = 0; i < 200 && waitpid(d.pid, &st, WNOHANG) != d.pid; i++)
        th_sleep_ms(25);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the fault point did not fire");
    d.pid = 0;
    ck_assert_int_eq(th_sku_int(8, KEY_STOCK), 17); /* applied in Redis, never committed */
    ck_assert_int_eq(pg("SELECT stock FROM skus WHERE id = 8"), 10);

    /* Only its start-up pass and the retries of a pass that found the dead
     * daemon's SKU lock still held (until its lease ends) can settle it. */
    const char *slow[] = {"SECKILL_RECONCILE_INTERVAL_MS=600000", NULL};
    th_daemon_start(&d, slow);
    wait_agreement(8);
    ck_assert_int_eq(th_sku_int(8, KEY_STOCK), 10);
    th_assert_invariants(8);
    th_daemon_stop(&d);
}
END_TEST

/* Redis restarted with its data, but the daemon cannot know what it lost:
 * the SKU is rebuilt from the database once, under a fresh epoch. */
START_TEST(test_redis_restart_rebuilds_each_sku_once)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 9, 10, 5);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 9, 1, 1, NULL, &r), 201);
    long long before = th_json_int(r.body, "order_id", 0);
    char meta[KEYS_MAX];
    keys_sku(meta, 9, KEY_META);
    redisContext *rc = th_redis();
    /* What a restart changes: the run id the state was built on. */
    redisReply *rep = redisCommand(rc, "HSET %s built_run not-this-server", meta);
    freeReplyObject(rep);
    redisFree(rc);
    th_daemon_stop(&d);
    th_daemon_start(&d, NULL);
    long long after = 0;
    for (int waited = 0; waited < BOUND_MS; waited += 50) {
        ck_assert_int_eq(order(d.port, 9, 2 + waited / 50, 1, NULL, &r), 201);
        after = th_json_int(r.body, "order_id", 0);
        if (order_id_epoch(after) > order_id_epoch(before))
            break;
        th_sleep_ms(50);
    }
    ck_assert_msg(order_id_epoch(after) > order_id_epoch(before), "no rebuild after restart");
    th_daemon_stop(&d);
    th_assert_invariants(9);
}
END_TEST

/* The I/O timeout of the connections below: short, the test waits for it. */
#define SILENT_IO_TIMEOUT_MS 300

START_TEST(test_a_redis_that_never_answers_auth_is_a_timeout_not_a_refusal)
{
    /* A server that takes connections (the kernel completes them from the
     * listen queue) and never says a word: a stalled or frozen Redis. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ck_assert(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 4) == 0 &&
              getsockname(lfd, (struct sockaddr *)&a, &al) == 0);
    char url[128], err[512];
    snprintf(url, sizeof url, "redis://seckill:secret@127.0.0.1:%d/1", ntohs(a.sin_port));
    struct rlock_url u;
    ck_assert(rlock_url_parse(url, &u, err, sizeof err) == 0);
    redisContext *c = rlock_url_connect(&u, BOUND_MS, SILENT_IO_TIMEOUT_MS, err, sizeof err);
    ck_assert(c == NULL);
    ck_assert_msg(strstr(err, "AUTH") && strstr(err, "timed out") && !strstr(err, "refused"),
                  "a silent server was reported as: %s", err);
    /* no password: the same stall at SELECT says so too */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/1", ntohs(a.sin_port));
    ck_assert(rlock_url_parse(url, &u, err, sizeof err) == 0);
    c = rlock_url_connect(&u, BOUND_MS, SILENT_IO_TIMEOUT_MS, err, sizeof err);
    ck_assert(c == NULL);
    ck_assert_msg(strstr(err, "SELECT") && strstr(err, "timed out") && !strstr(err, "refused"),
                  "a silent server was reported as: %s", err);
    close(lfd);
    /* the real Redis, a wrong password: that one is a refusal */
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_URL"), &u, err, sizeof err) == 0);
    snprintf(u.password, sizeof u.password, "not-the-password");
    c = rlock_url_connect(&u, BOUND_MS, BOUND_MS, err, sizeof err);
    ck_assert(c == NULL);
    ck_assert_msg(strstr(err, "AUTH") && strstr(err, "refused") && !strstr(err, "timed out"),
                  "a wrong password was reported as: %s", err);
}
END_TEST

/* ---- the Redis Functions library -------------------------------------- */

/* As admin: the library goes (FUNCTION FLUSH), with the data when 'data'
 * (FLUSHALL): a restart that lost everything. */
static void lose_functions(int data)
{
    redisContext *a = th_redis_admin();
    if (data)
        freeReplyObject(redisCommand(a, "FLUSHALL"));
    redisReply *rep = redisCommand(a, "FUNCTION FLUSH");
    ck_assert(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    redisFree(a);
}

static enum rlock_library_state library_state(void)
{
    redisContext *r = th_redis();
    enum rlock_library_state st =
        rlock_library_check(r, EMBEDDED_LIBRARY, embedded_library_version());
    redisFree(r);
    return st;
}

/* Orders sku for users from 'user' on, until one is answered 201; fails
 * after BOUND_MS.  Returns the users used. */
static int order_until_sold(int port, int64_t sku, int user)
{
    struct th_response r;
    for (int waited = 0;; waited += 50, user++) {
        if (order(port, sku, user, 1, NULL, &r) == 201)
            return user + 1;
        ck_assert_msg(r.status == 503, "order during the heal: %d %s", r.status, r.body);
        ck_assert_msg(waited < BOUND_MS, "no sale %d ms after the functions were lost", waited);
        th_sleep_ms(50);
    }
}

/* A restart that lost everything lost the functions too: the daemon loads
 * them again as the self-healing user (redis_functions_url), rebuilds the
 * SKU and sells again, by itself. */
START_TEST(test_empty_restart_loads_the_functions_again_and_sells)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 9, 10, 5);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 9, 1, 1, NULL, &r), 201);
    th_wait_drained(9, BOUND_MS);
    lose_functions(1);
    ck_assert_int_eq(library_state(), RLOCK_LIBRARY_MISSING);
    order_until_sold(d.port, 9, 2);
    ck_assert_int_eq(library_state(), RLOCK_LIBRARY_CURRENT);
    th_wait_drained(9, BOUND_MS);
    th_daemon_stop(&d);
    th_assert_invariants(9);
}
END_TEST

/* Without that credential the daemon cannot load code: orders fail closed
 * and /healthz says the functions are missing, until an administrator
 * loads them (seckilld migrate); then it sells again. */
START_TEST(test_lost_functions_without_the_credential_fail_closed_until_loaded)
{
    th_reset();
    const char *env[] = {"SECKILL_REDIS_FUNCTIONS_URL_FILE", NULL}; /* unset (glibc putenv) */
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 9, 10, 5);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 9, 1, 1, NULL, &r), 201);
    lose_functions(0);
    ck_assert_int_eq(order(d.port, 9, 2, 1, NULL, &r), 503); /* and the reconciler is asked */
    for (int waited = 0;; waited += 50) {
        ck_assert_int_eq(th_http(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
        if (r.status == 503 && strstr(r.body, "\"redis_functions\":\"missing\""))
            break;
        ck_assert_msg(waited < BOUND_MS, "healthz: %d %s", r.status, r.body);
        th_sleep_ms(50);
    }
    ck_assert_int_eq(library_state(), RLOCK_LIBRARY_MISSING); /* it did not load them */
    redisContext *a = th_redis_admin();
    size_t len;
    const char *text = embedded_library_text(&len);
    redisReply *l = rlock_library_load(a, text, len);
    ck_assert(l && l->type == REDIS_REPLY_STRING);
    freeReplyObject(l);
    redisFree(a);
    order_until_sold(d.port, 9, 3);
    for (int waited = 0;; waited += 50) {
        ck_assert_int_eq(th_http(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
        if (r.status == 200 && !strstr(r.body, "redis_functions"))
            break;
        ck_assert_msg(waited < BOUND_MS, "healthz after the load: %d %s", r.status, r.body);
        th_sleep_ms(50);
    }
    th_wait_drained(9, BOUND_MS);
    th_daemon_stop(&d);
    th_assert_invariants(9);
}
END_TEST

int main(void)
{
    embedded_init();
    Suite *s = suite_create("heal");
    TCase *tc = tcase_create("heal");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_durable_answer_is_201_only_once_the_row_is_committed);
    tcase_add_test(tc, test_database_refusal_is_the_buyers_answer_and_heals);
    tcase_add_test(tc, test_durable_answer_falls_back_to_pending_without_a_commit);
    tcase_add_test(tc, test_instance_answers_for_a_commit_of_another_instances_writer);
    tcase_add_test(tc, test_reserve_past_its_deadline_takes_nothing);
    tcase_add_test(tc, test_a_timeout_never_hides_a_reservation_of_another_request);
    tcase_add_test(tc, test_refusal_retried_with_the_same_key_is_refused_again);
    tcase_add_test(tc, test_admin_delta_retried_with_the_same_key_applies_once);
    tcase_add_test(tc, test_adjustment_cut_by_a_crash_is_settled_by_the_next_daemon);
    tcase_add_test(tc, test_redis_restart_rebuilds_each_sku_once);
    tcase_add_test(tc, test_a_redis_that_never_answers_auth_is_a_timeout_not_a_refusal);
    tcase_add_test(tc, test_empty_restart_loads_the_functions_again_and_sells);
    tcase_add_test(tc, test_lost_functions_without_the_credential_fail_closed_until_loaded);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
