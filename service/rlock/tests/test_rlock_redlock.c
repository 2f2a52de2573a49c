/*
 * Redlock (rlock/redlock.h) over five independent redis-server
 * processes started by each test (harness_redis.h): quorum 3.
 */
#include <check.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness_redis.h"
#include <rlock/redlock.h>
#include <rlock/rlock.h>

#define NODES 5
#define QUORUM (NODES / 2 + 1)

static struct th_redis_server servers[NODES];
static redisContext *nodes[NODES];

static void start_nodes(void)
{
    for (int i = 0; i < NODES; i++) {
        th_redis_server_start(&servers[i], NULL);
        nodes[i] = th_redis_server_connect(&servers[i]);
    }
}

static void stop_nodes(void)
{
    for (int i = 0; i < NODES; i++) {
        redisFree(nodes[i]);
        nodes[i] = NULL;
        th_redis_server_stop(&servers[i]);
    }
}

/* A fresh connection to node i, as a caller reconnects a failed context. */
static void reconnect(int i)
{
    redisFree(nodes[i]);
    nodes[i] = th_redis_server_connect(&servers[i]);
}

/* GET key on node i through its own connection; "" when absent. */
static void node_get(int i, const char *key, char *out, size_t len)
{
    redisContext *c = th_redis_server_connect(&servers[i]);
    redisReply *r = redisCommand(c, "GET %s", key);
    ck_assert_ptr_nonnull(r);
    snprintf(out, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    redisFree(c);
}

static long long node_pttl(int i, const char *key)
{
    redisContext *c = th_redis_server_connect(&servers[i]);
    redisReply *r = redisCommand(c, "PTTL %s", key);
    ck_assert(r && r->type == REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

static void node_set(int i, const char *key, const char *value)
{
    redisContext *c = th_redis_server_connect(&servers[i]);
    freeReplyObject(redisCommand(c, "SET %s %s PX 60000", key, value));
    redisFree(c);
}

static const struct rlock_redlock_opts opts = {
    .ttl_ms = 5000, .retry_count = 0, .retry_ms = 20, .node_timeout_ms = 200};

START_TEST(test_redlock_sets_one_token_on_every_node)
{
    start_nodes();
    struct rlock_redlock l = {0};
    enum rlock_status st = rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &opts);
    ck_assert_msg(st == RLOCK_OK, "%s: %s", rlock_status_str(st), l.err);
    ck_assert_uint_eq(l.granted, NODES);
    ck_assert_int_gt(l.validity_ms, 0);
    ck_assert_int_le(l.validity_ms, opts.ttl_ms - (opts.ttl_ms / 100 + 2));
    ck_assert_int_gt(rlock_redlock_remaining_ms(&l), 0);
    for (int i = 0; i < NODES; i++) {
        char v[64];
        node_get(i, "lock:res", v, sizeof v);
        ck_assert_str_eq(v, l.token); /* SET NX PX value, as the simple lock */
        long long pttl = node_pttl(i, "lock:res");
        ck_assert_int_gt(pttl, 0);
        ck_assert_int_le(pttl, opts.ttl_ms);
    }

    ck_assert_int_eq(rlock_redlock_release(nodes, NODES, &l), RLOCK_OK);
    ck_assert_ptr_null(l.key);
    for (int i = 0; i < NODES; i++) {
        char v[64];
        node_get(i, "lock:res", v, sizeof v);
        ck_assert_str_eq(v, "");
    }
    stop_nodes();
}
END_TEST

START_TEST(test_redlock_holds_with_a_minority_of_nodes_down)
{
    start_nodes();
    th_redis_server_kill(&servers[0]);
    th_redis_server_kill(&servers[3]);
    struct rlock_redlock l = {0};
    enum rlock_status st = rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &opts);
    ck_assert_msg(st == RLOCK_OK, "%s: %s", rlock_status_str(st), l.err);
    ck_assert_uint_eq(l.granted, QUORUM);
    /* The dead nodes' contexts are marked failed for the caller to reconnect. */
    ck_assert_int_ne(nodes[0]->err, 0);
    ck_assert_int_ne(nodes[3]->err, 0);
    ck_assert_int_eq(rlock_redlock_release(nodes, NODES, &l), RLOCK_OK);
    stop_nodes();
}
END_TEST

START_TEST(test_redlock_fails_without_a_quorum_and_leaves_nothing)
{
    start_nodes();
    for (int i = 0; i < QUORUM; i++)
        th_redis_server_kill(&servers[i]);
    struct rlock_redlock l = {0};
    struct rlock_redlock_opts o = opts;
    o.retry_count = 2;
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &o), RLOCK_ERR);
    ck_assert_msg(strstr(l.err, "nodes answered") != NULL, "err: %s", l.err);
    ck_assert_ptr_null(l.key);
    for (int i = QUORUM; i < NODES; i++) {
        char v[64];
        node_get(i, "lock:res", v, sizeof v);
        ck_assert_str_eq(v, ""); /* the minority that said yes was undone */
    }
    stop_nodes();
}
END_TEST

