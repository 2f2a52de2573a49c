/*
 * Tests for the libevent lock API (rlock/async.h) against a
 * real Redis named by SECKILL_TEST_REDIS_ADMIN_URL: acquire, release, extend and
 * the watchdog on a loop, callbacks exactly once, wake-ups through the
 * shared notifier, and per-operation timeouts while Redis is paused.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "harness_rlock.h"
#include <rlock/async.h>
#include <rlock/metrics.h>
#include <rlock/notify.h>
#include <rlock/reentrant.h>
#include <rlock/rlock.h>

#define TEST_PREFIX "test_rlock_async"

/* ---- helpers ---- */

static void test_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s:%d:%s", TEST_PREFIX, (int)getpid(), name);
}

/* ---- a loop with a client ---- */

struct loop {
    struct event_base *base;
    redisAsyncContext *ac;
    struct rlock_async *a;
};

/* Records every callback so tests can assert "exactly once". */
struct outcome {
    int calls;
    enum rlock_status st;
    struct rlock_async_lock *l;
    char err[160];
    int64_t at;
};

static void on_acquired(enum rlock_status st, struct rlock_async_lock *l, const char *err,
                        void *arg)
{
    struct outcome *o = arg;
    o->calls++;
    o->st = st;
    o->l = l;
    o->at = rlock_mono_ms();
    snprintf(o->err, sizeof o->err, "%s", err);
}

static void on_done(enum rlock_status st, const char *err, void *arg)
{
    struct outcome *o = arg;
    o->calls++;
    o->st = st;
    o->at = rlock_mono_ms();
    snprintf(o->err, sizeof o->err, "%s", err);
}

static void loop_open(struct loop *lp, const struct rlock_async_opts *o)
{
    struct rlock_url u;
    th_rl_url(&u);
    /* The notifier wakes the loop from its own thread. */
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    lp->base = event_base_new();
    ck_assert_ptr_nonnull(lp->base);
    lp->ac = redisAsyncConnect(u.host, u.port);
    ck_assert_msg(lp->ac && !lp->ac->err, "async connect failed");
    ck_assert_int_eq(redisLibeventAttach(lp->ac, lp->base), REDIS_OK);
    ck_assert_int_eq(rlock_url_handshake_async(lp->ac, &u, NULL, NULL), 0);
    lp->a = rlock_async_new(lp->base, o);
    ck_assert_ptr_nonnull(lp->a);
    rlock_async_set_context(lp->a, lp->ac);
}

static void loop_close(struct loop *lp)
{
    rlock_async_free(lp->a);
    redisAsyncFree(lp->ac);
    event_base_free(lp->base);
}

/* Runs the loop until *flag != 0 or ms have passed. */
static void run_until(struct loop *lp, const int *flag, int ms)
{
    int64_t deadline = rlock_mono_ms() + ms;
    while ((!flag || !*flag) && rlock_mono_ms() < deadline) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(lp->base, &tv);
        event_base_dispatch(lp->base);
    }
}

static const struct rlock_async_opts default_opts = {.op_timeout_ms = 2000};

