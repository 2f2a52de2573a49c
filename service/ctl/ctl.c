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

static redisContext *said(struct ctl *ctl, redisContext *c)
{
    const struct rlock_url *t = &ctl->redis.target;
    if (c)
        return c;
    if (t->nseeds)
        ctl_say("cannot reach the Redis Cluster (%d seed nodes)", t->nseeds);
    else if (t->nsentinels)
        ctl_say("cannot reach the master '%s' through %d Sentinels", t->master, t->nsentinels);
    else
        ctl_say("cannot reach Redis at %s:%d", t->host, t->port);
    return NULL;
}

redisContext *ctl_redis(struct ctl *ctl)
{
    return said(ctl, redis_conn_get(&ctl->redis));
}
