/*
 * Tests for the rlock library (service/rlock/) against a real Redis, whose
 * address comes from SECKILL_TEST_REDIS_ADMIN_URL (harness_rlock.h).
 * Keys are prefixed with the test name and the pid so concurrent runs and
 * other test binaries sharing the server do not collide.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/hiredis.h>

#include "harness_rlock.h"
#include <rlock/resp.h>
#include <rlock/rlock.h>
#include <rlock/script.h>

/* ---- helpers ---- */

/* Builds this process's name for a test key. */
static void test_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "test_rlock:%d:%s", (int)getpid(), name);
}

/* Runs a command that must not fail at the I/O level; returns the reply. */
static void del_key(redisContext *c, const char *key)
{
    freeReplyObject(th_rl_cmd(c, "DEL %s", key));
}

static long long key_exists(redisContext *c, const char *key)
{
    redisReply *r = th_rl_cmd(c, "EXISTS %s", key);
    ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* Copies the string value of key into out ("" if missing). */
static void get_key(redisContext *c, const char *key, char *out, size_t len)
{
    redisReply *r = th_rl_cmd(c, "GET %s", key);
    if (r->type == REDIS_REPLY_STRING)
        snprintf(out, len, "%s", r->str);
    else
        out[0] = '\0';
    freeReplyObject(r);
}

static long long key_pttl(redisContext *c, const char *key)
{
    redisReply *r = th_rl_cmd(c, "PTTL %s", key);
    ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* ---- SHA-1 and scripts ---- */

START_TEST(test_sha1_known_vectors)
{
    static const struct {
        const char *in;
        const char *sha;
    } v[] = {
        {"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
        {"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "84983e441c3bd26ebaae4aa1f95129e5e54670f1"},
        {"The quick brown fox jumps over the lazy dog", "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"},
    };
    char out[RLOCK_SHA1_HEX_LEN + 1];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        rlock_sha1_hex(v[i].in, strlen(v[i].in), out);
        ck_assert_str_eq(out, v[i].sha);
    }

    /* Lengths around the one-or-two padding blocks boundary (55/56, 63/64,
     * 119/120), over bytes (i*7+3) mod 256, checked with Python's hashlib. */
    static const struct {
        size_t len;
        const char *sha;
    } b[] = {
        {55, "ddf57317ef34bfee3b6df83d359098930eb278bc"},
        {56, "a0d492bb0fc889d0eca3bc137066ab6f4f74f369"},
        {63, "c55856749bef509bdfe6bfebfc7bf4e793e82132"},
        {64, "bede92be29c3874e1b54ddc77988d606fc857a8e"},
        {65, "b05a80522b053d6dc7e0a517d0e70212c7dad11f"},
        {119, "504e27376a6e0f0dba8295b85cb25dc4dfa17d23"},
        {120, "82134b02fb3f702491be9bed581eeab59334acb2"},
    };
    unsigned char buf[128];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        rlock_sha1_hex(buf, b[i].len, out);
        ck_assert_msg(strcmp(out, b[i].sha) == 0, "len %zu: got %s want %s", b[i].len, out,
                      b[i].sha);
    }

    /* FIPS 180 long vector: one million 'a'. */
    char *million = malloc(1000000);
    ck_assert_ptr_nonnull(million);
    memset(million, 'a', 1000000);
    rlock_sha1_hex(million, 1000000, out);
    free(million);
    ck_assert_str_eq(out, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
}
END_TEST

static const char echo_text[] = "-- test_rlock echo script\nreturn KEYS[1] .. '=' .. ARGV[1]\n";

/* The library writes a script's call byte for byte as hiredis formats the
 * same argv: EVALSHA, EVAL (the NOSCRIPT fallback) and FCALL_RO alike, with
 * binary and empty arguments. */
START_TEST(test_script_frame_is_what_hiredis_formats)
{
    struct rlock_script sc, fn;
    rlock_script_init(&sc, "echo", echo_text, sizeof echo_text - 1);
    rlock_function_init(&fn, "t_echo", echo_text, sizeof echo_text - 1, RLOCK_FN_NO_WRITES);
    const char *args[] = {"k", "v\0binary", ""};
    const size_t lens[] = {1, 8, 0};
    const struct {
        const struct rlock_script *s;
        int eval;
        const char *w0, *w1;
        size_t l1;
    } cases[] = {{&sc, 0, "EVALSHA", sc.sha, RLOCK_SHA1_HEX_LEN},
                 {&sc, 1, "EVAL", echo_text, sizeof echo_text - 1},
                 {&fn, 0, "FCALL_RO", "t_echo", 6}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *v[] = {cases[i].w0, cases[i].w1, "1", args[0], args[1], args[2]};
        const size_t l[] = {strlen(cases[i].w0), cases[i].l1, 1, lens[0], lens[1], lens[2]};
        char *want = NULL;
        int wlen = redisFormatCommandArgv(&want, 6, v, l);
        ck_assert_int_gt(wlen, 0);
        size_t bytes = rlock_script_head_bytes(cases[i].s, cases[i].eval, 3) +
                       rlock_script_args_bytes(1, 2, args, lens);
        ck_assert_uint_eq(bytes, (size_t)wlen);
        char *got = malloc(bytes);
        ck_assert_ptr_nonnull(got);
        char *end = rlock_script_write_head(got, cases[i].s, cases[i].eval, 3);
        end = rlock_script_write_args(end, 1, 2, args, lens);
        ck_assert_uint_eq((size_t)(end - got), bytes);
        ck_assert(memcmp(got, want, bytes) == 0);
        free(got);
        free(want);
    }
    /* any command */
    const char *set[] = {"SET", "k", "v", "NX", "PX", "30000"};
    char *want = NULL;
    int wlen = redisFormatCommandArgv(&want, 6, set, NULL);
    char got[128];
    ck_assert_uint_eq(rlock_resp_argv_bytes(6, set, NULL), (size_t)wlen);
    ck_assert(rlock_resp_argv(got, 6, set, NULL) == got + wlen);
    ck_assert(memcmp(got, want, (size_t)wlen) == 0);
    free(want);
}
END_TEST

START_TEST(test_script_survives_script_flush)
{
    redisContext *c = th_rl_connect_or_fail();
    struct rlock_script s;
    rlock_script_init(&s, "echo", echo_text, sizeof echo_text - 1);

    /* Our SHA is the one Redis computes for the same text. */
    redisReply *r = th_rl_cmd(c, "SCRIPT LOAD %b", echo_text, sizeof echo_text - 1);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_str_eq(r->str, s.sha);
    freeReplyObject(r);

    const char *argv[] = {"k", "v\0binary"};
    const size_t argvlen[] = {1, 8};
    for (int round = 0; round < 3; round++) {
        /* Rounds 0 and 2 start from an empty script cache. */
        if (round != 1)
            freeReplyObject(th_rl_cmd(c, "SCRIPT FLUSH"));
        r = rlock_script_run(c, &s, 1, 1, argv, argvlen);
        ck_assert_msg(r != NULL, "run failed: %s", c->errstr);
        ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
        ck_assert_uint_eq(r->len, 10);
        ck_assert_int_eq(memcmp(r->str, "k=v\0binary", 10), 0);
        freeReplyObject(r);
        /* No SCRIPT EXISTS check here: another test process flushing the
         * same server at the same moment would make it flaky. */
    }

    /* Script errors come back as error replies, not NULL. */
    static const char bad_text[] = "return redis.call('NO_SUCH_COMMAND')\n";
    struct rlock_script bad;
    rlock_script_init(&bad, "bad", bad_text, sizeof bad_text - 1);
    r = rlock_script_run(c, &bad, 0, 0, NULL, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    ck_assert_int_eq(c->err, 0);

    redisFree(c);
}
END_TEST

struct async_state {
    const struct rlock_script *s;
    int calls;
    int types[3];
    char got[3][32];
    int requeue_failed;
};

static void async_script_cb(redisAsyncContext *ac, void *r, void *privdata)
{
    struct async_state *st = privdata;
    redisReply *reply = r;
    int i = st->calls++;
    if (i < 3) {
        st->types[i] = reply ? reply->type : -1;
        if (reply && reply->type == REDIS_REPLY_STRING)
            snprintf(st->got[i], sizeof st->got[i], "%s", reply->str);
    }
    if (st->calls == 2) {
        /* Both flushed-cache calls are done, so the script is cached again and
         * this one is normally answered by EVALSHA directly. */
        const char *argv[] = {"c", "3"};
        if (rlock_script_run_async(ac, st->s, async_script_cb, st, 1, 1, argv, NULL) != 0) {
            st->requeue_failed = 1;
            redisAsyncDisconnect(ac);
        }
    } else if (st->calls == 3) {
        redisAsyncDisconnect(ac);
    }
}

START_TEST(test_script_async_survives_script_flush)
{
    struct rlock_url a;
    th_rl_url(&a);
    redisContext *c = th_rl_connect_or_fail();
    freeReplyObject(th_rl_cmd(c, "SCRIPT FLUSH"));

    struct rlock_script s;
    rlock_script_init(&s, "echo", echo_text, sizeof echo_text - 1);

    struct event_base *base = event_base_new();
    ck_assert_ptr_nonnull(base);
    redisAsyncContext *ac = redisAsyncConnect(a.host, a.port);
    ck_assert_msg(ac && !ac->err, "async connect failed");
    ck_assert_int_eq(redisLibeventAttach(ac, base), REDIS_OK);
    ck_assert_int_eq(rlock_url_handshake_async(ac, &a, NULL, NULL), 0);

    struct async_state st = {.s = &s};
    {
        /* Arguments live in a buffer that is scribbled over right after
         * queueing: the NOSCRIPT fallback must have its own copy. */
        char k[8] = "a", v[8] = "1";
        const char *argv[] = {k, v};
        ck_assert_int_eq(rlock_script_run_async(ac, &s, async_script_cb, &st, 1, 1, argv, NULL), 0);
        strcpy(k, "X");
        strcpy(v, "X");
        const char *argv2[] = {"b", "2"};
        ck_assert_int_eq(rlock_script_run_async(ac, &s, async_script_cb, &st, 1, 1, argv2, NULL),
                         0);
    }
    event_base_dispatch(base); /* returns once the last callback disconnects */
    event_base_free(base);

    ck_assert_int_eq(st.requeue_failed, 0);
    ck_assert_int_eq(st.calls, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(st.types[i], REDIS_REPLY_STRING);
    ck_assert_str_eq(st.got[0], "a=1");
    ck_assert_str_eq(st.got[1], "b=2");
    ck_assert_str_eq(st.got[2], "c=3");
    redisFree(c);
}
END_TEST

/* ---- locks ---- */

START_TEST(test_acquire_then_second_acquire_is_busy)
{
    char key[128];
    test_key(key, sizeof key, "busy");
    redisContext *c1 = th_rl_connect_or_fail();
    redisContext *c2 = th_rl_connect_or_fail();
    del_key(c1, key);

    struct rlock_opts o = {.ttl_ms = 10000, .wait_ms = 0, .retry_ms = 10};
    struct rlock a = {0}, b = {0};
    ck_assert_int_eq(rlock_acquire(c1, &a, key, &o), RLOCK_OK);
    ck_assert_int_eq(a.held, 1);

    ck_assert_int_eq(rlock_acquire(c2, &b, key, &o), RLOCK_BUSY);
    ck_assert_int_eq(b.held, 0);
    ck_assert_ptr_null(b.keys);

    /* Waiting a bounded time on a held lock still ends BUSY, not earlier
     * than asked and not much later. */
    o.wait_ms = 150;
    int64_t t0 = rlock_mono_ms();
    ck_assert_int_eq(rlock_acquire(c2, &b, key, &o), RLOCK_BUSY);
    int64_t waited = rlock_mono_ms() - t0;
    ck_assert_int_ge(waited, 150);
    ck_assert_int_lt(waited, 5000);

    ck_assert_int_eq(rlock_release(c1, &a), RLOCK_OK);
    ck_assert_int_eq(key_exists(c1, key), 0);
    ck_assert_ptr_null(a.keys);

    /* Releasing twice is refused; the released lock is free for others. */
    ck_assert_int_eq(rlock_release(c1, &a), RLOCK_NOT_OWNER);
    o.wait_ms = 0;
    ck_assert_int_eq(rlock_acquire(c2, &b, key, &o), RLOCK_OK);
    ck_assert_int_eq(rlock_release(c2, &b), RLOCK_OK);

    redisFree(c1);
    redisFree(c2);
}
END_TEST

START_TEST(test_lock_uses_redsync_format)
{
    char key[128];
    test_key(key, sizeof key, "format");
    redisContext *c = th_rl_connect_or_fail();
    del_key(c, key);

    struct rlock_opts o = {.ttl_ms = 7000};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);

    /* The value is the 32-char lowercase hex token, the expiry a PX ttl. */
    ck_assert_uint_eq(strlen(l.token), RLOCK_TOKEN_LEN);
    ck_assert_uint_eq(strspn(l.token, "0123456789abcdef"), RLOCK_TOKEN_LEN);
    char val[64];
    get_key(c, key, val, sizeof val);
    ck_assert_str_eq(val, l.token);
    long long pttl = key_pttl(c, key);
    ck_assert_int_gt(pttl, 0);
    ck_assert_int_le(pttl, 7000);

    /* A redsync/node-redlock release script given our token frees it. */
    char token[RLOCK_TOKEN_LEN + 1];
    memcpy(token, l.token, sizeof token);
    redisReply *r = th_rl_cmd(c, "EVAL %s 1 %s %s",
                              "if redis.call('get', KEYS[1]) == ARGV[1] then "
                              "return redis.call('del', KEYS[1]) else return 0 end",
                              key, token);
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_NOT_OWNER);

    /* Every acquisition gets a fresh token. */
    struct rlock l2 = {0};
    ck_assert_int_eq(rlock_acquire(c, &l2, key, &o), RLOCK_OK);
    ck_assert_str_ne(l2.token, token);
    ck_assert_int_eq(rlock_release(c, &l2), RLOCK_OK);

    redisFree(c);
}
END_TEST

START_TEST(test_release_by_non_owner_is_refused)
{
    static const char foreign[] = "0123456789abcdef0123456789abcdef";
    char key[128], key2[128];
    test_key(key, sizeof key, "foreign");
    test_key(key2, sizeof key2, "stolen");
    redisContext *c = th_rl_connect_or_fail();
    del_key(c, key);
    del_key(c, key2);

    /* Another client (redsync, node-redlock) holds the key: we are blocked. */
    freeReplyObject(th_rl_cmd(c, "SET %s %s NX PX %d", key, foreign, 10000));
    struct rlock_opts o = {.ttl_ms = 5000, .wait_ms = 0};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_BUSY);

    /* Our lock expired and was taken over by another token: neither extend
     * nor release may touch the new owner's key. */
    ck_assert_int_eq(rlock_acquire(c, &l, key2, &o), RLOCK_OK);
    freeReplyObject(th_rl_cmd(c, "SET %s %s PX %d", key2, foreign, 10000));

    ck_assert_int_eq(rlock_extend(c, &l, 60000), RLOCK_NOT_OWNER);
    ck_assert_int_eq(l.held, 0);
    ck_assert_int_eq(rlock_remaining_ms(&l), 0);
    ck_assert_int_le(key_pttl(c, key2), 10000);

    ck_assert_int_eq(rlock_release(c, &l), RLOCK_NOT_OWNER);
    char val[64];
    get_key(c, key2, val, sizeof val);
    ck_assert_str_eq(val, foreign);
    get_key(c, key, val, sizeof val);
    ck_assert_str_eq(val, foreign);

    del_key(c, key);
    del_key(c, key2);
    redisFree(c);
}
END_TEST

START_TEST(test_expiry_frees_dead_holders_lock)
{
    char key[128];
    test_key(key, sizeof key, "expiry");
    redisContext *c = th_rl_connect_or_fail();
    del_key(c, key);

    /* The holder takes a short lease and then "dies": no release, and its
     * connection goes away. */
    redisContext *dead = th_rl_connect_or_fail();
    struct rlock_opts ho = {.ttl_ms = 200};
    struct rlock holder = {0};
    ck_assert_int_eq(rlock_acquire(dead, &holder, key, &ho), RLOCK_OK);
    redisFree(dead);

    struct rlock_opts wo = {.ttl_ms = 5000, .wait_ms = 5000, .retry_ms = 20};
    struct rlock waiter = {0};
    ck_assert_int_eq(rlock_acquire(c, &waiter, key, &wo), RLOCK_OK);
    int64_t got_at = rlock_mono_ms();

    /* Ordering, not timing: the waiter only got in after the lease ran out,
     * and by then the dead holder's own view already said "expired", so it
     * would have refused to commit. */
    ck_assert_int_ge(got_at - holder.acquired_mono_ms, 200 - 4);
    ck_assert_int_lt(got_at - holder.acquired_mono_ms, 200 + 4000);
    ck_assert_int_eq(rlock_remaining_ms(&holder), 0);
    rlock_clear(&holder);

    ck_assert_int_eq(rlock_release(c, &waiter), RLOCK_OK);
    redisFree(c);
}
END_TEST

START_TEST(test_multi_lock_all_or_nothing)
{
    char k[3][128], other[128];
    test_key(k[0], sizeof k[0], "{multi}:a");
    test_key(k[1], sizeof k[1], "{multi}:b");
    test_key(k[2], sizeof k[2], "{multi}:c");
    test_key(other, sizeof other, "{multi}:d");
    const char *keys[] = {k[0], k[1], k[2]};
    redisContext *c = th_rl_connect_or_fail();
    for (int i = 0; i < 3; i++)
        del_key(c, k[i]);
    del_key(c, other);

    /* One key held by someone else: nothing is taken, nothing left behind. */
    freeReplyObject(th_rl_cmd(c, "SET %s %s NX PX %d", k[1], "someone-else", 10000));
    struct rlock_opts o = {.ttl_ms = 5000, .wait_ms = 0};
    struct rlock l = {0};
    ck_assert_int_eq(rlock_acquire_multi(c, &l, keys, 3, &o), RLOCK_BUSY);
    ck_assert_int_eq(key_exists(c, k[0]), 0);
    ck_assert_int_eq(key_exists(c, k[2]), 0);
    ck_assert_ptr_null(l.keys);

    /* Once free, all keys are taken with one token. */
    del_key(c, k[1]);
    ck_assert_int_eq(rlock_acquire_multi(c, &l, keys, 3, &o), RLOCK_OK);
    ck_assert_uint_eq(l.nkeys, 3);
    for (int i = 0; i < 3; i++) {
        char val[64];
        get_key(c, k[i], val, sizeof val);
        ck_assert_str_eq(val, l.token);
        ck_assert_int_gt(key_pttl(c, k[i]), 0);
    }

    /* An overlapping multi-lock fails without creating its free key. */
    const char *overlap[] = {other, k[2]};
    struct rlock l2 = {0};
    ck_assert_int_eq(rlock_acquire_multi(c, &l2, overlap, 2, &o), RLOCK_BUSY);
    ck_assert_int_eq(key_exists(c, other), 0);

    ck_assert_int_eq(rlock_extend(c, &l, 8000), RLOCK_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_gt(key_pttl(c, k[i]), 5000);

    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(key_exists(c, k[i]), 0);

    /* A multi-lock that lost one key releases the rest, leaves the stolen
     * key alone and reports the loss. */
    ck_assert_int_eq(rlock_acquire_multi(c, &l, keys, 3, &o), RLOCK_OK);
    freeReplyObject(th_rl_cmd(c, "SET %s %s PX %d", k[0], "thief", 10000));
    ck_assert_int_eq(rlock_extend(c, &l, 8000), RLOCK_NOT_OWNER);
    ck_assert_int_le(key_pttl(c, k[1]), 5000); /* all-or-nothing extend */
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_NOT_OWNER);
    char val[64];
    get_key(c, k[0], val, sizeof val);
    ck_assert_str_eq(val, "thief");
    ck_assert_int_eq(key_exists(c, k[1]), 0);
    ck_assert_int_eq(key_exists(c, k[2]), 0);

    del_key(c, k[0]);
    redisFree(c);
}
END_TEST

START_TEST(test_bad_arguments_are_errors)
{
    char key[128];
    test_key(key, sizeof key, "args");
    redisContext *c = th_rl_connect_or_fail();
    del_key(c, key);

    struct rlock l = {0};
    struct rlock_opts bad_ttl = {.ttl_ms = 0};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &bad_ttl), RLOCK_ERR);
    ck_assert_int_eq(rlock_acquire(c, &l, key, NULL), RLOCK_ERR);
    const char *dup[] = {key, key};
    struct rlock_opts o = {.ttl_ms = 5000};
    ck_assert_int_eq(rlock_acquire_multi(c, &l, dup, 2, &o), RLOCK_ERR);
    ck_assert_msg(strstr(l.err, "duplicate") != NULL, "err: %s", l.err);
    ck_assert_int_eq(key_exists(c, key), 0);

    /* Reusing a held lock struct is refused and leaves the lock intact. */
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_ERR);
    ck_assert_int_eq(l.held, 1);
    ck_assert_int_eq(rlock_extend(c, &l, 0), RLOCK_ERR);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);

    ck_assert_str_eq(rlock_status_str(RLOCK_BUSY), "RLOCK_BUSY");
    redisFree(c);
}
END_TEST