START_TEST(test_async_acquire_extend_release_each_callback_once)
{
    char key[128], rkey[128];
    test_key(key, sizeof key, "basic");
    test_key(rkey, sizeof rkey, "basic:reentrant");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s %s", key, rkey));
    struct loop lp;
    loop_open(&lp, &default_opts);

    struct outcome got = {0}, busy = {0}, ext = {0}, rel = {0};
    struct rlock_async_req req = {.key = key, .ttl_ms = 5000};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &req, on_acquired, &got), 0);
    ck_assert_int_eq(got.calls, 0); /* never before the call returns */
    run_until(&lp, &got.calls, 5000);
    ck_assert_msg(got.st == RLOCK_OK, "%s", got.err);
    ck_assert_ptr_nonnull(got.l);
    ck_assert_int_gt(rlock_async_remaining_ms(got.l), 0);
    ck_assert_str_eq(rlock_async_key(got.l), key);

    ck_assert_int_eq(rlock_async_acquire(lp.a, &req, on_acquired, &busy), 0);
    run_until(&lp, &busy.calls, 5000);
    ck_assert_int_eq(busy.st, RLOCK_BUSY);
    ck_assert_ptr_null(busy.l);

    ck_assert_int_eq(rlock_async_extend(got.l, 20000, on_done, &ext), 0);
    run_until(&lp, &ext.calls, 5000);
    ck_assert_msg(ext.st == RLOCK_OK, "%s", ext.err);
    ck_assert_int_gt(th_rl_int(c, "PTTL %s", key), 5000);
    ck_assert_int_gt(rlock_async_remaining_ms(got.l), 5000);

    ck_assert_int_eq(rlock_async_release(got.l, on_done, &rel), 0);
    run_until(&lp, &rel.calls, 5000);
    ck_assert_msg(rel.st == RLOCK_OK, "%s", rel.err);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 0);

    /* Reentrant, in Redisson's format: task 1 twice, task 2 shut out. */
    struct outcome r1 = {0}, r2 = {0}, r3 = {0}, d1 = {0}, d2 = {0};
    struct rlock_async_req rreq = {.key = rkey, .reentrant = 1, .thread_id = 1, .ttl_ms = 5000};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &rreq, on_acquired, &r1), 0);
    ck_assert_int_eq(rlock_async_acquire(lp.a, &rreq, on_acquired, &r2), 0);
    rreq.thread_id = 2;
    ck_assert_int_eq(rlock_async_acquire(lp.a, &rreq, on_acquired, &r3), 0);
    run_until(&lp, &r3.calls, 5000);
    run_until(&lp, &r2.calls, 5000);
    ck_assert_int_eq(r1.st, RLOCK_OK);
    ck_assert_int_eq(r2.st, RLOCK_OK);
    ck_assert_int_eq(r3.st, RLOCK_BUSY);
    char field[160];
    snprintf(field, sizeof field, "%s:1", rlock_process_uuid());
    redisReply *r = th_rl_cmd(c, "HGET %s %s", rkey, field);
    ck_assert_str_eq(r->str, "2");
    freeReplyObject(r);
    ck_assert_int_eq(rlock_async_release(r1.l, on_done, &d1), 0);
    run_until(&lp, &d1.calls, 5000);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", rkey), 1);
    ck_assert_int_eq(rlock_async_release(r2.l, on_done, &d2), 0);
    run_until(&lp, &d2.calls, 5000);
    ck_assert_int_eq(d2.st, RLOCK_OK);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", rkey), 0);

    /* Nothing is called twice, even given time. */
    run_until(&lp, NULL, 200);
    struct outcome *all[] = {&got, &busy, &ext, &rel, &r1, &r2, &r3, &d1, &d2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ck_assert_int_eq(all[i]->calls, 1);
    loop_close(&lp);
    redisFree(c);
}
END_TEST

struct release_later {
    redisContext *c;
    struct rlock *l;
    int64_t at;
    int done;
};

static void release_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct release_later *rl = arg;
    rl->at = rlock_mono_ms();
    rl->done = rlock_release(rl->c, rl->l) == RLOCK_OK ? 1 : -1;
}

START_TEST(test_async_waiter_is_woken_by_release_not_by_polling)
{
    char key[128];
    test_key(key, sizeof key, "wake");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    char err[128];
    struct rlock_notifier *n = rlock_notifier_new(th_rl_connect_cb, NULL, err, sizeof err);
    ck_assert_msg(n != NULL, "%s", err);
    for (int i = 0; i < 200 && !rlock_notifier_connected(n); i++)
        th_sleep_ms(10);

    struct rlock_async_opts o = {.op_timeout_ms = 2000, .notifier = n};
    struct loop lp;
    loop_open(&lp, &o);
    struct rlock held = {0};
    struct rlock_opts ho = {.ttl_ms = 10000};
    ck_assert_int_eq(rlock_acquire(c, &held, key, &ho), RLOCK_OK);

    /* Polls every 2..6 s; a release 300 ms in is seen at once or not at all. */
    struct outcome got = {0};
    struct rlock_async_req req = {.key = key, .ttl_ms = 5000, .wait_ms = 8000, .retry_ms = 4000};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &req, on_acquired, &got), 0);
    struct release_later rl = {.c = c, .l = &held};
    struct timeval tv = {0, 300000};
    ck_assert_int_eq(event_base_once(lp.base, -1, EV_TIMEOUT, release_cb, &rl, &tv), 0);
    run_until(&lp, &got.calls, 10000);
    ck_assert_int_eq(rl.done, 1);
    ck_assert_msg(got.st == RLOCK_OK, "%s %s", rlock_status_str(got.st), got.err);
    ck_assert_msg(got.at - rl.at < 1200, "acquired %lld ms after the release",
                  (long long)(got.at - rl.at));

    struct outcome rel = {0};
    ck_assert_int_eq(rlock_async_release(got.l, on_done, &rel), 0);
    run_until(&lp, &rel.calls, 5000);
    ck_assert_int_eq(rel.st, RLOCK_OK);
    loop_close(&lp);
    rlock_notifier_free(n);
    redisFree(c);
}
END_TEST

struct lost_seen {
    int calls;
    char key[128];
};

static void on_lost(const char *key, void *arg)
{
    struct lost_seen *s = arg;
    s->calls++;
    snprintf(s->key, sizeof s->key, "%s", key);
}

