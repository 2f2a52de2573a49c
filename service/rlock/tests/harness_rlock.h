/*
 * harness_rlock: the Redis helpers the rlock tests share.  They talk to the
 * test Redis named by SECKILL_TEST_REDIS_ADMIN_URL (redis://[USER:PASSWORD@]
 * HOST:PORT[/DB], rlock/url.h), as a user that may use any key and command:
 * the library's tests name keys freely and flush, pause and inspect the
 * server.  An unset or malformed variable is a failure, never a skip.  th_rl_connect()
 * asserts nothing, so threads, forked children and library callbacks may use
 * it; the others abort the test on failure.  Unlike harness.h this needs
 * nothing beyond hiredis, Check and libc (no libpq, no service config), so
 * library-level tests can use it on their own.
 */
#ifndef SECKILL_TEST_HARNESS_RLOCK_H
#define SECKILL_TEST_HARNESS_RLOCK_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include <rlock/url.h>

#define TH_RL_URL_ENV "SECKILL_TEST_REDIS_ADMIN_URL"

/* Parses the test Redis's URL; 0, or -1 with why set (no Check asserts). */
int th_rl_url_parse(struct rlock_url *u, char *why, size_t whylen);

/* th_rl_url_parse(), aborting the test with the reason on failure. */
void th_rl_url(struct rlock_url *u);

/* New connection (2 s timeouts, DB selected), no Check asserts; NULL with why set on failure. */
redisContext *th_rl_connect(char *why, size_t whylen);

/* th_rl_connect(), aborting the test with the reason on failure; the caller redisFree()s it. */
redisContext *th_rl_connect_or_fail(void);

/* rlock_connect_fn for notifiers and watchdogs: th_rl_connect(), arg unused, NULL on failure. */
redisContext *th_rl_connect_cb(void *arg);

/* Runs a command; returns its reply, any type (caller frees); aborts the test if there is none. */
redisReply *th_rl_cmd(redisContext *c, const char *fmt, ...);

/* Runs a command and returns its integer reply; aborts the test on no reply or another type. */
long long th_rl_int(redisContext *c, const char *fmt, ...);

/* Sleeps ms milliseconds, resuming after signal interruptions. */
void th_sleep_ms(long ms);

#endif
