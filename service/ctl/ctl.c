/*
 * ctl: what the seckillctl command groups share (messages, the Redis
 * connection); the entry point is main.c.
 */
#include "ctl/ctl.h"

#include <stdarg.h>
#include <stdio.h>

void ctl_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("seckillctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int ctl_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("seckillctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(see seckillctl --help)\n", stderr);
    va_end(ap);
    return CTL_EXIT_USAGE;
}

redisContext *ctl_redis(struct ctl *ctl)
{
    redisContext *c = redis_conn_get(&ctl->redis);
    if (!c)
        ctl_say("cannot reach Redis at %s:%d", ctl->redis.target.host, ctl->redis.target.port);
    return c;
}