START_TEST(test_redlock_is_busy_when_a_majority_has_another_owner)
{
    start_nodes();
    for (int i = 0; i < QUORUM; i++)
        node_set(i, "lock:res", "someone-else");
    struct rlock_redlock l = {0};
    struct rlock_redlock_opts o = opts;
    o.retry_count = 1;
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &o), RLOCK_BUSY);
    ck_assert_ptr_null(l.key);
    for (int i = 0; i < NODES; i++) {
        char v[64];
        node_get(i, "lock:res", v, sizeof v);
        ck_assert_str_eq(v, i < QUORUM ? "someone-else" : "");
    }
    stop_nodes();
}
END_TEST

START_TEST(test_redlock_stalled_nodes_cost_at_most_the_node_timeout)
{
    start_nodes();
    /* Two nodes freeze: connected, silent.  Without a per-node timeout the
     * attempt would wait on them for as long as their sockets allow. */
    kill(servers[1].pid, SIGSTOP);
    kill(servers[4].pid, SIGSTOP);
    struct rlock_redlock l = {0};
    int64_t t0 = rlock_mono_ms();
    enum rlock_status st = rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &opts);
    int64_t took = rlock_mono_ms() - t0;
    ck_assert_msg(st == RLOCK_OK, "%s: %s", rlock_status_str(st), l.err);
    ck_assert_uint_eq(l.granted, QUORUM);
    ck_assert_int_lt(took, opts.ttl_ms / 2); /* bounded by the node timeout, generously */
    ck_assert_int_ne(nodes[1]->err, 0);
    ck_assert_int_ne(nodes[4]->err, 0);

    kill(servers[1].pid, SIGCONT);
    kill(servers[4].pid, SIGCONT);
    reconnect(1);
    reconnect(4);
    ck_assert_int_eq(rlock_redlock_release(nodes, NODES, &l), RLOCK_OK);
    stop_nodes();
}
END_TEST

START_TEST(test_redlock_excludes_a_second_client_until_release)
{
    start_nodes();
    redisContext *other[NODES];
    for (int i = 0; i < NODES; i++)
        other[i] = th_redis_server_connect(&servers[i]);

    struct rlock_redlock a = {0}, b = {0};
    struct rlock_redlock_opts o = opts;
    o.retry_count = 3;
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &a, "lock:res", &o), RLOCK_OK);
    ck_assert_int_eq(rlock_redlock_acquire(other, NODES, &b, "lock:res", &o), RLOCK_BUSY);
    ck_assert_int_eq(rlock_redlock_release(nodes, NODES, &a), RLOCK_OK);
    ck_assert_int_eq(rlock_redlock_acquire(other, NODES, &b, "lock:res", &o), RLOCK_OK);
    ck_assert_str_ne(a.token, b.token);
    ck_assert_int_eq(rlock_redlock_release(other, NODES, &b), RLOCK_OK);

    for (int i = 0; i < NODES; i++)
        redisFree(other[i]);
    stop_nodes();
}
END_TEST

