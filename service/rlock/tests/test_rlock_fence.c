/*
 * Fencing tokens (rlock/fence.h) against real servers: the
 * shared test Redis (SECKILL_TEST_REDIS_ADMIN_URL), private redis-servers to lose
 * data on purpose (harness_redis.h), and the test PostgreSQL as its superuser
 * (SECKILL_TEST_PG_ADMIN_DSN: the scratch tables are the library's, not the
 * service's) as the store that refuses superseded holders.
 * PostgreSQL is reached with plain libpq: fencing is the store's check, and
 * the library's tests need nothing of the service.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness_redis.h"
#include "harness_rlock.h"
#include <rlock/fence.h>
#include <rlock/rlock.h>

#define NO_PERSISTENCE NULL /* harness_redis servers never persist */

/* ---- helpers ---- */

static void key_name(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "test_fence:%d:{%s}", (int)getpid(), name);
}

static redisReply *must(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "redis command failed: %s", c->errstr);
    ck_assert_msg(r->type != REDIS_REPLY_ERROR, "redis error: %s", r->str);
    return r;
}

/* GET key as an integer; -1 when absent. */
static long long get_int(redisContext *c, const char *key)
{
    redisReply *r = must(c, "GET %s", key);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

static void get_str(redisContext *c, const char *key, char *out, size_t len)
{
    redisReply *r = must(c, "GET %s", key);
    snprintf(out, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

static void del_keys(redisContext *c, const char *a, const char *b)
{
    freeReplyObject(must(c, "DEL %s %s", a, b));
}

static const struct rlock_opts quick = {.ttl_ms = 5000, .wait_ms = 0, .retry_ms = 10};

/* Takes and releases key once; returns the fencing token. */
static int64_t token_of_one_acquisition(redisContext *c, const char *key)
{
    struct rlock l = {0};
    int64_t fence = 0;
    enum rlock_status st = rlock_acquire_fenced(c, &l, key, &quick, &fence);
    ck_assert_msg(st == RLOCK_OK, "acquire: %s %s", rlock_status_str(st), l.err);
    ck_assert_int_gt(fence, 0);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    return fence;
}

/* ---- the PostgreSQL side ---- */

#define PG_DSN_ENV "SECKILL_TEST_PG_ADMIN_DSN"

/* A new connection to the test PostgreSQL; the caller PQfinish()es it.
 * An unset PG_DSN_ENV or a refused connection fails the test. */
static PGconn *pg_connect(void)
{
    const char *dsn = getenv(PG_DSN_ENV);
    ck_assert_msg(dsn != NULL, PG_DSN_ENV " is not set (run through scripts/run-tests.sh)");
    PGconn *pg = PQconnectdb(dsn);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "cannot connect to the test PostgreSQL: %s",
                  PQerrorMessage(pg));
    return pg;
}

/* Runs a query and returns its single integer value (NULL reads as 0);
 * anything else fails the test. */
static long long pg_int(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "query failed: %s: %s",
                  sql, PQerrorMessage(pg));
    long long v = PQgetisnull(r, 0, 0) ? 0 : atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* A scratch table shaped like the service's fenced rows. */
static void scratch_create(PGconn *pg, char *table, size_t len)
{
    snprintf(table, len, "rlock_fence_scratch_%d", (int)getpid());
    char sql[256];
    snprintf(sql, sizeof sql,
             "SET client_min_messages = warning; DROP TABLE IF EXISTS %s; "
             "CREATE TABLE %s (id int PRIMARY KEY, "
             "last_token bigint NOT NULL DEFAULT 0, value text); INSERT INTO %s (id) VALUES (1)",
             table, table, table);
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(pg));
    PQclear(r);
}

static void scratch_drop(PGconn *pg, const char *table)
{
    char sql[128];
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", table);
    PQclear(PQexec(pg, sql));
}

/*
 * The protected write, fenced: one transaction whose first statement is the
 * guarded token update.  Returns the rows it changed (1, or 0 when a newer
 * holder already wrote), or -1 on a database error.  No Check asserts: also
 * runs in a forked child.
 */
static int fenced_write(PGconn *pg, const char *table, int64_t token, const char *value)
{
    char sql[256], tok[24];
    snprintf(tok, sizeof tok, "%" PRId64, token);
    snprintf(sql, sizeof sql,
             "UPDATE %s SET last_token = $1, value = $2 WHERE id = 1 AND last_token <= $1", table);
    PGresult *r = PQexec(pg, "BEGIN");
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok)
        return -1;
    const char *params[] = {tok, value};
    r = PQexecParams(pg, sql, 2, NULL, params, NULL, NULL, 0);
    int rows = PQresultStatus(r) == PGRES_COMMAND_OK ? atoi(PQcmdTuples(r)) : -1;
    PQclear(r);
    r = PQexec(pg, rows == 1 ? "COMMIT" : "ROLLBACK");
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        rows = -1;
    PQclear(r);
    return rows;
}