/* Tokens come from a per-thread buffer of random bytes: a forked child must
 * not hand out the tokens its parent hands out next. */
START_TEST(test_tokens_unique_and_never_repeated_after_fork)
{
    char seen[64][RLOCK_TOKEN_LEN + 1];
    for (int i = 0; i < 64; i++) {
        ck_assert_int_eq(rlock_token_new(seen[i]), 0);
        ck_assert_uint_eq(strlen(seen[i]), RLOCK_TOKEN_LEN);
        ck_assert_uint_eq(strspn(seen[i], "0123456789abcdef"), RLOCK_TOKEN_LEN);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(seen[i], seen[j]);
    }
    /* Forks at three points, one token apart, so that whatever the buffer's
     * size some fork happens with tokens still buffered. */
    for (int round = 0; round < 3; round++) {
        char one[RLOCK_TOKEN_LEN + 1];
        ck_assert_int_eq(rlock_token_new(one), 0);
        int fds[2];
        ck_assert_int_eq(pipe(fds), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            char t[4][RLOCK_TOKEN_LEN + 1];
            for (int i = 0; i < 4; i++)
                if (rlock_token_new(t[i]) != 0)
                    _exit(1);
            _exit(write(fds[1], t, sizeof t) == (ssize_t)sizeof t ? 0 : 1);
        }
        close(fds[1]);
        char child[4][RLOCK_TOKEN_LEN + 1];
        ck_assert_int_eq(read(fds[0], child, sizeof child), (ssize_t)sizeof child);
        close(fds[0]);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        for (int i = 0; i < 4; i++) {
            char mine[RLOCK_TOKEN_LEN + 1];
            ck_assert_int_eq(rlock_token_new(mine), 0);
            for (int j = 0; j < 4; j++)
                ck_assert_str_ne(mine, child[j]);
        }
    }
}
END_TEST

