/*
 * Tests for the libevent lock API (rlock/async.h) against a
 * real Redis named by SECKILL_TEST_REDIS_ADMIN_URL: acquire, release, extend and
 * the watchdog on a loop, callbacks exactly once, wake-ups through the
 * shared notifier, per-operation deadlines (one timer per client) while
 * Redis is paused or frozen, scripts reloaded after SCRIPT FLUSH, and the
 * simple lock's SET NX PX format.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
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

#include "harness_redis.h"
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

/* ---- deadlines with one timer per client, against a frozen Redis ---- */

/* A loop on a private server (the test may SIGSTOP it). */
static void loop_open_port(struct loop *lp, int port, const struct rlock_async_opts *o)
{
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    lp->base = event_base_new();
    ck_assert_ptr_nonnull(lp->base);
    lp->ac = redisAsyncConnect("127.0.0.1", port);
    ck_assert_msg(lp->ac && !lp->ac->err, "async connect failed");
    ck_assert_int_eq(redisLibeventAttach(lp->ac, lp->base), REDIS_OK);
    lp->a = rlock_async_new(lp->base, o);
    ck_assert_ptr_nonnull(lp->a);
    rlock_async_set_context(lp->a, lp->ac);
}

/* Acquires key on lp and returns the lock (asserts RLOCK_OK). */
static struct rlock_async_lock *must_acquire(struct loop *lp, const char *key, int ttl_ms)
{
    struct outcome got = {0};
    struct rlock_async_req req = {.key = key, .ttl_ms = ttl_ms};
    ck_assert_int_eq(rlock_async_acquire(lp->a, &req, on_acquired, &got), 0);
    run_until(lp, &got.calls, 5000);
    ck_assert_msg(got.st == RLOCK_OK, "%s %s", rlock_status_str(got.st), got.err);
    return got.l;
}

START_TEST(test_async_deadlines_fire_while_redis_is_frozen)
{
    struct th_redis_server srv = {0};
    th_redis_server_start(&srv, NULL);
    redisContext *c = th_redis_server_connect(&srv);
    struct rlock_async_opts o = {.op_timeout_ms = 300};
    struct loop lp;
    loop_open_port(&lp, srv.port, &o);
    struct rlock_async_lock *held = must_acquire(&lp, "frozen:held", 10000);

    /* Redis stops answering (not even a TCP reset): only deadlines end the
     * operations.  They are sent 150 ms apart, so a timer armed for the
     * first and never re-armed would end the second too early or never. */
    ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
    struct outcome a1 = {0}, a2 = {0}, rel = {0}, ext = {0};
    struct rlock_async_req r1 = {.key = "frozen:a", .ttl_ms = 10000};
    struct rlock_async_req r2 = {.key = "frozen:b", .ttl_ms = 10000};
    int64_t t1 = rlock_mono_ms();
    ck_assert_int_eq(rlock_async_acquire(lp.a, &r1, on_acquired, &a1), 0);
    run_until(&lp, NULL, 150);
    int64_t t2 = rlock_mono_ms();
    ck_assert_int_eq(rlock_async_acquire(lp.a, &r2, on_acquired, &a2), 0);
    ck_assert_int_eq(rlock_async_extend(held, 20000, on_done, &ext), 0);
    run_until(&lp, &a2.calls, 3000);
    run_until(&lp, &ext.calls, 3000);
    ck_assert_int_eq(a1.calls, 1);
    ck_assert_int_eq(a1.st, RLOCK_ERR);
    ck_assert_msg(strstr(a1.err, "timed out") != NULL, "err: %s", a1.err);
    ck_assert_int_ge(a1.at - t1, 280);
    ck_assert_int_lt(a1.at - t1, 800);
    ck_assert_int_eq(a2.st, RLOCK_ERR);
    ck_assert_int_ge(a2.at - t2, 280);
    ck_assert_int_lt(a2.at - t2, 800);
    ck_assert_int_ge(a2.at - a1.at, 100); /* each at its own deadline */
    ck_assert_int_eq(ext.st, RLOCK_ERR);

    /* A release while frozen ends by its deadline too. */
    int64_t t3 = rlock_mono_ms();
    ck_assert_int_eq(rlock_async_release(held, on_done, &rel), 0);
    run_until(&lp, &rel.calls, 3000);
    ck_assert_int_eq(rel.st, RLOCK_ERR);
    ck_assert_msg(strstr(rel.err, "timed out") != NULL, "err: %s", rel.err);
    ck_assert_int_ge(rel.at - t3, 280);
    ck_assert_int_lt(rel.at - t3, 800);

    /* Thawed: the late replies are not reported again, and the two
     * acquisitions that took their keys after giving up are undone. */
    ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
    run_until(&lp, NULL, 500);
    ck_assert_int_eq(a1.calls + a2.calls + rel.calls + ext.calls, 4);
    ck_assert_int_eq(th_rl_int(c, "EXISTS frozen:a frozen:b"), 0);

    /* The timer works again after the list emptied. */
    struct rlock_async_lock *again = must_acquire(&lp, "frozen:a", 10000);
    struct outcome rel2 = {0};
    ck_assert_int_eq(rlock_async_release(again, on_done, &rel2), 0);
    run_until(&lp, &rel2.calls, 3000);
    ck_assert_int_eq(rel2.st, RLOCK_OK);

    loop_close(&lp);
    redisFree(c);
    th_redis_server_stop(&srv);
}
END_TEST

struct free_in_cb {
    struct loop *lp;
    int calls;
    enum rlock_status st;
};

