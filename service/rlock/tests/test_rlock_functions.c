/*
 * Scripts as Redis functions: built into a library, loaded once by an
 * administrator, then called by name (FCALL, FCALL_RO), never sent as code;
 * a library's version tells an upgrade from an empty restart; and the lock
 * library's own scripts run as functions once switched.  Each test has a
 * private redis-server (harness_redis.h): function names are global to a
 * server, and the shared test Redis holds the service's library.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/hiredis.h>

#include "harness_redis.h"
#include <rlock/resp.h>
#include <rlock/rlock.h>
#include <rlock/script.h>

/* The body ends in a comment without a newline: the builder must still
 * close the function on a line of its own. */
static const char echo_text[] = "-- echo\nreturn KEYS[1] .. '=' .. ARGV[1] -- no newline after";
static const char echo2_text[] = "return 'v2'\n";
static const char write_text[] = "return redis.call('SET', KEYS[1], ARGV[1])\n";

/* How many times the server of c ran 'command' (INFO commandstats). */
static long long calls_of(redisContext *c, const char *command)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    ck_assert(r && r->type == REDIS_REPLY_STRING);
    char field[64];
    snprintf(field, sizeof field, "cmdstat_%s:calls=", command);
    const char *p = strstr(r->str, field);
    long long n = p ? atoll(p + strlen(field)) : 0;
    freeReplyObject(r);
    return n;
}

/* Builds library lib of fns and loads it on c; the version into ver. */
static void load(redisContext *c, const char *lib, const struct rlock_script *const *fns, size_t n,
                 char ver[RLOCK_SHA1_HEX_LEN + 1])
{
    size_t len;
    char *text = rlock_library_build(lib, fns, n, &len, ver);
    ck_assert_ptr_nonnull(text);
    redisReply *r = rlock_library_load(c, text, len);
    ck_assert_msg(r && r->type == REDIS_REPLY_STRING, "FUNCTION LOAD: %s",
                  r && r->str ? r->str : c->errstr);
    ck_assert_str_eq(r->str, lib);
    freeReplyObject(r);
    free(text);
}

