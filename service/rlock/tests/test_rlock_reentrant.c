/*
 * Tests for the reentrant lock (rlock/reentrant.h) and the
 * shared pub/sub wake-up (rlock/notify.h) against a real Redis named by
 * SECKILL_TEST_REDIS_URL.  Keys carry the pid so runs do not collide.
 */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness_rlock.h"
#include <rlock/metrics.h>
#include <rlock/notify.h>
#include <rlock/reentrant.h>
#include <rlock/rlock.h>

#define TEST_PREFIX "test_rlock_reentrant"

/* ---- helpers ---- */

static void test_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s:%d:%s", TEST_PREFIX, (int)getpid(), name);
}

/* Reads HGET key field as an integer; -1 if absent. */
static long long hget_int(redisContext *c, const char *key, const char *field)
{
    redisReply *r = th_rl_cmd(c, "HGET %s %s", key, field);
    long long n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return n;
}

/* ---- reentrancy ---- */

START_TEST(test_reentrant_counts_holds_and_only_last_release_frees)
{
    char key[128];
    test_key(key, sizeof key, "counts");
    redisContext *c = th_rl_connect_or_fail();
    redisContext *other = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));

    struct rlock_opts o = {.ttl_ms = 10000};
    struct rlock_reentrant l = {0}, b = {0};
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(rlock_reentrant_acquire(c, &l, key, NULL, 7, &o), RLOCK_OK);
        ck_assert_int_eq(l.holds, i);
        ck_assert_int_eq(hget_int(c, key, l.owner), i);
    }

    /* Another owner (thread 8 of this instance) is shut out throughout. */
    for (int i = 3; i >= 1; i--) {
        ck_assert_int_eq(rlock_reentrant_acquire(other, &b, key, NULL, 8, &o), RLOCK_BUSY);
        ck_assert_int_eq(b.holds, 0);
        ck_assert_int_eq(rlock_reentrant_release(c, &l), RLOCK_OK);
        ck_assert_int_eq(hget_int(c, key, l.key ? l.owner : "none"), l.key ? i - 1 : -1);
    }
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", key), 0);
    ck_assert_ptr_null(l.key);

    ck_assert_int_eq(rlock_reentrant_acquire(other, &b, key, NULL, 8, &o), RLOCK_OK);
    ck_assert_int_eq(rlock_reentrant_release(other, &b), RLOCK_OK);
    redisFree(c);
    redisFree(other);
}
END_TEST

START_TEST(test_release_by_non_owner_is_refused_and_counted)
{
    char key[128];
    test_key(key, sizeof key, "nonowner");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));

    struct rlock_opts o = {.ttl_ms = 10000};
    struct rlock_reentrant l = {0};
    ck_assert_int_eq(rlock_reentrant_acquire(c, &l, key, NULL, 1, &o), RLOCK_OK);

    struct rlock_metrics before, after;
    rlock_metrics_snapshot(&before);
    char err[128];
    ck_assert_int_eq(rlock_reentrant_release_owner(c, key, NULL, 2, err, sizeof err),
                     RLOCK_NOT_OWNER);
    ck_assert_msg(strstr(err, "not held") != NULL, "err: %s", err);
    ck_assert_int_eq(rlock_reentrant_release_owner(c, key, "another-instance", 1, err, sizeof err),
                     RLOCK_NOT_OWNER);
    /* An empty struct has nothing to release either. */
    struct rlock_reentrant empty = {0};
    ck_assert_int_eq(rlock_reentrant_release(c, &empty), RLOCK_NOT_OWNER);
    rlock_metrics_snapshot(&after);
    ck_assert_uint_eq(after.release_refused - before.release_refused, 3);

    /* Nothing changed: the owner still holds exactly one hold. */
    ck_assert_int_eq(hget_int(c, key, l.owner), 1);
    ck_assert_int_gt(th_rl_int(c, "PTTL %s", key), 0);

    /* A lock that expired under its owner: the release is refused too. */
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    ck_assert_int_eq(rlock_reentrant_release(c, &l), RLOCK_NOT_OWNER);
    ck_assert_ptr_null(l.key);
    redisFree(c);
}
END_TEST

/* ---- Redisson interoperability ---- */