static long long scratch_token(PGconn *pg, const char *table)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT last_token FROM %s WHERE id = 1", table);
    return pg_int(pg, sql);
}

/* ---- tests ---- */

START_TEST(test_fence_key_shares_the_lock_keys_hash_slot)
{
    char out[64];
    ck_assert_int_eq(rlock_fence_key(out, sizeof out, "seckill:{sku:42}:lock:sku"), 0);
    ck_assert_str_eq(out, "seckill:{sku:42}:lock:sku:fence");
    ck_assert_int_eq(rlock_fence_key(out, sizeof out, "plain-lock"), 0);
    ck_assert_str_eq(out, "{plain-lock}:fence");
    /* Braces without a usable tag: no name that is surely in the same slot. */
    ck_assert_int_eq(rlock_fence_key(out, sizeof out, "a{}b"), -1);
    ck_assert_int_eq(rlock_fence_key(out, sizeof out, "a}b"), -1);
    ck_assert_int_eq(rlock_fence_key(out, 8, "plain-lock"), -1);
}
END_TEST

START_TEST(test_fenced_tokens_strictly_increase_and_keep_the_lock_format)
{
    char key[128], fence[160];
    key_name(key, sizeof key, "inc");
    ck_assert_int_eq(rlock_fence_key(fence, sizeof fence, key), 0);
    redisContext *c = th_rl_connect_or_fail();
    del_keys(c, key, fence);

    int64_t last = 0;
    for (int i = 0; i < 50; i++) {
        struct rlock l = {0};
        int64_t t = 0;
        ck_assert_int_eq(rlock_acquire_fenced(c, &l, key, &quick, &t), RLOCK_OK);
        ck_assert_int_gt(t, last);
        last = t;
        /* The lock itself is a plain SET NX PX value: redsync, node-redlock
         * and rlock_release() all understand it. */
        char val[64];
        get_str(c, key, val, sizeof val);
        ck_assert_str_eq(val, l.token);
        redisReply *r = must(c, "PTTL %s", key);
        ck_assert_int_gt(r->integer, 0);
        ck_assert_int_le(r->integer, quick.ttl_ms);
        freeReplyObject(r);
        ck_assert_int_eq(get_int(c, fence), t);
        ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    }

    /* A busy attempt draws no token. */
    struct rlock a = {0}, b = {0};
    int64_t ta = 0, tb = 7;
    ck_assert_int_eq(rlock_acquire_fenced(c, &a, key, &quick, &ta), RLOCK_OK);
    ck_assert_int_eq(rlock_acquire_fenced(c, &b, key, &quick, &tb), RLOCK_BUSY);
    ck_assert_int_eq(tb, 0);
    ck_assert_ptr_null(b.keys);
    ck_assert_int_eq(get_int(c, fence), ta);
    ck_assert_int_eq(rlock_release(c, &a), RLOCK_OK);

    del_keys(c, key, fence);
    redisFree(c);
}
END_TEST

