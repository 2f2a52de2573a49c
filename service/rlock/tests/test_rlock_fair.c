/*
 * Tests for the fair lock (rlock/fair.h) against a real Redis
 * named by SECKILL_TEST_REDIS_ADMIN_URL: FIFO hand-over, waiters that give up or
 * vanish are pruned by the server's clock, and fair locks are reentrant.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness_rlock.h"
#include <rlock/fair.h>
#include <rlock/notify.h>
#include <rlock/reentrant.h>
#include <rlock/rlock.h>

#define TEST_PREFIX "test_rlock_fair"

/* ---- helpers ---- */

static void test_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s:%d:%s", TEST_PREFIX, (int)getpid(), name);
}

static long long queue_len(redisContext *c, const char *key)
{
    char *q = rlock_channel_name(RLOCK_FAIR_QUEUE_PREFIX, key);
    ck_assert_ptr_nonnull(q);
    long long n = th_rl_int(c, "LLEN %s", q);
    free(q);
    return n;
}

static void del_fair(redisContext *c, const char *key)
{
    char *q = rlock_channel_name(RLOCK_FAIR_QUEUE_PREFIX, key);
    char *t = rlock_channel_name(RLOCK_FAIR_TIMEOUT_PREFIX, key);
    ck_assert(q && t);
    freeReplyObject(th_rl_cmd(c, "DEL %s %s %s", key, q, t));
    free(q);
    free(t);
}

#define FIFO_WAITERS 5

struct fifo {
    char key[128];
    struct rlock_notifier *n;
    pthread_mutex_t mu;
    int order[FIFO_WAITERS];
    int served;
    atomic_int failures;
    char failure[160];
};

struct fifo_arg {
    struct fifo *f;
    int index;
};

static void *fifo_waiter(void *arg)
{
    struct fifo_arg *a = arg;
    struct fifo *f = a->f;
    char why[256];
    redisContext *c = th_rl_connect(why, sizeof why);
    if (!c) {
        atomic_fetch_add(&f->failures, 1);
        return NULL;
    }
    struct rlock_opts o = {.ttl_ms = 10000, .wait_ms = 20000, .retry_ms = 200, .notifier = f->n};
    struct rlock_reentrant l = {0};
    enum rlock_status st = rlock_fair_acquire(c, &l, f->key, NULL, 0, &o, NULL);
    if (st == RLOCK_OK) {
        pthread_mutex_lock(&f->mu);
        f->order[f->served++] = a->index;
        pthread_mutex_unlock(&f->mu);
        th_sleep_ms(20);
        if (rlock_reentrant_release(c, &l) != RLOCK_OK)
            st = RLOCK_ERR;
    }
    if (st != RLOCK_OK && atomic_fetch_add(&f->failures, 1) == 0)
        snprintf(f->failure, sizeof f->failure, "waiter %d: %s %.100s", a->index,
                 rlock_status_str(st), l.err);
    redisFree(c);
    return NULL;
}

START_TEST(test_fair_lock_serves_waiters_in_arrival_order)
{
    static struct fifo f;
    memset(&f, 0, sizeof f);
    pthread_mutex_init(&f.mu, NULL);
    test_key(f.key, sizeof f.key, "fifo");
    char err[128];
    f.n = rlock_notifier_new(th_rl_connect_cb, NULL, err, sizeof err);
    ck_assert_msg(f.n != NULL, "%s", err);
    redisContext *c = th_rl_connect_or_fail();
    del_fair(c, f.key);

    struct rlock_opts o = {.ttl_ms = 10000};
    struct rlock_reentrant holder = {0};
    ck_assert_int_eq(rlock_fair_acquire(c, &holder, f.key, NULL, 0, &o, NULL), RLOCK_OK);
    ck_assert_int_eq(holder.fair, 1);

    /* Queue the waiters one by one, in a known order. */
    pthread_t t[FIFO_WAITERS];
    struct fifo_arg args[FIFO_WAITERS];
    for (int i = 0; i < FIFO_WAITERS; i++) {
        args[i] = (struct fifo_arg){&f, i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, fifo_waiter, &args[i]), 0);
        int waited = 0;
        while (queue_len(c, f.key) < i + 1 && waited < 5000) {
            th_sleep_ms(5);
            waited += 5;
        }
        ck_assert_int_eq(queue_len(c, f.key), i + 1);
    }

    ck_assert_int_eq(rlock_reentrant_release(c, &holder), RLOCK_OK);
    for (int i = 0; i < FIFO_WAITERS; i++)
        pthread_join(t[i], NULL);
    ck_assert_msg(atomic_load(&f.failures) == 0, "%s", f.failure);
    ck_assert_int_eq(f.served, FIFO_WAITERS);
    for (int i = 0; i < FIFO_WAITERS; i++)
        ck_assert_int_eq(f.order[i], i);
    ck_assert_int_eq(queue_len(c, f.key), 0);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", f.key), 0);
    rlock_notifier_free(f.n);
    pthread_mutex_destroy(&f.mu);
    redisFree(c);
}
END_TEST