START_TEST(test_redisson_held_lock_blocks_us_and_ours_looks_like_redisson)
{
    char key[128];
    test_key(key, sizeof key, "redisson");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));

    /* What a Java service's RLock.lock() leaves: hash uuid:threadId -> 1. */
    freeReplyObject(th_rl_cmd(c, "HSET %s %s 1", key, "9a0c62e6-5b8e-4a76-9d3e-0b1f0c6c1a11:57"));
    freeReplyObject(th_rl_cmd(c, "PEXPIRE %s 30000", key));
    struct rlock_opts o = {.ttl_ms = 10000};
    struct rlock_reentrant l = {0};
    ck_assert_int_eq(rlock_reentrant_acquire(c, &l, key, NULL, 0, &o), RLOCK_BUSY);
    ck_assert_int_eq(hget_int(c, key, "9a0c62e6-5b8e-4a76-9d3e-0b1f0c6c1a11:57"), 1);
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));

    /* A simple lock's string on the key counts as busy, not as an error. */
    freeReplyObject(th_rl_cmd(c, "SET %s sometoken PX 10000", key));
    ck_assert_int_eq(rlock_reentrant_acquire(c, &l, key, NULL, 0, &o), RLOCK_BUSY);
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));

    ck_assert_int_eq(rlock_reentrant_acquire(c, &l, key, NULL, 0, &o), RLOCK_OK);
    redisReply *r = th_rl_cmd(c, "HGETALL %s", key);
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_uint_eq(r->elements, 2);
    const char *field = r->element[0]->str;
    /* <uuid v4>:<thread id> -> "1" */
    ck_assert_uint_ge(strlen(field), RLOCK_UUID_LEN + 2);
    ck_assert_int_eq(field[RLOCK_UUID_LEN], ':');
    ck_assert_uint_eq(strspn(field, "0123456789abcdef-"), RLOCK_UUID_LEN);
    ck_assert_int_eq(field[14], '4');
    ck_assert_uint_eq(strspn(field + RLOCK_UUID_LEN + 1, "0123456789"),
                      strlen(field) - RLOCK_UUID_LEN - 1);
    ck_assert_int_eq(strncmp(field, rlock_process_uuid(), RLOCK_UUID_LEN), 0);
    ck_assert_str_eq(r->element[1]->str, "1");
    freeReplyObject(r);
    long long pttl = th_rl_int(c, "PTTL %s", key);
    ck_assert(pttl > 0 && pttl <= 10000);

    /* The final release publishes "0" on Redisson's channel of the key. */
    redisContext *sub = th_rl_connect_or_fail();
    char channel[192];
    snprintf(channel, sizeof channel, "redisson_lock__channel:{%s}", key);
    freeReplyObject(th_rl_cmd(sub, "SUBSCRIBE %s", channel));
    ck_assert_int_eq(rlock_reentrant_release(c, &l), RLOCK_OK);
    void *msg = NULL;
    ck_assert_int_eq(redisGetReply(sub, &msg), REDIS_OK);
    r = msg;
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_str_eq(r->element[0]->str, "message");
    ck_assert_str_eq(r->element[1]->str, channel);
    ck_assert_str_eq(r->element[2]->str, "0");
    freeReplyObject(r);
    redisFree(sub);

    /* Redisson's channel naming rule for keys that carry a hash tag. */
    char *n1 = rlock_channel_name("redisson_lock__channel", "plain");
    char *n2 = rlock_channel_name("redisson_lock__channel", "a:{sku:1}:b");
    ck_assert_str_eq(n1, "redisson_lock__channel:{plain}");
    ck_assert_str_eq(n2, "redisson_lock__channel:a:{sku:1}:b");
    free(n1);
    free(n2);
    redisFree(c);
}
END_TEST

/* ---- mutual exclusion across threads and processes ---- */

#define MX_PROCS 3
#define MX_THREADS 4
#define MX_ITERATIONS 40

struct mx {
    char lock_key[128];
    char counter_key[128];
    atomic_int failures;
    char first_failure[256];
    pthread_mutex_t mu;
};

static void mx_fail(struct mx *m, const char *what, const char *detail)
{
    if (atomic_fetch_add(&m->failures, 1) == 0) {
        pthread_mutex_lock(&m->mu);
        snprintf(m->first_failure, sizeof m->first_failure, "%.60s: %.160s", what, detail);
        pthread_mutex_unlock(&m->mu);
    }
}

/* Non-atomic GET + SET of the counter under the lock, re-entering it once
 * inside: any overlap of two owners loses an increment. */
