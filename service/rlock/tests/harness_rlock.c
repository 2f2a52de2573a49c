#include "harness_rlock.h"

#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

redisContext *th_rl_connect(char *why, size_t whylen)
{
    const char *url = getenv("SECKILL_TEST_REDIS_URL");
    char host[128];
    int port = 0, db = 0;
    if (!url || sscanf(url, "redis://%127[^:]:%d/%d", host, &port, &db) < 2 || port <= 0) {
        snprintf(why, whylen, "SECKILL_TEST_REDIS_URL is unset or not redis://HOST:PORT[/DB]: %s",
                 url ? url : "(unset)");
        return NULL;
    }
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (!c || c->err) {
        snprintf(why, whylen, "connect %.64s:%d: %.64s", host, port, c ? c->errstr : "OOM");
        redisFree(c);
        return NULL;
    }
    (void)redisSetTimeout(c, tv);
    if (db != 0) {
        redisReply *r = redisCommand(c, "SELECT %d", db);
        int ok = r && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        if (!ok) {
            snprintf(why, whylen, "SELECT %d failed", db);
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

redisContext *th_rl_connect_or_fail(void)
{
    char why[256];
    redisContext *c = th_rl_connect(why, sizeof why);
    ck_assert_msg(c != NULL, "%s", why);
    return c;
}

redisContext *th_rl_connect_cb(void *arg)
{
    (void)arg;
    char why[256];
    return th_rl_connect(why, sizeof why);
}

redisReply *th_rl_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "redis command failed: %s", c->errstr);
    return r;
}

long long th_rl_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "redis command failed: %s", c->errstr);
    ck_assert_msg(r->type == REDIS_REPLY_INTEGER, "expected an integer reply, got type %d",
                  r->type);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

void th_sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}