START_TEST(test_async_watchdog_renews_on_the_loop_and_reports_loss)
{
    char key[128];
    test_key(key, sizeof key, "watchdog");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    struct rlock_async_opts o = {.op_timeout_ms = 1000, .lease_ms = 300};
    struct loop lp;
    loop_open(&lp, &o);

    struct rlock_metrics before, after;
    rlock_metrics_snapshot(&before);
    struct lost_seen lost = {0};
    struct outcome got = {0};
    struct rlock_async_req req = {
        .key = key, .reentrant = 1, .thread_id = 42, .on_lost = on_lost, .lost_arg = &lost};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &req, on_acquired, &got), 0);
    run_until(&lp, &got.calls, 5000);
    ck_assert_msg(got.st == RLOCK_OK, "%s", got.err);

    /* Five leases later it is still ours. */
    run_until(&lp, NULL, 1500);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 1);
    ck_assert_int_eq(rlock_async_lost(got.l), 0);
    rlock_metrics_snapshot(&after);
    ck_assert_uint_ge(after.renewed - before.renewed, 3);

    /* Deleted by hand: the next renewal finds out and reports it once. */
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    run_until(&lp, &lost.calls, 3000);
    ck_assert_int_eq(lost.calls, 1);
    ck_assert_str_eq(lost.key, key);
    ck_assert_int_eq(rlock_async_lost(got.l), 1);
    ck_assert_int_eq(rlock_async_remaining_ms(got.l), 0);

    struct outcome rel = {0};
    ck_assert_int_eq(rlock_async_release(got.l, on_done, &rel), 0);
    run_until(&lp, &rel.calls, 5000);
    ck_assert_int_eq(rel.st, RLOCK_NOT_OWNER);
    run_until(&lp, NULL, 700);
    ck_assert_int_eq(lost.calls, 1);
    ck_assert_int_eq(rel.calls, 1);
    loop_close(&lp);
    redisFree(c);
}
END_TEST

START_TEST(test_async_op_timeout_fires_while_redis_is_paused)
{
    char key[128];
    test_key(key, sizeof key, "paused");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    struct rlock_async_opts o = {.op_timeout_ms = 200};
    struct loop lp;
    loop_open(&lp, &o);
    /* The async connection is up and answering before Redis stops. */
    struct outcome warm = {0}, warm_rel = {0};
    struct rlock_async_req req = {.key = key, .ttl_ms = 5000};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &req, on_acquired, &warm), 0);
    run_until(&lp, &warm.calls, 5000);
    ck_assert_int_eq(warm.st, RLOCK_OK);
    ck_assert_int_eq(rlock_async_release(warm.l, on_done, &warm_rel), 0);
    run_until(&lp, &warm_rel.calls, 5000);

    freeReplyObject(th_rl_cmd(c, "CLIENT PAUSE 1000 ALL"));
    int64_t t0 = rlock_mono_ms();
    struct outcome got = {0};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &req, on_acquired, &got), 0);
    run_until(&lp, &got.calls, 5000);
    int64_t took = got.at - t0;
    ck_assert_int_eq(got.st, RLOCK_ERR);
    ck_assert_msg(strstr(got.err, "timed out") != NULL, "err: %s", got.err);
    ck_assert_int_ge(took, 150);
    ck_assert_int_lt(took, 900);

    /* The pause ends, the late reply arrives: it is not reported a second
     * time, and the lock it took is given back instead of left to expire. */
    run_until(&lp, NULL, 1500);
    ck_assert_int_eq(got.calls, 1);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 0);
    loop_close(&lp);
    redisFree(c);
}
END_TEST

START_TEST(test_async_free_ends_pending_acquisitions_once)
{
    char key[128];
    test_key(key, sizeof key, "free");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    freeReplyObject(th_rl_cmd(c, "SET %s someone PX 10000", key));
    struct loop lp;
    loop_open(&lp, &default_opts);
    struct outcome got = {0};
    struct rlock_async_req req = {.key = key, .ttl_ms = 5000, .wait_ms = 5000, .retry_ms = 100};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &req, on_acquired, &got), 0);
    run_until(&lp, NULL, 250); /* busy at least once, now sleeping */
    ck_assert_int_eq(got.calls, 0);
    rlock_async_free(lp.a);
    ck_assert_int_eq(got.calls, 1);
    ck_assert_int_eq(got.st, RLOCK_ERR);
    lp.a = NULL;
    redisAsyncFree(lp.ac);
    event_base_free(lp.base);
    ck_assert_int_eq(got.calls, 1);
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    redisFree(c);
}
END_TEST

static Suite *async_suite(void)
{
    Suite *s = suite_create("rlock_async");
    TCase *tc = tcase_create("async");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_async_acquire_extend_release_each_callback_once);
    tcase_add_test(tc, test_async_waiter_is_woken_by_release_not_by_polling);
    tcase_add_test(tc, test_async_watchdog_renews_on_the_loop_and_reports_loss);
    tcase_add_test(tc, test_async_op_timeout_fires_while_redis_is_paused);
    tcase_add_test(tc, test_async_free_ends_pending_acquisitions_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(async_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
