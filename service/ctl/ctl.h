/*
 * ctl: what the seckillctl command groups share: exit codes, the usage
 * text, error printing and the Redis connection (from --redis-url, else the
 * daemon's settings: SECKILL_REDIS_URL, SECKILL_CONFIG, defaults).
 */
#ifndef SECKILL_CTL_H
#define SECKILL_CTL_H

#include <hiredis.h>

#include "core/cfg.h"
#include "store/redis_conn.h"

/* Exit codes, for scripts. */
enum ctl_exit {
    CTL_EXIT_OK = 0,
    CTL_EXIT_ERROR = 1, /* Redis unreachable, Redis error, lock lost while held */
    CTL_EXIT_USAGE = 2, /* bad command line; nothing was done */
    CTL_EXIT_STATE = 3, /* the lock is not in the state asked for: busy (hold), absent */
};

struct ctl {
    struct cfg cfg;          /* daemon settings; redis_url may come from --redis-url */
    struct redis_conn redis; /* connected on first use by ctl_redis() */
};

/* Prints "seckillctl: <message>" on stderr. */
void ctl_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "seckillctl: <message>" and a pointer to --help on stderr; returns
 * CTL_EXIT_USAGE for the caller to exit with. */
int ctl_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Returns the connection (owned by ctl), or NULL after printing why it
 * could not be made. */
redisContext *ctl_redis(struct ctl *ctl);

#endif
