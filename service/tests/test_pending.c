/* A durable order answered "202 pending" (its commit did not come within
 * order_ack_wait_ms) is never lost: it is recorded in PostgreSQL before the
 * answer, and ends confirmed or rejected, its units accounted, whatever Redis
 * loses meanwhile; its lookup never answers 404, and a retry with its
 * Idempotency-Key finds it instead of reserving again. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define SKU 31

/* A daemon without order writers: every durable order falls back to 202. */
static const char *const no_writer[] = {"SECKILL_WRITER_THREADS=0",
                                        "SECKILL_ORDER_ACK_WAIT_MS=200",
                                        "SECKILL_PENDING_SETTLE_AFTER_MS=300",
                                        "SECKILL_RECONCILE_INTERVAL_MS=200",
                                        "SECKILL_RECONCILE_RETRY_MS=100",
                                        NULL};

static void flush_redis(void) /* Redis restarted without its data */
{
    redisContext *rc = th_redis_admin();
    freeReplyObject(redisCommand(rc, "FLUSHALL"));
    redisFree(rc);
}

static int lookup(int port, int64_t user, long long id, struct th_response *r)
{
    char path[64], auth[TH_BUYER_AUTH_MAX];
    snprintf(path, sizeof path, "/api/v1/orders/%lld", id);
    ck_assert_int_eq(th_http(port, "GET", path, th_buyer_auth(user, auth, sizeof auth), NULL, r),
                     0);
    return r->status;
}

/* Looks the order up until its status is 'want' (bounded); every answer on
 * the way must be the order, pending or 'want': never a 404. */
static void lookup_until(int port, int64_t user, long long id, const char *want)
{
    struct th_response r;
    char status[32] = "";
    for (int waited = 0; waited < 15000; waited += 50) {
        ck_assert_msg(lookup(port, user, id, &r) == 200, "lookup of order %lld: %d %s", id,
                      r.status, r.body);
        th_json_str(r.body, "status", status, sizeof status);
        ck_assert_msg(strcmp(status, "pending") == 0 || strcmp(status, want) == 0, "order %lld: %s",
                      id, r.body);
        if (strcmp(status, want) == 0)
            return;
        usleep(50 * 1000);
    }
    ck_abort_msg("order %lld still %s, not %s", id, status, want);
}

static long long pg_int(const char *fmt, long long a)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, a);
    PGconn *c = th_pg();
    long long v = th_pg_int(c, sql);
    PQfinish(c);
    return v;
}