static void *mx_worker(void *arg)
{
    struct mx *m = arg;
    char why[256];
    redisContext *c = th_rl_connect(why, sizeof why);
    if (!c) {
        mx_fail(m, "connect", why);
        return NULL;
    }
    struct rlock_opts o = {.ttl_ms = 10000, .wait_ms = 60000, .retry_ms = 20};
    for (int i = 0; i < MX_ITERATIONS && atomic_load(&m->failures) == 0; i++) {
        struct rlock_reentrant l = {0};
        enum rlock_status st = rlock_reentrant_acquire(c, &l, m->lock_key, NULL, 0, &o);
        if (st != RLOCK_OK) {
            mx_fail(m, rlock_status_str(st), l.err);
            break;
        }
        st = rlock_reentrant_acquire(c, &l, m->lock_key, NULL, 0, &o); /* re-entry */
        if (st != RLOCK_OK || l.holds != 2) {
            mx_fail(m, "re-entry", l.err);
            break;
        }
        redisReply *r = redisCommand(c, "GET %s", m->counter_key);
        long long n = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
        r = redisCommand(c, "SET %s %lld", m->counter_key, n + 1);
        freeReplyObject(r);
        if (rlock_reentrant_release(c, &l) != RLOCK_OK ||
            rlock_reentrant_release(c, &l) != RLOCK_OK) {
            mx_fail(m, "release", l.err);
            break;
        }
    }
    redisFree(c);
    return NULL;
}

/* Runs MX_THREADS workers in this process with its own notifier.
 * Returns the number of failures. */
static int mx_run_threads(struct mx *m)
{
    char err[128];
    struct rlock_notifier *n = rlock_notifier_new(th_rl_connect_cb, NULL, err, sizeof err);
    if (!n)
        return 1;
    rlock_notifier_set_default(n);
    pthread_t t[MX_THREADS];
    for (int i = 0; i < MX_THREADS; i++)
        if (pthread_create(&t[i], NULL, mx_worker, m) != 0)
            mx_fail(m, "pthread_create", "");
    for (int i = 0; i < MX_THREADS; i++)
        pthread_join(t[i], NULL);
    rlock_notifier_free(n);
    return atomic_load(&m->failures);
}

START_TEST(test_reentrant_mutual_exclusion_threads_and_processes)
{
    static struct mx m;
    memset(&m, 0, sizeof m);
    pthread_mutex_init(&m.mu, NULL);
    test_key(m.lock_key, sizeof m.lock_key, "mx:lock");
    test_key(m.counter_key, sizeof m.counter_key, "mx:counter");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s %s", m.lock_key, m.counter_key));

    pid_t kids[MX_PROCS - 1];
    for (int i = 0; i < MX_PROCS - 1; i++) {
        kids[i] = fork();
        ck_assert_int_ge(kids[i], 0);
        if (kids[i] == 0) {
            /* A child is another instance: its own uuid, notifier, threads. */
            int failed = mx_run_threads(&m);
            if (failed)
                fprintf(stderr, "child %d: %s\n", (int)getpid(), m.first_failure);
            _exit(failed ? 1 : 0);
        }
    }
    int failed = mx_run_threads(&m);
    for (int i = 0; i < MX_PROCS - 1; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(kids[i], &status, 0), kids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed", i);
    }
    ck_assert_msg(failed == 0, "%d failures, first: %s", failed, m.first_failure);
    redisReply *r = th_rl_cmd(c, "GET %s", m.counter_key);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_int_eq(atoll(r->str), MX_PROCS * MX_THREADS * MX_ITERATIONS);
    freeReplyObject(r);
    ck_assert_int_eq(th_rl_int(c, "EXISTS %s", m.lock_key), 0);
    freeReplyObject(th_rl_cmd(c, "DEL %s", m.counter_key));
    pthread_mutex_destroy(&m.mu);
    redisFree(c);
}
END_TEST

/* ---- waking waiters through the shared subscription ---- */

struct waiter {
    char key[128];
    int reentrant;
    struct rlock_opts o;
    atomic_int tried;    /* the first attempt has been made */
    int64_t acquired_at; /* rlock_mono_ms() when it got the lock */
    enum rlock_status st;
    char err[128];
};

