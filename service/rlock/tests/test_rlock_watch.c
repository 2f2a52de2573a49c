/*
 * Tests for the watchdog (rlock/watch.h) and the transaction
 * completion hook (rlock_release_on_complete) against a real Redis named by
 * SECKILL_TEST_REDIS_ADMIN_URL.  Leases are 300 ms so the tests stay fast; every
 * wait for an effect is bounded and generous.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness_redis.h"
#include "harness_rlock.h"
#include <rlock/metrics.h>
#include <rlock/reentrant.h>
#include <rlock/rlock.h>
#include <rlock/watch.h>

#define TEST_PREFIX "test_rlock_watch"
#define LEASE_MS 300

/* ---- helpers ---- */

static void test_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s:%d:%s", TEST_PREFIX, (int)getpid(), name);
}

static struct rlock_watchdog *watchdog_start(void)
{
    char err[128];
    struct rlock_watchdog_opts wo = {.lease_ms = LEASE_MS, .op_timeout_ms = 1000};
    struct rlock_watchdog *wd = rlock_watchdog_new(th_rl_connect_cb, NULL, &wo, err, sizeof err);
    ck_assert_msg(wd != NULL, "%s", err);
    return wd;
}

struct lost_flag {
    atomic_int calls;
    char key[128];
};

static void on_lost(const char *key, void *arg)
{
    struct lost_flag *f = arg;
    snprintf(f->key, sizeof f->key, "%s", key);
    atomic_fetch_add(&f->calls, 1);
}

/* Waits up to ms for f to be called; returns the number of calls. */
static int wait_lost(struct lost_flag *f, int ms)
{
    for (int waited = 0; waited < ms && atomic_load(&f->calls) == 0; waited += 10)
        th_sleep_ms(10);
    return atomic_load(&f->calls);
}

START_TEST(test_watchdog_keeps_simple_lock_alive_for_many_leases)
{
    char key[128];
    test_key(key, sizeof key, "alive:simple");
    redisContext *c = th_rl_connect_or_fail();
    redisContext *other = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    struct rlock_watchdog *wd = watchdog_start();
    struct lost_flag lost = {0};

    struct rlock_metrics before, after;
    rlock_metrics_snapshot(&before);
    struct rlock_opts o = {.ttl_ms = 0, .watchdog = wd, .on_lost = on_lost, .lost_arg = &lost};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    ck_assert_ptr_nonnull(l.watch);
    ck_assert_int_le(th_rl_int(c, "PTTL %s", key), LEASE_MS);

    /* Held for five leases: without renewal it would be gone after one. */
    for (int i = 0; i < 5; i++) {
        th_sleep_ms(LEASE_MS);
        ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 1);
        struct rlock intruder = {0};
        struct rlock_opts io = {.ttl_ms = 5000};
        ck_assert_int_eq(rlock_acquire(other, &intruder, key, &io), RLOCK_BUSY);
        ck_assert_int_eq(rlock_lost(&l), 0);
        ck_assert_int_gt(rlock_remaining_ms(&l), 0);
    }
    rlock_metrics_snapshot(&after);
    ck_assert_uint_ge(after.renewed - before.renewed, 5);
    ck_assert_int_eq(atomic_load(&lost.calls), 0);

    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 0);
    rlock_watchdog_free(wd);
    redisFree(other);
    redisFree(c);
}
END_TEST

START_TEST(test_watchdog_keeps_multi_and_reentrant_locks_alive)
{
    char k1[128], k2[128], rk[128];
    test_key(k1, sizeof k1, "{alive}:a");
    test_key(k2, sizeof k2, "{alive}:b");
    test_key(rk, sizeof rk, "alive:reentrant");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s %s %s", k1, k2, rk));
    struct rlock_watchdog *wd = watchdog_start();

    struct rlock_opts o = {.ttl_ms = 0, .watchdog = wd};
    const char *keys[] = {k1, k2};
    struct rlock m = {0};
    struct rlock_reentrant r = {0};
    ck_assert_int_eq(rlock_acquire_multi(c, &m, keys, 2, &o), RLOCK_OK);
    ck_assert_int_eq(rlock_reentrant_acquire(c, &r, rk, NULL, 0, &o), RLOCK_OK);
    ck_assert_int_eq(rlock_reentrant_acquire(c, &r, rk, NULL, 0, &o), RLOCK_OK); /* re-entry */
    th_sleep_ms(5 * LEASE_MS);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s %s %s", k1, k2, rk), 3);
    ck_assert_int_eq(rlock_lost(&m), 0);
    ck_assert_int_eq(rlock_reentrant_lost(&r), 0);

    ck_assert_int_eq(rlock_release(c, &m), RLOCK_OK);
    ck_assert_int_eq(rlock_reentrant_release(c, &r), RLOCK_OK);
    th_sleep_ms(2 * LEASE_MS); /* one hold left: still renewed */
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", rk), 1);
    ck_assert_int_eq(rlock_reentrant_release(c, &r), RLOCK_OK);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s %s %s", k1, k2, rk), 0);
    rlock_watchdog_free(wd);
    redisFree(c);
}
END_TEST