START_TEST(test_fair_waiter_that_gives_up_leaves_the_queue)
{
    char key[128];
    test_key(key, sizeof key, "giveup");
    redisContext *c = th_rl_connect_or_fail();
    redisContext *w = th_rl_connect_or_fail();
    del_fair(c, key);

    struct rlock_opts o = {.ttl_ms = 10000};
    struct rlock_reentrant holder = {0}, waiter = {0};
    ck_assert_int_eq(rlock_fair_acquire(c, &holder, key, NULL, 1, &o, NULL), RLOCK_OK);
    struct rlock_opts wo = {.ttl_ms = 10000, .wait_ms = 300, .retry_ms = 50};
    ck_assert_int_eq(rlock_fair_acquire(w, &waiter, key, NULL, 2, &wo, NULL), RLOCK_BUSY);
    ck_assert_int_eq(queue_len(c, key), 0);
    ck_assert_ptr_null(waiter.key);

    /* With nobody queued, the next owner gets it at once after release. */
    ck_assert_int_eq(rlock_reentrant_release(c, &holder), RLOCK_OK);
    wo.wait_ms = 0;
    ck_assert_int_eq(rlock_fair_acquire(w, &waiter, key, NULL, 2, &wo, NULL), RLOCK_OK);
    ck_assert_int_eq(rlock_reentrant_release(w, &waiter), RLOCK_OK);
    redisFree(w);
    redisFree(c);
}
END_TEST

START_TEST(test_fair_waiter_that_vanished_is_pruned_by_server_time)
{
    char key[128];
    test_key(key, sizeof key, "vanished");
    redisContext *c = th_rl_connect_or_fail();
    del_fair(c, key);

    /* A crashed client left itself at the head of the queue; its deadline
     * is on the server's clock, 400 ms from now. */
    char *q = rlock_channel_name(RLOCK_FAIR_QUEUE_PREFIX, key);
    char *t = rlock_channel_name(RLOCK_FAIR_TIMEOUT_PREFIX, key);
    redisReply *r = th_rl_cmd(c, "TIME");
    long long now = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    freeReplyObject(th_rl_cmd(c, "RPUSH %s ghost:1", q));
    freeReplyObject(th_rl_cmd(c, "ZADD %s %lld ghost:1", t, now + 400));
    freeReplyObject(th_rl_cmd(c, "PEXPIRE %s 10000", q));
    freeReplyObject(th_rl_cmd(c, "PEXPIRE %s 10000", t));

    /* The lock is free, but it is the ghost's turn: no immediate grant. */
    struct rlock_opts once = {.ttl_ms = 10000};
    struct rlock_reentrant l = {0};
    ck_assert_int_eq(rlock_fair_acquire(c, &l, key, NULL, 3, &once, NULL), RLOCK_BUSY);

    /* Once the ghost's deadline passes it is pruned and we are served. */
    int64_t t0 = rlock_mono_ms();
    struct rlock_opts o = {.ttl_ms = 10000, .wait_ms = 5000, .retry_ms = 50};
    ck_assert_int_eq(rlock_fair_acquire(c, &l, key, NULL, 3, &o, NULL), RLOCK_OK);
    int64_t waited = rlock_mono_ms() - t0;
    ck_assert_int_ge(waited, 200);
    ck_assert_int_lt(waited, 4000);
    redisReply *pos = th_rl_cmd(c, "LPOS %s ghost:1", q);
    ck_assert_int_eq(pos->type, REDIS_REPLY_NIL); /* pruned */
    freeReplyObject(pos);
    pos = th_rl_cmd(c, "ZSCORE %s ghost:1", t);
    ck_assert_int_eq(pos->type, REDIS_REPLY_NIL);
    freeReplyObject(pos);
    free(q);
    free(t);
    ck_assert_int_eq(rlock_reentrant_release(c, &l), RLOCK_OK);
    redisFree(c);
}
END_TEST

START_TEST(test_fair_lock_is_reentrant_and_excludes_plain_reentrant_owners)
{
    char key[128];
    test_key(key, sizeof key, "fairreentrant");
    redisContext *c = th_rl_connect_or_fail();
    del_fair(c, key);

    struct rlock_opts o = {.ttl_ms = 10000};
    struct rlock_reentrant l = {0}, other = {0};
    ck_assert_int_eq(rlock_fair_acquire(c, &l, key, NULL, 1, &o, NULL), RLOCK_OK);
    ck_assert_int_eq(rlock_fair_acquire(c, &l, key, NULL, 1, &o, NULL), RLOCK_OK);
    ck_assert_int_eq(l.holds, 2);
    /* The same hash format: a plain reentrant owner is shut out too. */
    ck_assert_int_eq(rlock_reentrant_acquire(c, &other, key, NULL, 2, &o), RLOCK_BUSY);
    ck_assert_int_eq(rlock_reentrant_release(c, &l), RLOCK_OK);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 1);
    ck_assert_int_eq(rlock_reentrant_release(c, &l), RLOCK_OK);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 0);
    ck_assert_int_eq(rlock_reentrant_release(c, &l), RLOCK_NOT_OWNER);
    redisFree(c);
}
END_TEST

static Suite *fair_suite(void)
{
    Suite *s = suite_create("rlock_fair");
    TCase *tc = tcase_create("fair");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fair_lock_serves_waiters_in_arrival_order);
    tcase_add_test(tc, test_fair_waiter_that_gives_up_leaves_the_queue);
    tcase_add_test(tc, test_fair_waiter_that_vanished_is_pruned_by_server_time);
    tcase_add_test(tc, test_fair_lock_is_reentrant_and_excludes_plain_reentrant_owners);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fair_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