static enum rlock_status waiter_try_first(struct waiter *w, redisContext *c)
{
    /* One failed try first, so the test knows the waiter is waiting. */
    struct rlock_opts once = w->o;
    once.wait_ms = 0;
    enum rlock_status st;
    if (w->reentrant) {
        struct rlock_reentrant l = {0};
        st = rlock_reentrant_acquire(c, &l, w->key, NULL, 0, &once);
    } else {
        struct rlock l = {0};
        st = rlock_acquire(c, &l, w->key, &once);
    }
    atomic_store(&w->tried, 1);
    return st;
}

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    char why[256];
    redisContext *c = th_rl_connect(why, sizeof why);
    if (!c) {
        w->st = RLOCK_ERR;
        snprintf(w->err, sizeof w->err, "%.120s", why);
        atomic_store(&w->tried, 1);
        return NULL;
    }
    if (waiter_try_first(w, c) != RLOCK_BUSY) {
        w->st = RLOCK_ERR;
        snprintf(w->err, sizeof w->err, "first try was not BUSY");
        redisFree(c);
        return NULL;
    }
    if (w->reentrant) {
        struct rlock_reentrant l = {0};
        w->st = rlock_reentrant_acquire(c, &l, w->key, NULL, 0, &w->o);
        w->acquired_at = rlock_mono_ms();
        snprintf(w->err, sizeof w->err, "%s", l.err);
        if (w->st == RLOCK_OK)
            (void)rlock_reentrant_release(c, &l);
    } else {
        struct rlock l = {0};
        w->st = rlock_acquire(c, &l, w->key, &w->o);
        w->acquired_at = rlock_mono_ms();
        snprintf(w->err, sizeof w->err, "%s", l.err);
        if (w->st == RLOCK_OK)
            (void)rlock_release(c, &l);
    }
    redisFree(c);
    return NULL;
}

/*
 * The waiter polls every 2..6 s (retry_ms 4000 with jitter) and its first
 * poll after subscribing comes at once; the holder releases 300 ms later.
 * Getting the lock within 1.2 s of the release can only come from the
 * published wake-up, since the next poll is at least 2 s after the last.
 */
static void check_waiter_woken_early(int reentrant)
{
    char err[128];
    struct rlock_notifier *n = rlock_notifier_new(th_rl_connect_cb, NULL, err, sizeof err);
    ck_assert_msg(n != NULL, "%s", err);
    /* Connected before the test measures anything. */
    for (int i = 0; i < 200 && !rlock_notifier_connected(n); i++)
        th_sleep_ms(10);
    ck_assert(rlock_notifier_connected(n));

    static struct waiter w;
    memset(&w, 0, sizeof w);
    w.reentrant = reentrant;
    test_key(w.key, sizeof w.key, reentrant ? "wake:reentrant" : "wake:simple");
    w.o = (struct rlock_opts){.ttl_ms = 10000, .wait_ms = 8000, .retry_ms = 4000, .notifier = n};
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", w.key));

    struct rlock_opts ho = {.ttl_ms = 10000};
    struct rlock_reentrant rl = {0};
    struct rlock sl = {0};
    if (reentrant)
        ck_assert_int_eq(rlock_reentrant_acquire(c, &rl, w.key, NULL, 0, &ho), RLOCK_OK);
    else
        ck_assert_int_eq(rlock_acquire(c, &sl, w.key, &ho), RLOCK_OK);

    struct rlock_metrics before, after;
    rlock_metrics_snapshot(&before);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, waiter_main, &w), 0);
    for (int i = 0; i < 500 && !atomic_load(&w.tried); i++)
        th_sleep_ms(10);
    th_sleep_ms(300);
    int64_t released_at = rlock_mono_ms();
    if (reentrant)
        ck_assert_int_eq(rlock_reentrant_release(c, &rl), RLOCK_OK);
    else
        ck_assert_int_eq(rlock_release(c, &sl), RLOCK_OK);
    pthread_join(t, NULL);
    rlock_metrics_snapshot(&after);

    ck_assert_msg(w.st == RLOCK_OK, "waiter: %s %s", rlock_status_str(w.st), w.err);
    int64_t late = w.acquired_at - released_at;
    ck_assert_msg(late < 1200, "waiter got the lock %lld ms after the release", (long long)late);
    ck_assert_uint_ge(after.waited - before.waited, 1);
    ck_assert_uint_ge(after.wait_ms_total - before.wait_ms_total, 250);
    rlock_notifier_free(n);
    redisFree(c);
}

START_TEST(test_reentrant_waiter_is_woken_by_release_not_by_polling)
{
    check_waiter_woken_early(1);
}
END_TEST

START_TEST(test_simple_lock_waiter_is_woken_by_release_not_by_polling)
{
    check_waiter_woken_early(0);
}
END_TEST