START_TEST(test_lost_callback_fires_when_the_key_is_deleted)
{
    char key[128], rkey[128];
    test_key(key, sizeof key, "lost:simple");
    test_key(rkey, sizeof rkey, "lost:reentrant");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s %s", key, rkey));
    struct rlock_watchdog *wd = watchdog_start();
    struct lost_flag lost = {0}, rlost = {0};

    struct rlock_metrics before, after;
    rlock_metrics_snapshot(&before);
    struct rlock_opts o = {.watchdog = wd, .on_lost = on_lost, .lost_arg = &lost};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    o.lost_arg = &rlost;
    struct rlock_reentrant r = {0};
    ck_assert_int_eq(rlock_reentrant_acquire(c, &r, rkey, NULL, 0, &o), RLOCK_OK);

    /* An operator (or a lease that ran out) takes the locks away. */
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    freeReplyObject(th_rl_cmd(c, "HSET %s %s 1", rkey, "someone-else:1"));
    freeReplyObject(th_rl_cmd(c, "HDEL %s %s", rkey, r.owner));
    freeReplyObject(th_rl_cmd(c, "PEXPIRE %s 10000", rkey));

    ck_assert_int_eq(wait_lost(&lost, 3000), 1);
    ck_assert_int_eq(wait_lost(&rlost, 3000), 1);
    ck_assert_str_eq(lost.key, key);
    ck_assert_str_eq(rlost.key, rkey);
    /* What a writer checks right before COMMIT. */
    ck_assert_int_eq(rlock_lost(&l), 1);
    ck_assert_int_eq(rlock_remaining_ms(&l), 0);
    ck_assert_int_eq(rlock_reentrant_lost(&r), 1);
    rlock_metrics_snapshot(&after);
    ck_assert_uint_ge(after.lost - before.lost, 2);

    /* Called once only, and the locks are not resurrected. */
    th_sleep_ms(2 * LEASE_MS);
    ck_assert_int_eq(atomic_load(&lost.calls), 1);
    ck_assert_int_eq(atomic_load(&rlost.calls), 1);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_NOT_OWNER);
    ck_assert_int_eq(rlock_reentrant_release(c, &r), RLOCK_NOT_OWNER);
    ck_assert_int_eq(th_rl_int(c, "HEXISTS %s %s", rkey, "someone-else:1"), 1);
    freeReplyObject(th_rl_cmd(c, "DEL %s", rkey));
    rlock_watchdog_free(wd);
    redisFree(c);
}
END_TEST

START_TEST(test_watchdog_stops_after_release)
{
    char key[128];
    test_key(key, sizeof key, "stops");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    struct rlock_watchdog *wd = watchdog_start();
    struct lost_flag lost = {0};

    struct rlock_opts o = {.watchdog = wd, .on_lost = on_lost, .lost_arg = &lost};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    th_sleep_ms(LEASE_MS);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);

    struct rlock_metrics before, after;
    rlock_metrics_snapshot(&before);
    /* The next holder's lease must run down untouched. */
    freeReplyObject(th_rl_cmd(c, "SET %s next-owner PX 5000", key));
    th_sleep_ms(4 * LEASE_MS);
    rlock_metrics_snapshot(&after);
    ck_assert_uint_eq(after.renewed, before.renewed);
    long long pttl = th_rl_int(c, "PTTL %s", key);
    ck_assert_int_le(pttl, 5000 - 3 * LEASE_MS);
    ck_assert_int_eq(atomic_load(&lost.calls), 0);

    /* Clearing (no release) stops it as well. */
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    rlock_clear(&l);
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    th_sleep_ms(2 * LEASE_MS);
    ck_assert_int_eq(atomic_load(&lost.calls), 0);
    rlock_watchdog_free(wd);
    redisFree(c);
}
END_TEST

/* ---- transaction binding ---- */

static redisContext *borrow(void *arg)
{
    return arg;
}