START_TEST(test_remaining_ms_shrinks)
{
    char key[128];
    test_key(key, sizeof key, "remaining");
    redisContext *c = th_rl_connect_or_fail();
    del_key(c, key);

    struct rlock l = {0};
    ck_assert_int_eq(rlock_remaining_ms(&l), 0);
    struct rlock_opts o = {.ttl_ms = 2000};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    int64_t r1 = rlock_remaining_ms(&l);
    ck_assert_int_gt(r1, 0);
    ck_assert_int_le(r1, 2000 - (20 + 2)); /* drift = ttl/100 + 2 ms */
    th_sleep_ms(60);
    int64_t r2 = rlock_remaining_ms(&l);
    ck_assert_int_lt(r2, r1);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    ck_assert_int_eq(rlock_remaining_ms(&l), 0);

    /* Past the lease it is 0, never negative. */
    o.ttl_ms = 50;
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    th_sleep_ms(100);
    ck_assert_int_eq(rlock_remaining_ms(&l), 0);
    rlock_clear(&l);
    del_key(c, key);
    redisFree(c);
}
END_TEST

START_TEST(test_extend_by_owner)
{
    char key[128];
    test_key(key, sizeof key, "extend");
    redisContext *c = th_rl_connect_or_fail();
    del_key(c, key);

    struct rlock l = {0};
    struct rlock_opts o = {.ttl_ms = 1000};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_OK);
    int64_t first_start = l.acquired_mono_ms;
    th_sleep_ms(20);
    ck_assert_int_eq(rlock_extend(c, &l, 20000), RLOCK_OK);
    ck_assert_int_eq(l.ttl_ms, 20000);
    ck_assert_int_ge(l.acquired_mono_ms, first_start);
    ck_assert_int_gt(rlock_remaining_ms(&l), 1000);
    ck_assert_int_gt(key_pttl(c, key), 1000);
    char val[64];
    get_key(c, key, val, sizeof val);
    ck_assert_str_eq(val, l.token);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);

    /* Extending an empty lock is refused without a round trip. */
    ck_assert_int_eq(rlock_extend(c, &l, 1000), RLOCK_NOT_OWNER);
    redisFree(c);
}
END_TEST

