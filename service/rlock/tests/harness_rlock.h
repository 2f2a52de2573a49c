/*
 * harness_rlock: the Redis helpers the rlock tests share.  They talk to the
 * test Redis named by SECKILL_TEST_REDIS_URL (redis://HOST:PORT[/DB]); an
 * unset or malformed variable is a failure, never a skip.  th_rl_connect()
 * asserts nothing, so threads, forked children and library callbacks may use
 * it; the others abort the test on failure.  Unlike harness.h this needs
 * nothing beyond hiredis, Check and libc (no libpq, no service config), so
 * library-level tests can use it on their own.
 */
#ifndef SECKILL_TEST_HARNESS_RLOCK_H
#define SECKILL_TEST_HARNESS_RLOCK_H

#include <hiredis/hiredis.h>
#include <stddef.h>

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