START_TEST(test_release_on_complete_releases_on_commit_and_on_rollback)
{
    char key[128], rkey[128];
    test_key(key, sizeof key, "tx:simple");
    test_key(rkey, sizeof rkey, "tx:reentrant");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s %s", key, rkey));
    enum { COMMITTED = 0, ROLLED_BACK = 1 }; /* any caller's outcome codes */

    struct rlock_opts o = {.ttl_ms = 10000};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    struct rlock_binding b = {.kind = RLOCK_KIND_SIMPLE, .lock = &l, .conn = borrow, .conn_arg = c};
    rlock_release_on_complete(COMMITTED, &b);
    ck_assert_int_eq(b.status, RLOCK_OK);
    ck_assert_int_eq(b.outcome, COMMITTED);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 0);
    ck_assert_ptr_null(l.keys);

    struct rlock_reentrant r = {0};
    ck_assert_int_eq(rlock_reentrant_acquire(c, &r, rkey, NULL, 0, &o), RLOCK_OK);
    struct rlock_binding rb = {
        .kind = RLOCK_KIND_REENTRANT, .lock = &r, .conn = borrow, .conn_arg = c};
    rlock_release_on_complete(ROLLED_BACK, &rb);
    ck_assert_int_eq(rb.status, RLOCK_OK);
    ck_assert_int_eq(rb.outcome, ROLLED_BACK);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", rkey), 0);

    /* No connection: the lock is still emptied, the key expires by lease. */
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    struct rlock_binding nb = {.kind = RLOCK_KIND_SIMPLE, .lock = &l, .conn = borrow};
    rlock_release_on_complete(COMMITTED, &nb);
    ck_assert_int_eq(nb.status, RLOCK_ERR);
    ck_assert_ptr_null(l.keys);
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    redisFree(c);
}
END_TEST

/* A connection function whose first connection reaches a replica (a master
 * that a failover demoted while the watchdog held its connection) and every
 * later one the master. */
struct flip {
    int first_port, then_port;
    atomic_int calls;
};

static redisContext *flip_connect(void *arg)
{
    struct flip *f = arg;
    int n = atomic_fetch_add(&f->calls, 1);
    struct timeval tv = {2, 0};
    return redisConnectWithTimeout("127.0.0.1", n == 0 ? f->first_port : f->then_port, tv);
}

START_TEST(test_watchdog_leaves_a_demoted_server)
{
    struct th_redis_server master, replica;
    th_redis_pair_start(&master, &replica);

    struct flip f = {.first_port = replica.port, .then_port = master.port};
    char err[128];
    struct rlock_watchdog_opts wo = {.lease_ms = LEASE_MS, .op_timeout_ms = 1000};
    struct rlock_watchdog *wd = rlock_watchdog_new(flip_connect, &f, &wo, err, sizeof err);
    ck_assert_msg(wd != NULL, "%s", err);
    redisContext *m = th_redis_server_connect(&master);
    struct lost_flag lost = {0};
    struct rlock_opts o = {.ttl_ms = 0, .watchdog = wd, .on_lost = on_lost, .lost_arg = &lost};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(m, &l, "lock:{demoted}", &o), RLOCK_OK);
    /* The first renewal meets READONLY; the next goes to the master. */
    for (int i = 0; i < 5; i++) {
        th_sleep_ms(LEASE_MS);
        ck_assert_int_eq(th_rl_int(m, "EXISTS lock:{demoted}"), 1);
        ck_assert_int_eq(rlock_lost(&l), 0);
    }
    ck_assert_int_eq(atomic_load(&lost.calls), 0);
    ck_assert_int_ge(atomic_load(&f.calls), 2);
    ck_assert_int_eq(rlock_release(m, &l), RLOCK_OK);
    rlock_watchdog_free(wd);
    redisFree(m);
    th_redis_server_stop(&replica);
    th_redis_server_stop(&master);
}
END_TEST

static Suite *watch_suite(void)
{
    Suite *s = suite_create("rlock_watch");
    TCase *tc = tcase_create("watchdog");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_watchdog_keeps_simple_lock_alive_for_many_leases);
    tcase_add_test(tc, test_watchdog_keeps_multi_and_reentrant_locks_alive);
    tcase_add_test(tc, test_lost_callback_fires_when_the_key_is_deleted);
    tcase_add_test(tc, test_watchdog_stops_after_release);
    tcase_add_test(tc, test_release_on_complete_releases_on_commit_and_on_rollback);
    tcase_add_test(tc, test_watchdog_leaves_a_demoted_server);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(watch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