/* Many independent fenced locks in one round trip: each its own token,
 * lease and counter (here a named one for two of them), a busy one reported
 * and left alone; then all released in one more, a lock stolen meanwhile
 * refused and left to its new owner. */
START_TEST(test_try_each_and_release_each_in_one_round_trip)
{
    char k[3][128], f[3][160], named[128];
    key_name(k[0], sizeof k[0], "each0");
    key_name(k[1], sizeof k[1], "each1");
    key_name(k[2], sizeof k[2], "each2");
    key_name(named, sizeof named, "each0");
    strcat(named, ":named-fence");
    redisContext *c = th_rl_connect_or_fail();
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(rlock_fence_key(f[i], sizeof f[i], k[i]), 0);
        del_keys(c, k[i], f[i]);
    }
    freeReplyObject(must(c, "DEL %s", named));
    /* k[1] is someone else's; and the script cache is empty, as after a restart */
    freeReplyObject(must(c, "SET %s other-owner PX 60000", k[1]));
    freeReplyObject(must(c, "SCRIPT FLUSH"));

    struct rlock l[3] = {{0}};
    struct rlock *ls[3] = {&l[0], &l[1], &l[2]};
    const char *keys[3] = {k[0], k[1], k[2]};
    const char *fences_of[3] = {named, NULL, NULL};
    int64_t fence[3];
    enum rlock_status st[3];
    ck_assert_int_eq(rlock_try_fenced_each(c, ls, keys, fences_of, 3, 5000, fence, st), 2);
    ck_assert_int_eq(st[0], RLOCK_OK);
    ck_assert_int_eq(st[1], RLOCK_BUSY);
    ck_assert_int_eq(st[2], RLOCK_OK);
    ck_assert_int_gt(fence[0], 0);
    ck_assert_int_eq(fence[1], 0);
    ck_assert_ptr_null(l[1].keys);
    ck_assert_int_eq(get_int(c, named), fence[0]);
    ck_assert_int_eq(get_int(c, f[0]), -1); /* the named counter, not the default */
    ck_assert_int_eq(get_int(c, f[2]), fence[2]);
    ck_assert_str_ne(l[0].token, l[2].token);
    for (int i = 0; i < 3; i += 2) {
        char val[64];
        get_str(c, k[i], val, sizeof val);
        ck_assert_str_eq(val, l[i].token);
        ck_assert_int_gt(rlock_remaining_ms(&l[i]), 0);
    }
    /* a later attempt draws larger tokens from the same counters */
    struct rlock again = {0};
    int64_t t = 0;
    ck_assert_int_eq(rlock_acquire_fenced(c, &again, k[1], &quick, &t), RLOCK_BUSY);

    /* k[2] expires and is taken by another owner before the release */
    freeReplyObject(must(c, "SET %s thief PX 60000", k[2]));
    freeReplyObject(must(c, "SCRIPT FLUSH"));
    struct rlock *held[2] = {&l[0], &l[2]};
    enum rlock_status rs[2];
    ck_assert_int_eq(rlock_release_each(c, held, 2, rs), 1);
    ck_assert_int_eq(rs[0], RLOCK_OK);
    ck_assert_int_eq(rs[1], RLOCK_NOT_OWNER);
    ck_assert_ptr_null(l[0].keys);
    ck_assert_ptr_null(l[2].keys);
    redisReply *r = must(c, "EXISTS %s", k[0]);
    ck_assert_int_eq(r->integer, 0);
    freeReplyObject(r);
    char val[64];
    get_str(c, k[2], val, sizeof val);
    ck_assert_str_eq(val, "thief");

    /* the counters go on: a new try draws larger tokens */
    int64_t before0 = fence[0];
    const char *one[1] = {k[0]};
    const char *one_fence[1] = {named};
    struct rlock *l0[1] = {&l[0]};
    ck_assert_int_eq(rlock_try_fenced_each(c, l0, one, one_fence, 1, 5000, fence, st), 1);
    ck_assert_int_gt(fence[0], before0);
    ck_assert_int_eq(rlock_release_each(c, l0, 1, rs), 1);
    for (int i = 0; i < 3; i++)
        del_keys(c, k[i], f[i]);
    freeReplyObject(must(c, "DEL %s", named));
    redisFree(c);
}
END_TEST