START_TEST(test_function_runs_by_name_once_its_library_is_loaded)
{
    struct th_redis_server srv;
    th_redis_server_start(&srv, NULL);
    redisContext *c = th_redis_server_connect(&srv);
    struct rlock_script echo, ro_write, w;
    rlock_function_init(&echo, "t_echo", echo_text, sizeof echo_text - 1, RLOCK_FN_NO_WRITES);
    rlock_function_init(&ro_write, "t_ro_write", write_text, sizeof write_text - 1,
                        RLOCK_FN_NO_WRITES);
    rlock_function_init(&w, "t_write", write_text, sizeof write_text - 1, 0);
    const char *argv[] = {"k", "v\0binary"};
    const size_t argvlen[] = {1, 8};

    /* Not loaded: an error reply, and no EVAL of the text behind it. */
    redisReply *r = rlock_script_run(c, &echo, 1, 1, argv, argvlen);
    ck_assert_msg(rlock_reply_kind(r) == RLOCK_REPLY_NO_FUNCTION, "want Function not found, got %s",
                  r && r->str ? r->str : "no error");
    freeReplyObject(r);
    ck_assert_int_eq(rlock_library_check(c, "t", "0"), RLOCK_LIBRARY_MISSING);

    char ver[RLOCK_SHA1_HEX_LEN + 1];
    const struct rlock_script *fns[] = {&echo, &ro_write, &w};
    load(c, "t", fns, 3, ver);
    ck_assert_int_eq(rlock_library_check(c, "t", ver), RLOCK_LIBRARY_CURRENT);

    r = rlock_script_run(c, &echo, 1, 1, argv, argvlen);
    ck_assert_msg(r && r->type == REDIS_REPLY_STRING, "echo: %s", r && r->str ? r->str : "");
    ck_assert_uint_eq(r->len, 10);
    ck_assert_int_eq(memcmp(r->str, "k=v\0binary", 10), 0);
    freeReplyObject(r);
    /* A no-writes function goes by FCALL_RO and Redis holds it to that. */
    r = rlock_script_run(c, &ro_write, 1, 1, argv, argvlen);
    ck_assert(r && r->type == REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = rlock_script_run(c, &w, 1, 1, argv, argvlen);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    /* echo twice, ro_write, the version twice */
    ck_assert_int_eq(calls_of(c, "fcall_ro"), 5);
    ck_assert_int_eq(calls_of(c, "fcall"), 1);
    ck_assert_int_eq(calls_of(c, "eval") + calls_of(c, "evalsha"), 0);

    /* An upgrade: the same names, another text, replaced in place. */
    struct rlock_script echo2;
    rlock_function_init(&echo2, "t_echo", echo2_text, sizeof echo2_text - 1, RLOCK_FN_NO_WRITES);
    char ver2[RLOCK_SHA1_HEX_LEN + 1];
    const struct rlock_script *fns2[] = {&echo2, &ro_write, &w};
    size_t len;
    char *text2 = rlock_library_build("t", fns2, 3, &len, ver2);
    ck_assert_ptr_nonnull(text2);
    ck_assert_str_ne(ver, ver2);
    ck_assert_int_eq(rlock_library_check(c, "t", ver2), RLOCK_LIBRARY_OTHER);
    free(text2);
    load(c, "t", fns2, 3, ver2);
    ck_assert_int_eq(rlock_library_check(c, "t", ver2), RLOCK_LIBRARY_CURRENT);
    r = rlock_script_run(c, &echo, 1, 1, argv, argvlen); /* the old build, same name */
    ck_assert(r && r->type == REDIS_REPLY_STRING);
    ck_assert_str_eq(r->str, "v2");
    freeReplyObject(r);

    redisFree(c);
    th_redis_server_stop(&srv);
}
END_TEST

START_TEST(test_library_build_refuses_bad_names_and_plain_scripts)
{
    struct rlock_script plain, dash, ok;
    rlock_script_init(&plain, "plain", echo_text, sizeof echo_text - 1);
    rlock_function_init(&dash, "no-dash", echo_text, sizeof echo_text - 1, 0);
    rlock_function_init(&ok, "ok", echo_text, sizeof echo_text - 1, 0);
    char ver[RLOCK_SHA1_HEX_LEN + 1];
    size_t len;
    const struct rlock_script *with_plain[] = {&ok, &plain}, *with_dash[] = {&dash},
                              *fine[] = {&ok};
    ck_assert_ptr_null(rlock_library_build("t", with_plain, 2, &len, ver));
    ck_assert_ptr_null(rlock_library_build("t", with_dash, 1, &len, ver));
    ck_assert_ptr_null(rlock_library_build("bad name", fine, 1, &len, ver));
    char *text = rlock_library_build("t", fine, 1, &len, ver);
    ck_assert_ptr_nonnull(text);
    char again[RLOCK_SHA1_HEX_LEN + 1];
    char *text2 = rlock_library_build("t", fine, 1, &len, again);
    ck_assert_str_eq(ver, again); /* the same functions, the same version */
    free(text);
    free(text2);
}
END_TEST

struct async_result {
    int done, type;
    char got[32];
};

static void on_async(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct async_result *res = privdata;
    redisReply *r = reply;
    res->done = 1;
    res->type = r ? r->type : -1;
    if (r && r->str)
        snprintf(res->got, sizeof res->got, "%s", r->str);
    redisAsyncDisconnect(ac);
}

START_TEST(test_function_runs_async_by_name)
{
    struct th_redis_server srv;
    th_redis_server_start(&srv, NULL);
    redisContext *c = th_redis_server_connect(&srv);
    struct rlock_script echo;
    rlock_function_init(&echo, "t_echo", echo_text, sizeof echo_text - 1, RLOCK_FN_NO_WRITES);
    char ver[RLOCK_SHA1_HEX_LEN + 1];
    const struct rlock_script *fns[] = {&echo};
    load(c, "t", fns, 1, ver);

    struct event_base *base = event_base_new();
    redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", srv.port);
    ck_assert(ac && !ac->err);
    ck_assert_int_eq(redisLibeventAttach(ac, base), REDIS_OK);
    struct async_result res = {0};
    const char *argv[] = {"a", "1"};
    ck_assert_int_eq(rlock_script_run_async(ac, &echo, on_async, &res, 1, 1, argv, NULL), 0);
    event_base_dispatch(base);
    event_base_free(base);
    ck_assert_int_eq(res.type, REDIS_REPLY_STRING);
    ck_assert_str_eq(res.got, "a=1");
    ck_assert_int_eq(calls_of(c, "eval") + calls_of(c, "evalsha"), 0);
    redisFree(c);
    th_redis_server_stop(&srv);
}
END_TEST

/* Switched to functions, the locks call rlock_<file> by name: they work
 * with the library loaded, fail (not fall back to EVAL) without it. */
START_TEST(test_locks_call_the_library_functions_once_switched)
{
    struct th_redis_server srv;
    th_redis_server_start(&srv, NULL);
    redisContext *c = th_redis_server_connect(&srv);
    const struct rlock_script *fns[32];
    size_t n = 0;
    while (n < 32 && rlock_library_script(n))
        n++;
    for (size_t i = 0; i < n; i++)
        fns[i] = rlock_library_script(i);
    char ver[RLOCK_SHA1_HEX_LEN + 1];
    load(c, "locks", fns, n, ver);
    rlock_use_functions(); /* this test's process only (each test forks) */

    struct rlock l = {0};
    struct rlock_opts o = {.ttl_ms = 10000};
    ck_assert_int_eq(rlock_acquire(c, &l, "fn:lock", &o), RLOCK_OK);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    const char *keys[] = {"{fn}a", "{fn}b"};
    ck_assert_int_eq(rlock_acquire_multi(c, &l, keys, 2, &o), RLOCK_OK);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    ck_assert_int_gt(calls_of(c, "fcall"), 0);
    ck_assert_int_eq(calls_of(c, "eval") + calls_of(c, "evalsha"), 0);

    freeReplyObject(redisCommand(c, "FUNCTION DELETE locks"));
    ck_assert_int_eq(rlock_acquire(c, &l, "fn:lock2", &o), RLOCK_OK); /* SET NX PX */
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_ERR);
    ck_assert_int_eq(calls_of(c, "eval") + calls_of(c, "evalsha"), 0);
    redisFree(c);
    th_redis_server_stop(&srv);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rlock_functions");
    TCase *tc = tcase_create("functions");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_function_runs_by_name_once_its_library_is_loaded);
    tcase_add_test(tc, test_library_build_refuses_bad_names_and_plain_scripts);
    tcase_add_test(tc, test_function_runs_async_by_name);
    tcase_add_test(tc, test_locks_call_the_library_functions_once_switched);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