static void acquired_then_free_client(enum rlock_status st, struct rlock_async_lock *l,
                                      const char *err, void *arg)
{
    (void)l;
    (void)err;
    struct free_in_cb *f = arg;
    f->calls++;
    f->st = st;
    rlock_async_free(f->lp->a);
    f->lp->a = NULL;
}

START_TEST(test_async_client_freed_inside_a_timeout_callback)
{
    struct th_redis_server srv = {0};
    th_redis_server_start(&srv, NULL);
    struct rlock_async_opts o = {.op_timeout_ms = 200};
    struct loop lp;
    loop_open_port(&lp, srv.port, &o);
    struct rlock_async_lock *held = must_acquire(&lp, "free:held", 10000);
    rlock_async_forget(held);

    ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
    /* Two acquisitions expire in the same timer run; the first one's
     * callback frees the client, which ends the second at once. */
    struct free_in_cb f = {.lp = &lp};
    struct outcome other = {0};
    struct rlock_async_req r1 = {.key = "free:a", .ttl_ms = 10000};
    struct rlock_async_req r2 = {.key = "free:b", .ttl_ms = 10000};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &r1, acquired_then_free_client, &f), 0);
    ck_assert_int_eq(rlock_async_acquire(lp.a, &r2, on_acquired, &other), 0);
    run_until(&lp, &other.calls, 3000);
    ck_assert_int_eq(f.calls, 1);
    ck_assert_int_eq(f.st, RLOCK_ERR);
    ck_assert_int_eq(other.calls, 1);
    ck_assert_int_eq(other.st, RLOCK_ERR);
    ck_assert_ptr_null(lp.a);
    ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
    run_until(&lp, NULL, 300);
    ck_assert_int_eq(f.calls, 1);
    ck_assert_int_eq(other.calls, 1);
    redisAsyncFree(lp.ac);
    event_base_free(lp.base);
    th_redis_server_stop(&srv);
}
END_TEST

/* ---- formats and scripts ---- */

START_TEST(test_async_simple_lock_is_set_nx_px_and_scripts_reload)
{
    char key[128], rkey[128], wrong[128];
    test_key(key, sizeof key, "format");
    test_key(rkey, sizeof rkey, "format:reentrant");
    test_key(wrong, sizeof wrong, "format:wrongtype");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s %s %s", key, rkey, wrong));
    struct loop lp;
    loop_open(&lp, &default_opts);

    /* Every script is gone: each one is sent again as EVAL. */
    freeReplyObject(th_rl_cmd(c, "SCRIPT FLUSH"));
    struct rlock_async_lock *l = must_acquire(&lp, key, 7000);
    redisReply *r = th_rl_cmd(c, "GET %s", key);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_int_eq((int)r->len, RLOCK_TOKEN_LEN);
    ck_assert_uint_eq(strspn(r->str, "0123456789abcdef"), RLOCK_TOKEN_LEN);
    freeReplyObject(r);
    long long pttl = th_rl_int(c, "PTTL %s", key);
    ck_assert_int_gt(pttl, 5000);
    ck_assert_int_le(pttl, 7000);

    struct outcome ext = {0}, rel = {0};
    ck_assert_int_eq(rlock_async_extend(l, 20000, on_done, &ext), 0);
    run_until(&lp, &ext.calls, 5000);
    ck_assert_msg(ext.st == RLOCK_OK, "%s", ext.err);
    ck_assert_int_gt(th_rl_int(c, "PTTL %s", key), 15000);
    freeReplyObject(th_rl_cmd(c, "SCRIPT FLUSH"));
    ck_assert_int_eq(rlock_async_release(l, on_done, &rel), 0);
    run_until(&lp, &rel.calls, 5000);
    ck_assert_msg(rel.st == RLOCK_OK, "%s", rel.err);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 0);

    /* The reentrant lock's scripts too. */
    freeReplyObject(th_rl_cmd(c, "SCRIPT FLUSH"));
    struct outcome got = {0}, rrel = {0};
    struct rlock_async_req rreq = {.key = rkey, .reentrant = 1, .thread_id = 7, .ttl_ms = 5000};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &rreq, on_acquired, &got), 0);
    run_until(&lp, &got.calls, 5000);
    ck_assert_msg(got.st == RLOCK_OK, "%s", got.err);
    freeReplyObject(th_rl_cmd(c, "SCRIPT FLUSH"));
    ck_assert_int_eq(rlock_async_release(got.l, on_done, &rrel), 0);
    run_until(&lp, &rrel.calls, 5000);
    ck_assert_msg(rrel.st == RLOCK_OK, "%s", rrel.err);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", rkey), 0);

    /* A key of another type is busy, as for the sync API. */
    freeReplyObject(th_rl_cmd(c, "HSET %s f v", wrong));
    struct outcome busy = {0};
    struct rlock_async_req wreq = {.key = wrong, .ttl_ms = 5000};
    ck_assert_int_eq(rlock_async_acquire(lp.a, &wreq, on_acquired, &busy), 0);
    run_until(&lp, &busy.calls, 5000);
    ck_assert_int_eq(busy.st, RLOCK_BUSY);
    ck_assert_int_eq(th_rl_int(c, "HLEN %s", wrong), 1);
    freeReplyObject(th_rl_cmd(c, "DEL %s", wrong));
    loop_close(&lp);
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
    tcase_add_test(tc, test_async_deadlines_fire_while_redis_is_frozen);
    tcase_add_test(tc, test_async_client_freed_inside_a_timeout_callback);
    tcase_add_test(tc, test_async_simple_lock_is_set_nx_px_and_scripts_reload);
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