START_TEST(test_redlock_extend_needs_a_quorum_of_our_tokens)
{
    start_nodes();
    struct rlock_redlock l = {0};
    struct rlock_redlock_opts o = opts;
    o.ttl_ms = 1000;
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &o), RLOCK_OK);
    enum rlock_status st = rlock_redlock_extend(nodes, NODES, &l, 20000);
    ck_assert_msg(st == RLOCK_OK, "%s: %s", rlock_status_str(st), l.err);
    ck_assert_int_eq(l.ttl_ms, 20000);
    ck_assert_int_gt(rlock_redlock_remaining_ms(&l), 1000);
    for (int i = 0; i < NODES; i++)
        ck_assert_int_gt(node_pttl(i, "lock:res"), 1000);

    /* The lease was lost on a majority (expired and retaken there). */
    for (int i = 0; i < QUORUM; i++)
        node_set(i, "lock:res", "thief");
    ck_assert_int_eq(rlock_redlock_extend(nodes, NODES, &l, 20000), RLOCK_NOT_OWNER);
    ck_assert_int_eq(l.held, 0);
    ck_assert_int_eq(rlock_redlock_remaining_ms(&l), 0);
    ck_assert_int_eq(rlock_redlock_release(nodes, NODES, &l), RLOCK_NOT_OWNER);
    for (int i = 0; i < NODES; i++) {
        char v[64];
        node_get(i, "lock:res", v, sizeof v);
        ck_assert_str_eq(v, i < QUORUM ? "thief" : "");
    }
    stop_nodes();
}
END_TEST

START_TEST(test_redlock_bad_arguments_are_errors)
{
    start_nodes();
    struct rlock_redlock l = {0};
    struct rlock_redlock_opts o = opts;
    o.node_timeout_ms = o.ttl_ms; /* must be much smaller than the ttl */
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &o), RLOCK_ERR);
    ck_assert_int_eq(rlock_redlock_acquire(nodes, 0, &l, "lock:res", &opts), RLOCK_ERR);
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:res", NULL), RLOCK_ERR);
    o = opts;
    o.retry_count = -1;
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &o), RLOCK_ERR);
    ck_assert_int_eq(rlock_redlock_release(nodes, NODES, &l), RLOCK_NOT_OWNER);

    /* A held struct is not reused. */
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &opts), RLOCK_OK);
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:other", &opts), RLOCK_ERR);
    ck_assert_int_eq(l.held, 1);
    ck_assert_int_eq(rlock_redlock_release(nodes, NODES, &l), RLOCK_OK);

    /* The default node timeout is a small fraction of the ttl. */
    o = opts;
    o.node_timeout_ms = 0;
    ck_assert_int_eq(rlock_redlock_acquire(nodes, NODES, &l, "lock:res", &o), RLOCK_OK);
    ck_assert_int_le(l.node_timeout_ms, RLOCK_REDLOCK_DEFAULT_NODE_TIMEOUT_MS);
    ck_assert_int_gt(l.node_timeout_ms, 0);
    ck_assert_int_eq(rlock_redlock_release(nodes, NODES, &l), RLOCK_OK);
    stop_nodes();
}
END_TEST

static Suite *redlock_suite(void)
{
    Suite *s = suite_create("rlock_redlock");
    TCase *tc = tcase_create("redlock");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_redlock_sets_one_token_on_every_node);
    tcase_add_test(tc, test_redlock_holds_with_a_minority_of_nodes_down);
    tcase_add_test(tc, test_redlock_fails_without_a_quorum_and_leaves_nothing);
    tcase_add_test(tc, test_redlock_is_busy_when_a_majority_has_another_owner);
    tcase_add_test(tc, test_redlock_stalled_nodes_cost_at_most_the_node_timeout);
    tcase_add_test(tc, test_redlock_excludes_a_second_client_until_release);
    tcase_add_test(tc, test_redlock_extend_needs_a_quorum_of_our_tokens);
    tcase_add_test(tc, test_redlock_bad_arguments_are_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(redlock_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