START_TEST(test_multi_lock_draws_one_token_from_a_named_fence_key)
{
    char k1[96], k2[128], named[128], dflt[160];
    key_name(k1, sizeof k1, "multi");
    snprintf(k2, sizeof k2, "%s:b", k1);
    snprintf(named, sizeof named, "%s:orders-fence", k1);
    ck_assert_int_eq(rlock_fence_key(dflt, sizeof dflt, k1), 0);
    redisContext *c = th_rl_connect_or_fail();
    del_keys(c, k1, k2);
    del_keys(c, named, dflt);
    const char *keys[] = {k1, k2};

    struct rlock l = {0};
    int64_t t1 = 0;
    ck_assert_int_eq(rlock_acquire_multi_fenced(c, &l, keys, 2, named, &quick, &t1), RLOCK_OK);
    char v1[64], v2[64];
    get_str(c, k1, v1, sizeof v1);
    get_str(c, k2, v2, sizeof v2);
    ck_assert_str_eq(v1, l.token);
    ck_assert_str_eq(v2, l.token);
    ck_assert_int_eq(get_int(c, named), t1);
    ck_assert_int_eq(get_int(c, dflt), -1);

    /* An overlapping multi-lock takes nothing and draws nothing. */
    const char *overlap[] = {k2};
    struct rlock o = {0};
    int64_t to = 0;
    ck_assert_int_eq(rlock_acquire_multi_fenced(c, &o, overlap, 1, named, &quick, &to), RLOCK_BUSY);
    ck_assert_int_eq(get_int(c, named), t1);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);

    /* Without a name the counter sits next to the first key. */
    int64_t t2 = 0;
    ck_assert_int_eq(rlock_acquire_multi_fenced(c, &l, keys, 2, NULL, &quick, &t2), RLOCK_OK);
    ck_assert_int_eq(get_int(c, dflt), t2);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);

    /* The fence key cannot double as a lock key. */
    const char *clash[] = {k1, named};
    ck_assert_int_eq(rlock_acquire_multi_fenced(c, &l, clash, 2, named, &quick, &t2), RLOCK_ERR);
    ck_assert_ptr_null(l.keys);

    del_keys(c, named, dflt);
    redisFree(c);
}
END_TEST

START_TEST(test_tokens_increase_across_flushall)
{
    struct th_redis_server s;
    th_redis_server_start(&s, NO_PERSISTENCE);
    redisContext *c = th_redis_server_connect(&s);
    int64_t before = 0;
    for (int i = 0; i < 5; i++)
        before = token_of_one_acquisition(c, "lock:{flush}");

    freeReplyObject(must(c, "FLUSHALL"));
    ck_assert_int_eq(get_int(c, "lock:{flush}:fence"), -1); /* the counter is really gone */
    ck_assert_int_gt(token_of_one_acquisition(c, "lock:{flush}"), before);

    redisFree(c);
    th_redis_server_stop(&s);
}
END_TEST

START_TEST(test_tokens_increase_across_restart_without_persistence)
{
    struct th_redis_server s;
    th_redis_server_start(&s, NO_PERSISTENCE);
    redisContext *c = th_redis_server_connect(&s);
    int64_t before = 0;
    for (int i = 0; i < 5; i++)
        before = token_of_one_acquisition(c, "lock:{restart}");
    redisFree(c);

    th_redis_server_kill(&s); /* kill -9: nothing saved */
    th_redis_server_restart(&s, NO_PERSISTENCE);
    c = th_redis_server_connect(&s);
    ck_assert_int_eq(get_int(c, "lock:{restart}:fence"), -1);
    ck_assert_int_gt(token_of_one_acquisition(c, "lock:{restart}"), before);

    redisFree(c);
    th_redis_server_stop(&s);
}
END_TEST

