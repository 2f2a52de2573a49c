/* Redis losing a SKU's data: the service fails closed, restores the SKU from
 * PostgreSQL by itself, and order ids never repeat. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/keys.h"
#include "harness.h"
#include "order/order.h"

static int order_keyed(int port, int64_t user, const char *idem, struct th_response *r)
{
    char body[64], headers[1024], auth[TH_BUYER_AUTH_MAX];
    snprintf(body, sizeof body, "{\"user_id\":%lld,\"qty\":1}", (long long)user);
    snprintf(headers, sizeof headers, "Content-Type: application/json\r\n%s%s%s%s",
             th_buyer_auth(user, auth, sizeof auth), idem ? "Idempotency-Key: " : "",
             idem ? idem : "", idem ? "\r\n" : "");
    /* a connection error is an outcome here (a daemon stopping), not a failure */
    return th_http(port, "POST", "/api/v1/skus/9/orders", headers, body, r);
}

static int order(int port, int64_t user, struct th_response *r)
{
    return order_keyed(port, user, NULL, r);
}

START_TEST(test_lost_redis_data_fails_closed_until_restored_and_ids_never_repeat)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 9, 10, 1);
    struct th_response r;
    ck_assert_int_eq(order(d.port, 1, &r), 0);
    ck_assert_int_eq(r.status, 201);
    long long first = th_json_int(r.body, "order_id", 0);
    ck_assert_int_eq(order(d.port, 2, &r), 0);
    long long second = th_json_int(r.body, "order_id", 0);
    th_wait_drained(9, 10000);

    redisContext *rc = th_redis_admin();
    redisReply *rep = redisCommand(rc, "FLUSHALL"); /* Redis restarted without its data */
    freeReplyObject(rep);

    /* Unknown is not infinite: the SKU exists, so the answer is 503, not a
     * sale, until the service has rebuilt it from the database. */
    ck_assert_int_eq(order(d.port, 3, &r), 0);
    ck_assert_int_eq(r.status, 503);
    for (int waited = 0; r.status == 503 && waited < 10000; waited += 50) {
        usleep(50 * 1000);
        ck_assert_int_eq(order(d.port, 3, &r), 0);
    }
    ck_assert_msg(r.status == 201, "after the restore: %d %s", r.status, r.body);
    long long third = th_json_int(r.body, "order_id", 0);
    ck_assert(third != first && third != second);
    ck_assert_int_gt(order_id_epoch(third), order_id_epoch(first));
    ck_assert_int_eq(order(d.port, 1, &r), 0); /* user 1 already holds the limit */
    ck_assert_int_eq(r.status, 409);
    ck_assert_ptr_nonnull(strstr(r.body, "limit_exceeded"));
    th_wait_drained(9, 10000);
    PGconn *c = th_pg();
    ck_assert_int_eq(th_pg_int(c, "SELECT count(DISTINCT id) FROM orders WHERE sku_id = 9"), 3);
    PQfinish(c);
    th_assert_invariants(9);
    ck_assert_int_eq(th_admin(d.port, "POST", "/admin/v1/skus/77/reload", NULL, &r), 0);
    ck_assert_int_eq(r.status, 404);
    redisFree(rc);
    th_daemon_stop(&d);
}
END_TEST

struct in_flight {
    int port;
    struct th_response r;
    int rc;
};

#define IN_FLIGHT_KEY "in-flight-at-shutdown"

static void *order_in_flight(void *arg)
{
    struct in_flight *f = arg;
    f->rc = order_keyed(f->port, 5, IN_FLIGHT_KEY, &f->r);
    return NULL;
}

static void *redis_busy(void *arg)
{
    (void)arg;
    th_redis_busy_ms(1500); /* Redis answers nobody meanwhile */
    return NULL;
}