/* ---- mutual exclusion under contention ---- */

#define MX_THREADS 8
#define MX_ITERATIONS 200

struct mx_shared {
    char lock_key[128];
    char counter_key[128];
    atomic_int inside;
    atomic_int overlaps;
    atomic_int failures;
    pthread_mutex_t mu;
    char first_failure[600];
};

static void mx_fail(struct mx_shared *sh, const char *what, const char *detail)
{
    atomic_fetch_add(&sh->failures, 1);
    pthread_mutex_lock(&sh->mu);
    if (!sh->first_failure[0])
        snprintf(sh->first_failure, sizeof sh->first_failure, "%s: %s", what, detail);
    pthread_mutex_unlock(&sh->mu);
}

/* Increments the counter non-atomically (GET, then SET n+1) under the lock;
 * any overlap of critical sections loses an increment.  No Check asserts
 * here: failures are counted and asserted by the main thread. */
static void *mx_worker(void *arg)
{
    struct mx_shared *sh = arg;
    char why[512];
    redisContext *c = th_rl_connect(why, sizeof why);
    if (!c) {
        mx_fail(sh, "connect", why);
        return NULL;
    }
    struct rlock_opts o = {.ttl_ms = 10000, .wait_ms = 60000, .retry_ms = 2};
    for (int i = 0; i < MX_ITERATIONS; i++) {
        struct rlock l = {0};
        enum rlock_status st = rlock_acquire(c, &l, sh->lock_key, &o);
        if (st != RLOCK_OK) {
            mx_fail(sh, rlock_status_str(st), l.err);
            break;
        }
        if (atomic_fetch_add(&sh->inside, 1) != 0)
            atomic_fetch_add(&sh->overlaps, 1);

        redisReply *r = redisCommand(c, "GET %s", sh->counter_key);
        long long n = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        int ok = r != NULL;
        freeReplyObject(r);
        if (ok) {
            r = redisCommand(c, "SET %s %lld", sh->counter_key, n + 1);
            ok = r && r->type == REDIS_REPLY_STATUS;
            freeReplyObject(r);
        }

        atomic_fetch_sub(&sh->inside, 1);
        if (!ok) {
            mx_fail(sh, "counter", c->errstr);
            rlock_clear(&l);
            break;
        }
        st = rlock_release(c, &l);
        if (st != RLOCK_OK) {
            mx_fail(sh, rlock_status_str(st), l.err);
            break;
        }
    }
    redisFree(c);
    return NULL;
}

