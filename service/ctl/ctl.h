/*
 * ctl: what the seckillctl command groups share: exit codes, the usage
 * text, error printing, the Redis connection (from --redis-url, else the
 * daemon's settings: SECKILL_REDIS_URL, SECKILL_CONFIG, defaults) of the
 * groups that talk to the stores, and the service URLs, output mode and
 * timeout of those that talk to the admin API (ctl_admin.h).
 */
#ifndef SECKILL_CTL_H
#define SECKILL_CTL_H

#include <hiredis.h>

#include "core/cfg.h"
#include "ctl/ctl_http.h"
#include "store/redis_conn.h"

/* Exit codes, for scripts. */
enum ctl_exit {
    CTL_EXIT_OK = 0,
    CTL_EXIT_ERROR = 1, /* Redis unreachable, Redis error, lock lost while held */
    CTL_EXIT_USAGE = 2, /* bad command line; nothing was done */
    CTL_EXIT_STATE = 3, /* the lock is not in the state asked for: busy (hold), absent */
    /* the admin API's groups (sku, order, sale, health) */
    CTL_EXIT_NOT_FOUND = 3, /* no such SKU or order (404) */
    CTL_EXIT_REFUSED = 4,   /* the service refused the request (another 4xx: a conflict,
                               not enough stock, a key reused, a bad value, rate limited) */
    CTL_EXIT_AUTH = 5,      /* no admin token, or the service refused it (401) */
};

#define CTL_URLS_MAX 16             /* instances one command names (health) */
#define CTL_TIMEOUT_MS_DEFAULT 5000 /* --timeout-ms: one request's whole exchange */
#define CTL_TIMEOUT_MS_MAX 600000

struct ctl {
    struct cfg cfg;          /* daemon settings; redis_url may come from --redis-url, the
                                admin token from SECKILL_ADMIN_TOKEN(_FILE) or --token-file */
    struct redis_conn redis; /* connected on first use by ctl_redis() */
    /* the admin API: --url (repeated, or a comma list), else SECKILL_URL, else
     * the daemon's metrics_addr */
    struct ctl_url urls[CTL_URLS_MAX];
    char url_text[CTL_URLS_MAX][CTL_HTTP_HOST_MAX + 16]; /* as shown: http://host:port */
    int nurls;
    int json;           /* --json: print the API's JSON */
    int64_t timeout_ms; /* --timeout-ms */
    int admin_flags;    /* an admin-only flag was given (refused by the other groups) */
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