START_TEST(test_floor_raises_the_counter_and_never_lowers_it)
{
    char key[128], fence[160], err[128];
    key_name(key, sizeof key, "floor");
    ck_assert_int_eq(rlock_fence_key(fence, sizeof fence, key), 0);
    redisContext *c = th_rl_connect_or_fail();
    del_keys(c, key, fence);

    int64_t t = token_of_one_acquisition(c, key);
    int64_t seen = t + 1000000000; /* what a store saw from a faster clock */
    ck_assert_int_eq(rlock_fence_floor(c, key, NULL, seen, err, sizeof err), RLOCK_OK);
    ck_assert_int_eq(get_int(c, fence), seen);
    ck_assert_int_gt(token_of_one_acquisition(c, key), seen);

    int64_t now = get_int(c, fence);
    ck_assert_int_eq(rlock_fence_floor(c, key, NULL, 5, err, sizeof err), RLOCK_OK);
    ck_assert_int_eq(get_int(c, fence), now);

    /* A named counter is raised by name; bad tokens are refused. */
    ck_assert_int_eq(rlock_fence_floor(c, key, fence, now + 3, err, sizeof err), RLOCK_OK);
    ck_assert_int_eq(get_int(c, fence), now + 3);
    ck_assert_int_eq(rlock_fence_floor(c, key, NULL, -1, err, sizeof err), RLOCK_ERR);
    ck_assert_int_eq(rlock_fence_floor(c, key, NULL, RLOCK_FENCE_MAX, err, sizeof err), RLOCK_ERR);
    ck_assert_msg(strstr(err, "range") != NULL, "err: %s", err);

    del_keys(c, key, fence);
    redisFree(c);
}
END_TEST

START_TEST(test_refused_token_recovers_after_one_floor)
{
    char key[128], fence[160], table[64], err[128];
    key_name(key, sizeof key, "recover");
    ck_assert_int_eq(rlock_fence_key(fence, sizeof fence, key), 0);
    redisContext *c = th_rl_connect_or_fail();
    del_keys(c, key, fence);
    PGconn *pg = pg_connect();
    scratch_create(pg, table, sizeof table);

    /* The store saw a token from before a data loss, ahead of this server's
     * clock (a failover to a server whose clock is behind). */
    int64_t ahead = token_of_one_acquisition(c, key) + 3600LL * 1000000;
    ck_assert_int_eq(fenced_write(pg, table, ahead, "before the loss"), 1);
    del_keys(c, key, fence);

    struct rlock l = {0};
    int64_t t = 0;
    ck_assert_int_eq(rlock_acquire_fenced(c, &l, key, &quick, &t), RLOCK_OK);
    ck_assert_int_eq(fenced_write(pg, table, t, "refused"), 0);
    ck_assert_int_eq(rlock_fence_floor(c, key, NULL, scratch_token(pg, table), err, sizeof err),
                     RLOCK_OK);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);

    ck_assert_int_eq(rlock_acquire_fenced(c, &l, key, &quick, &t), RLOCK_OK);
    ck_assert_int_gt(t, ahead);
    ck_assert_int_eq(fenced_write(pg, table, t, "after the floor"), 1);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);

    scratch_drop(pg, table);
    PQfinish(pg);
    del_keys(c, key, fence);
    redisFree(c);
}
END_TEST