START_TEST(test_mutual_exclusion_many_threads)
{
    static struct mx_shared sh;
    memset(&sh, 0, sizeof sh);
    pthread_mutex_init(&sh.mu, NULL);
    test_key(sh.lock_key, sizeof sh.lock_key, "mx:lock");
    test_key(sh.counter_key, sizeof sh.counter_key, "mx:counter");
    redisContext *c = th_rl_connect_or_fail();
    del_key(c, sh.lock_key);
    del_key(c, sh.counter_key);

    pthread_t t[MX_THREADS];
    for (int i = 0; i < MX_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, mx_worker, &sh), 0);
    for (int i = 0; i < MX_THREADS; i++)
        pthread_join(t[i], NULL);

    ck_assert_msg(atomic_load(&sh.failures) == 0, "%d failures, first: %s",
                  atomic_load(&sh.failures), sh.first_failure);
    ck_assert_int_eq(atomic_load(&sh.overlaps), 0);
    char val[32];
    get_key(c, sh.counter_key, val, sizeof val);
    ck_assert_int_eq(atoll(val), MX_THREADS * MX_ITERATIONS);
    ck_assert_int_eq(key_exists(c, sh.lock_key), 0);

    del_key(c, sh.counter_key);
    pthread_mutex_destroy(&sh.mu);
    redisFree(c);
}
END_TEST

static Suite *rlock_suite(void)
{
    Suite *s = suite_create("rlock");

    TCase *tc = tcase_create("script");
    tcase_add_test(tc, test_sha1_known_vectors);
    tcase_add_test(tc, test_script_frame_is_what_hiredis_formats);
    tcase_add_test(tc, test_script_survives_script_flush);
    tcase_add_test(tc, test_script_async_survives_script_flush);
    suite_add_tcase(s, tc);

    tc = tcase_create("lock");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_acquire_then_second_acquire_is_busy);
    tcase_add_test(tc, test_lock_uses_redsync_format);
    tcase_add_test(tc, test_release_by_non_owner_is_refused);
    tcase_add_test(tc, test_expiry_frees_dead_holders_lock);
    tcase_add_test(tc, test_multi_lock_all_or_nothing);
    tcase_add_test(tc, test_bad_arguments_are_errors);
    tcase_add_test(tc, test_tokens_unique_and_never_repeated_after_fork);
    tcase_add_test(tc, test_remaining_ms_shrinks);
    tcase_add_test(tc, test_extend_by_owner);
    tcase_add_test(tc, test_mutual_exclusion_many_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(rlock_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
