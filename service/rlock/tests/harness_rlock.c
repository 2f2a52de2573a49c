#include "harness_rlock.h"

#define TH_RL_TIMEOUT_MS 2000

#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int th_rl_url_parse(struct rlock_url *u, char *why, size_t whylen)
{
    const char *url = getenv(TH_RL_URL_ENV);
    char err[256];
    if (!url || !*url) {
        snprintf(why, whylen, "%s is not set: run the tests through `make test`", TH_RL_URL_ENV);
        return -1;
    }
    if (rlock_url_parse(url, u, err, sizeof err) != 0) {
        snprintf(why, whylen, "%s: %s", TH_RL_URL_ENV, err);
        return -1;
    }
    return 0;
}

void th_rl_url(struct rlock_url *u)
{
    char why[320];
    ck_assert_msg(th_rl_url_parse(u, why, sizeof why) == 0, "%s", why);
}

redisContext *th_rl_connect(char *why, size_t whylen)
{
    struct rlock_url u;
    if (th_rl_url_parse(&u, why, whylen) != 0)
        return NULL;
    return rlock_url_connect(&u, TH_RL_TIMEOUT_MS, TH_RL_TIMEOUT_MS, why, whylen);
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