/* Reads exactly len bytes from fd within timeout_ms.  Returns 0 or -1. */
static int read_within(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;
    int64_t deadline = rlock_mono_ms() + timeout_ms;
    while (len > 0) {
        int64_t left = deadline - rlock_mono_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return -1;
        ssize_t n = read(fd, p, len);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/*
 * The paused holder: takes the lock with a 300 ms lease, reports its token,
 * waits for "go" and then writes WITHOUT re-checking its lease, as a process
 * frozen between that check and its write would.  Reports the rows it
 * changed.  Runs in a forked child: exits, never asserts.
 */
static void paused_holder(const char *key, const char *table, int report_fd, int go_fd)
{
    char why[256];
    redisContext *c = th_rl_connect(why, sizeof why);
    if (!c)
        _exit(11);
    struct rlock l = {0};
    int64_t token = 0;
    struct rlock_opts o = {.ttl_ms = 300, .wait_ms = 0};
    if (rlock_acquire_fenced(c, &l, key, &o, &token) != RLOCK_OK)
        _exit(12);
    if (write(report_fd, &token, sizeof token) != sizeof token)
        _exit(13);
    char go;
    if (read(go_fd, &go, 1) != 1)
        _exit(14);

    PGconn *pg = PQconnectdb(getenv(PG_DSN_ENV));
    if (PQstatus(pg) != CONNECTION_OK)
        _exit(15);
    int rows = fenced_write(pg, table, token, "paused holder");
    PQfinish(pg);
    /* Its lock is long gone: releasing must not touch the new holder's key. */
    int released = rlock_release(c, &l) == RLOCK_NOT_OWNER ? 0 : 1;
    int report[2] = {rows, released};
    if (write(report_fd, report, sizeof report) != sizeof report)
        _exit(16);
    redisFree(c);
    _exit(0);
}

/* The parent's connections, kept where a forked child's leak check (under
 * valgrind) can see them: the child inherits them and exits without them. */
static PGconn *volatile parent_pg; /* volatile: stores to an unread static would be dropped */
static redisContext *volatile parent_redis;

START_TEST(test_paused_holder_write_is_refused_by_postgres)
{
    char key[128], fence[160], table[64];
    key_name(key, sizeof key, "paused");
    ck_assert_int_eq(rlock_fence_key(fence, sizeof fence, key), 0);
    redisContext *c = th_rl_connect_or_fail();
    del_keys(c, key, fence);
    PGconn *pg = pg_connect();
    parent_pg = pg;
    parent_redis = c;
    scratch_create(pg, table, sizeof table);

    int report[2], go[2];
    ck_assert_int_eq(pipe(report), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(report[0]);
        close(go[1]);
        paused_holder(key, table, report[1], go[0]);
    }
    close(report[1]);
    close(go[0]);

    int64_t old_token = 0;
    ck_assert_int_eq(read_within(report[0], &old_token, sizeof old_token, 10000), 0);
    ck_assert_int_gt(old_token, 0);

    /* Freeze it past its lease (its "go" waits in the pipe meanwhile). */
    ck_assert_int_eq(kill(child, SIGSTOP), 0);
    ck_assert_int_eq(write(go[1], "g", 1), 1);

    /* A second process takes the lock once the lease is over and writes. */
    struct rlock l = {0};
    int64_t new_token = 0;
    struct rlock_opts wait = {.ttl_ms = 5000, .wait_ms = 10000, .retry_ms = 20};
    ck_assert_int_eq(rlock_acquire_fenced(c, &l, key, &wait, &new_token), RLOCK_OK);
    ck_assert_int_gt(new_token, old_token);
    ck_assert_int_eq(fenced_write(pg, table, new_token, "new holder"), 1);

    /* The frozen holder wakes up and writes with its old token: refused. */
    ck_assert_int_eq(kill(child, SIGCONT), 0);
    int outcome[2] = {-2, -2};
    ck_assert_int_eq(read_within(report[0], outcome, sizeof outcome, 20000), 0);
    int st = 0;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "paused holder exited with %d", st);
    ck_assert_int_eq(outcome[0], 0);
    ck_assert_int_eq(outcome[1], 0);

    ck_assert_int_eq(scratch_token(pg, table), new_token);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE value = 'new holder'", table);
    ck_assert_int_eq(pg_int(pg, sql), 1);
    char val[64];
    get_str(c, key, val, sizeof val);
    ck_assert_str_eq(val, l.token); /* the old holder's release left it alone */
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);

    close(report[0]);
    close(go[1]);
    scratch_drop(pg, table);
    PQfinish(pg);
    del_keys(c, key, fence);
    redisFree(c);
}
END_TEST