START_TEST(test_pending_answer_survives_redis_restarted_empty_and_is_confirmed)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, no_writer);
    th_create_sku(d.port, SKU, 5, 2);
    struct th_response r;
    ck_assert_int_eq(th_order(d.port, SKU, 1, 2, "key-1", &r), 202);
    long long id = th_json_int(r.body, "order_id", 0);
    ck_assert_int_gt(id, 0);
    flush_redis(); /* the reservation, its stream entry and its key are gone */

    /* told "pending": the order is never unknown, and ends confirmed */
    lookup_until(d.port, 1, id, "confirmed");
    /* the retry with its key is the same order, stock taken once */
    for (int waited = 0; waited < 10000; waited += 50) {
        th_order(d.port, SKU, 1, 2, "key-1", &r);
        if (r.status != 503)
            break;
        usleep(50 * 1000);
    }
    ck_assert_msg(r.status == 201 || r.status == 202, "%d %s", r.status, r.body);
    ck_assert_int_eq(th_json_int(r.body, "order_id", 0), id);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE user_id = %lld", 1), 1);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE id = %lld AND status = 'confirmed'"
                            " AND qty = 2",
                            id),
                     1);
    ck_assert_int_eq(pg_int("SELECT stock FROM skus WHERE id = %lld", SKU), 3);
    /* the buyer holds the limit in Redis too: the units were taken from the rebuilt state */
    ck_assert_int_eq(th_order(d.port, SKU, 1, 1, NULL, &r), 409);
    ck_assert_ptr_nonnull(strstr(r.body, "limit_exceeded"));
    th_assert_invariants(SKU);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_pending_answer_cancelled_by_its_buyer_ends_cancelled_after_redis_loss)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, no_writer);
    th_create_sku(d.port, SKU, 3, 1);
    struct th_response r;
    ck_assert_int_eq(th_order(d.port, SKU, 7, 1, NULL, &r), 202);
    long long id = th_json_int(r.body, "order_id", 0);
    char path[64], auth[TH_BUYER_AUTH_MAX];
    snprintf(path, sizeof path, "/api/v1/orders/%lld/cancel", id);
    ck_assert_int_eq(th_http(d.port, "POST", path, th_buyer_auth(7, auth, sizeof auth), NULL, &r),
                     0);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    flush_redis();
    lookup_until(d.port, 7, id, "cancelled");
    ck_assert_int_eq(pg_int("SELECT stock FROM skus WHERE id = %lld", SKU), 3);
    /* nothing was taken: the buyer may buy again */
    for (int waited = 0; waited < 10000; waited += 50) {
        th_order(d.port, SKU, 7, 1, NULL, &r);
        if (r.status != 503)
            break;
        usleep(50 * 1000);
    }
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.body);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_pending_answer_written_by_a_writer_later_is_its_own_record_not_a_conflict)
{
    th_reset();
    struct th_daemon a, b;
    th_daemon_start(&a, no_writer);
    th_create_sku(a.port, SKU, 5, 1);
    struct th_response r;
    ck_assert_int_eq(th_order(a.port, SKU, 3, 1, "key-3", &r), 202);
    long long id = th_json_int(r.body, "order_id", 0);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM order_pending WHERE order_id = %lld", id), 1);
    /* a writer comes and writes the order from its stream entry, as usual */
    th_daemon_start(&b, (const char *const[]){"SECKILL_PENDING_SETTLE_AFTER_MS=100",
                                              "SECKILL_RECONCILE_INTERVAL_MS=200", NULL});
    th_wait_drained(SKU, 10000);
    lookup_until(a.port, 3, id, "confirmed");
    for (int waited = 0; waited < 10000; waited += 50) {
        if (pg_int("SELECT count(*) FROM order_pending WHERE order_id = %lld AND outcome = "
                   "'written'",
                   id) == 1)
            break;
        usleep(50 * 1000);
    }
    ck_assert_int_eq(
        pg_int("SELECT count(*) FROM order_pending WHERE order_id = %lld AND outcome = 'written'",
               id),
        1);
    ck_assert_int_eq(th_order(b.port, SKU, 3, 1, "key-3", &r), 201);
    ck_assert_int_eq(th_json_int(r.body, "order_id", 0), id);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = %lld", SKU), 1);
    ck_assert_int_eq(pg_int("SELECT stock FROM skus WHERE id = %lld", SKU), 4);
    th_assert_invariants(SKU);
    th_daemon_stop(&b);
    th_daemon_stop(&a);
}
END_TEST

static void pg_admin(const char *sql)
{
    PGconn *c = th_pg_admin();
    PGresult *res = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(res);
    PQfinish(c);
}

START_TEST(test_pending_answer_that_cannot_be_recorded_is_503_with_its_key)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, no_writer);
    th_create_sku(d.port, SKU, 5, 1);
    /* PostgreSQL refuses the record: the answer may promise only what Redis holds */
    pg_admin("REVOKE INSERT ON order_pending FROM seckill_app");
    struct th_response r;
    int status = th_order(d.port, SKU, 4, 1, "key-4", &r);
    pg_admin("GRANT INSERT ON order_pending TO seckill_app");
    ck_assert_msg(status == 503, "%d %s", status, r.body);
    char key[64];
    th_json_str(r.body, "idempotency_key", key, sizeof key);
    ck_assert_str_eq(key, "key-4");
    ck_assert_int_eq(pg_int("SELECT count(*) FROM order_pending WHERE user_id = %lld", 4), 0);
    /* the key settles it: the same reservation, recorded now */
    ck_assert_int_eq(th_order(d.port, SKU, 4, 1, "key-4", &r), 202);
    long long id = th_json_int(r.body, "order_id", 0);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM order_pending WHERE order_id = %lld", id), 1);
    th_daemon_stop(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pending");
    TCase *tc = tcase_create("durable-202");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_pending_answer_survives_redis_restarted_empty_and_is_confirmed);
    tcase_add_test(tc, test_pending_answer_cancelled_by_its_buyer_ends_cancelled_after_redis_loss);
    tcase_add_test(tc,
                   test_pending_answer_written_by_a_writer_later_is_its_own_record_not_a_conflict);
    tcase_add_test(tc, test_pending_answer_that_cannot_be_recorded_is_503_with_its_key);
    suite_add_tcase(s, tc);
    return th_run(s);
}