START_TEST(test_simple_release_publishes_on_its_channel_and_format_is_unchanged)
{
    char key[128];
    test_key(key, sizeof key, "simplechan");
    redisContext *c = th_rl_connect_or_fail();
    redisContext *sub = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
    char channel[192];
    snprintf(channel, sizeof channel, "rlock:release:{%s}", key);
    freeReplyObject(th_rl_cmd(sub, "SUBSCRIBE %s", channel));

    struct rlock_opts o = {.ttl_ms = 5000};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    redisReply *r = th_rl_cmd(c, "GET %s", key);
    ck_assert_str_eq(r->str, l.token); /* still a plain SET NX PX string */
    freeReplyObject(r);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    void *msg = NULL;
    ck_assert_int_eq(redisGetReply(sub, &msg), REDIS_OK);
    r = msg;
    ck_assert_str_eq(r->element[1]->str, channel);
    ck_assert_str_eq(r->element[2]->str, "0");
    freeReplyObject(r);
    redisFree(sub);
    redisFree(c);
}
END_TEST

START_TEST(test_many_waiting_locks_share_one_subscriber_connection)
{
    char err[128];
    struct rlock_notifier *n = rlock_notifier_new(th_rl_connect_cb, NULL, err, sizeof err);
    ck_assert_msg(n != NULL, "%s", err);
    for (int i = 0; i < 200 && !rlock_notifier_connected(n); i++)
        th_sleep_ms(10);
    ck_assert(rlock_notifier_connected(n));
    redisContext *c = th_rl_connect_or_fail();

    /* 20 channels watched at once: one connection subscribed to all. */
    struct rlock_notify_wait *w[20];
    char names[20][64];
    for (int i = 0; i < 20; i++) {
        snprintf(names[i], sizeof names[i], "%s:%d:chan:%d", TEST_PREFIX, (int)getpid(), i);
        const char *ch[] = {names[i]};
        w[i] = rlock_notify_watch(n, ch, 1, NULL, NULL);
        ck_assert_ptr_nonnull(w[i]);
    }
    /* Each waiter is woken by its subscription's confirmation... */
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(rlock_notify_wait_until(w[i], rlock_mono_ms() + 3000), 1);
    redisReply *r = th_rl_cmd(c, "CLIENT LIST TYPE pubsub");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    int conns = 0;
    for (const char *p = r->str; (p = strstr(p, "sub=20")) != NULL; p++)
        conns++;
    freeReplyObject(r);
    ck_assert_int_eq(conns, 1);
    /* ...and then by a message on its channel only. */
    ck_assert_int_eq(th_rl_int(c, "PUBLISH %s 0", names[5]), 1);
    ck_assert_int_eq(rlock_notify_wait_until(w[5], rlock_mono_ms() + 3000), 1);
    ck_assert_int_eq(rlock_notify_wait_until(w[6], rlock_mono_ms() + 50), 0);
    for (int i = 0; i < 20; i++)
        rlock_notify_unwatch(w[i]);
    /* The last waiter gone, the channels are unsubscribed. */
    int left = -1;
    for (int i = 0; i < 300; i++) {
        r = th_rl_cmd(c, "PUBSUB NUMSUB %s", names[0]);
        left = (int)r->element[1]->integer;
        freeReplyObject(r);
        if (left == 0)
            break;
        th_sleep_ms(10);
    }
    ck_assert_int_eq(left, 0);
    rlock_notifier_free(n);
    redisFree(c);
}
END_TEST

static Suite *reentrant_suite(void)
{
    Suite *s = suite_create("rlock_reentrant");
    TCase *tc = tcase_create("reentrant");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reentrant_counts_holds_and_only_last_release_frees);
    tcase_add_test(tc, test_release_by_non_owner_is_refused_and_counted);
    tcase_add_test(tc, test_redisson_held_lock_blocks_us_and_ours_looks_like_redisson);
    tcase_add_test(tc, test_reentrant_mutual_exclusion_threads_and_processes);
    suite_add_tcase(s, tc);

    tc = tcase_create("wake-up");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reentrant_waiter_is_woken_by_release_not_by_polling);
    tcase_add_test(tc, test_simple_lock_waiter_is_woken_by_release_not_by_polling);
    tcase_add_test(tc, test_simple_release_publishes_on_its_channel_and_format_is_unchanged);
    tcase_add_test(tc, test_many_waiting_locks_share_one_subscriber_connection);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(reentrant_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