START_TEST(test_replica_check_passes_with_a_replica)
{
    struct th_redis_server master, replica;
    th_redis_pair_start(&master, &replica);

    redisContext *m = th_redis_server_connect(&master);
    redisContext *r = th_redis_server_connect(&replica);
    struct rlock l = {0};
    int64_t t = 0;
    ck_assert_int_eq(rlock_acquire_fenced(m, &l, "lock:{wait}", &quick, &t), RLOCK_OK);
    enum rlock_status st = rlock_require_replicas(m, &l, 1, 3000);
    ck_assert_msg(st == RLOCK_OK, "%s: %s", rlock_status_str(st), l.err);
    ck_assert_int_eq(l.held, 1);
    /* Acknowledged means there: the lock and its counter are on the replica. */
    char val[64];
    get_str(r, "lock:{wait}", val, sizeof val);
    ck_assert_str_eq(val, l.token);
    ck_assert_int_eq(get_int(r, "lock:{wait}:fence"), t);

    /* Two replicas are asked for, one exists: the lock is given up. */
    st = rlock_require_replicas(m, &l, 2, 200);
    ck_assert_int_eq(st, RLOCK_ERR);
    ck_assert_msg(strstr(l.err, "1 of 2") != NULL, "err: %s", l.err);
    ck_assert_ptr_null(l.keys);
    ck_assert_int_eq(get_int(m, "lock:{wait}"), -1);

    redisFree(m);
    redisFree(r);
    th_redis_server_stop(&replica);
    th_redis_server_stop(&master);
}
END_TEST

START_TEST(test_replica_check_without_replica_fails_and_leaves_no_key)
{
    char key[128];
    key_name(key, sizeof key, "noreplica");
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(must(c, "DEL %s", key));

    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &quick), RLOCK_OK);
    ck_assert_int_eq(rlock_require_replicas(c, &l, 1, 100), RLOCK_ERR);
    ck_assert_msg(strstr(l.err, "0 of 1") != NULL, "err: %s", l.err);
    ck_assert_int_eq(l.held, 0);
    redisReply *r = must(c, "EXISTS %s", key);
    ck_assert_int_eq(r->integer, 0);
    freeReplyObject(r);

    /* No replicas asked for: nothing to wait for. */
    ck_assert_int_eq(rlock_acquire(c, &l, key, &quick), RLOCK_OK);
    ck_assert_int_eq(rlock_require_replicas(c, &l, 0, 100), RLOCK_OK);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    redisFree(c);
}
END_TEST

static Suite *fence_suite(void)
{
    Suite *s = suite_create("rlock_fence");
    TCase *tc = tcase_create("fence");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fence_key_shares_the_lock_keys_hash_slot);
    tcase_add_test(tc, test_fenced_tokens_strictly_increase_and_keep_the_lock_format);
    tcase_add_test(tc, test_multi_lock_draws_one_token_from_a_named_fence_key);
    tcase_add_test(tc, test_try_each_and_release_each_in_one_round_trip);
    tcase_add_test(tc, test_tokens_increase_across_flushall);
    tcase_add_test(tc, test_tokens_increase_across_restart_without_persistence);
    tcase_add_test(tc, test_floor_raises_the_counter_and_never_lowers_it);
    tcase_add_test(tc, test_refused_token_recovers_after_one_floor);
    tcase_add_test(tc, test_paused_holder_write_is_refused_by_postgres);
    suite_add_tcase(s, tc);

    tc = tcase_create("replicas");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_replica_check_passes_with_a_replica);
    tcase_add_test(tc, test_replica_check_without_replica_fails_and_leaves_no_key);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fence_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