START_TEST(test_shutdown_with_order_in_flight_answers_and_exits_cleanly)
{
    th_reset();
    struct th_daemon d;
    /* A command timeout longer than the pause: the order is still waiting on
     * Redis when the daemon is told to stop (and a request deadline that
     * leaves the order its own waits). */
    const char *env[] = {"SECKILL_REDIS_TIMEOUT_MS=5000", "SECKILL_LOCK_TTL_MS=20000",
                         "SECKILL_REQUEST_DEADLINE_MS=8000", NULL};
    th_daemon_start(&d, env);
    th_create_sku(d.port, 9, 10, 1);
    pthread_t busy, client;
    pthread_create(&busy, NULL, redis_busy, NULL);
    usleep(200 * 1000);
    struct in_flight f = {.port = d.port};
    pthread_create(&client, NULL, order_in_flight, &f);
    usleep(300 * 1000);
    th_daemon_stop(&d); /* asserts exit status 0: no crash, no sanitizer report */
    pthread_join(client, NULL);
    pthread_join(busy, NULL);
    /* The buyer got an answer, never a hang: 503 (nothing known), or 201/202
     * with the order's id when Redis answered before the loop stopped; a
     * closed connection is the one other outcome a stopping process may
     * give.  Whatever it was, the buyer's retry with the same key, to the
     * next daemon, settles it: the same order when one was taken, else one
     * taken now, never two and never none. */
    long long first_id = 0;
    if (f.rc == 0) {
        ck_assert_msg(f.r.status == 503 || f.r.status == 202 || f.r.status == 201,
                      "in flight at shutdown: %d %s", f.r.status, f.r.body);
        if (f.r.status != 503) {
            first_id = th_json_int(f.r.body, "order_id", 0);
            ck_assert_int_gt(first_id, 0);
        }
    }
    th_daemon_start(&d, NULL);
    struct th_response again;
    th_order(d.port, 9, 5, 1, IN_FLIGHT_KEY, &again);
    ck_assert_msg(again.status == 201 || again.status == 202, "the retry: %d %s", again.status,
                  again.body);
    long long id = th_json_int(again.body, "order_id", 0);
    ck_assert_int_gt(id, 0);
    if (first_id)
        ck_assert_int_eq(id, first_id);
    th_wait_drained(9, 10000);
    PGconn *c = th_pg();
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM orders WHERE sku_id = 9 AND user_id = 5 AND id = %lld "
             "AND status = 'confirmed'",
             id);
    ck_assert_int_eq(th_pg_int(c, sql), 1);
    ck_assert_int_eq(th_pg_int(c, "SELECT count(*) FROM orders WHERE sku_id = 9"), 1);
    PQfinish(c);
    th_assert_invariants(9);
    th_daemon_stop(&d);
}
END_TEST

/* With lock_min_replicas set and no replica, no lock counts: admin writes
 * fail closed with 503, and no lock key is left behind. */
START_TEST(test_locks_without_required_replicas_fail_closed)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_LOCK_MIN_REPLICAS=1", "SECKILL_LOCK_REPLICA_TIMEOUT_MS=50", NULL};
    th_daemon_start(&d, env);
    struct th_response r;
    ck_assert_int_eq(th_admin(d.port, "POST", "/admin/v1/skus",
                              "{\"id\":3,\"name\":\"x\",\"stock\":5,\"per_user_limit\":1}", &r),
                     0);
    ck_assert_int_eq(r.status, 503);
    redisContext *rc = th_redis();
    redisReply *rep = redisCommand(rc, "EXISTS seckill:{sku:3}:lock:sku seckill:{sku:3}:meta");
    ck_assert_int_eq(rep->integer, 0);
    freeReplyObject(rep);
    redisFree(rc);
    PGconn *c = th_pg();
    ck_assert_int_eq(th_pg_int(c, "SELECT count(*) FROM skus"), 0);
    PQfinish(c);
    th_daemon_stop(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("recovery");
    TCase *tc = tcase_create("redis-loss");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lost_redis_data_fails_closed_until_restored_and_ids_never_repeat);
    tcase_add_test(tc, test_shutdown_with_order_in_flight_answers_and_exits_cleanly);
    tcase_add_test(tc, test_locks_without_required_replicas_fail_closed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
