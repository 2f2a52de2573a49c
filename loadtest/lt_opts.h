/*
 * lt_opts: the command line of seckill-loadtest.  Every number is a named
 * flag with a default and a range; a bad flag is a message and exit status 2.
 */
#ifndef LT_OPTS_H
#define LT_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lt_rand.h"

/* Exit statuses of seckill-loadtest. */
enum lt_exit {
    LT_EXIT_OK = 0,        /* run finished, every invariant held */
    LT_EXIT_VIOLATION = 1, /* an invariant failed or answers were wrong */
    LT_EXIT_USAGE = 2,     /* bad flags */
    LT_EXIT_ERROR = 3      /* could not run or check (unreachable, not drained, I/O) */
};

enum lt_mode {
    LT_MODE_RUN,        /* buyers, then the invariant check */
    LT_MODE_CHECK_ONLY, /* only the invariant check of an existing SKU */
    LT_MODE_RAW,        /* load only, no admin, no database (the HTTP ceiling) */
    LT_MODE_LOAD_ONLY   /* buyers and their answers file; the check comes later */
};

enum lt_user_pick { LT_PICK_SEQ, LT_PICK_RANDOM };

enum lt_sku_pick { LT_SKU_RANDOM, LT_SKU_ROUND_ROBIN };

#define LT_URL_MAX 256
#define LT_HOST_MAX 64
#define LT_TOKEN_MAX 256
#define LT_SECRET_MAX 512
#define LT_DSN_MAX 1024
#define LT_LABEL_MAX 64
#define LT_MAX_QTY 1000         /* the service's default max_qty_per_order */
#define LT_MAX_CONCURRENCY 5000 /* connections */
#define LT_MAX_DURATION_S 3600  /* hard bound on any run */
#define LT_MAX_TARGETS 8        /* --url given several times: instances of one service */
#define LT_MAX_SKUS 10000       /* --skus: SKUs bought at once */
#define LT_MAX_SOURCE_ADDRS 250 /* --source-addrs: 127.0.0.1 .. 127.0.0.250 */
#define LT_MAX_BUCKETS 64       /* --buckets: the service's bound of a SKU's buckets */
/* --payment-window: the service's bound of skus.payment_window_s (30 days) */
#define LT_MAX_PAYMENT_WINDOW_S 2592000

struct lt_target {
    char url[LT_URL_MAX];
    char host[LT_HOST_MAX]; /* numeric loopback address */
    int port;
};

struct lt_opts {
    enum lt_mode mode;
    char url[LT_URL_MAX];   /* the first --url: admin requests and reports */
    char host[LT_HOST_MAX]; /* numeric loopback address */
    int port;
    struct lt_target targets[LT_MAX_TARGETS]; /* buyers' connection i goes to i mod n */
    struct lt_target admin; /* --admin-url: the first instance's internal listener */
    int ntargets;
    char token[LT_TOKEN_MAX];
    char buyer_secret[LT_SECRET_MAX]; /* signs the buyers' tokens ("" none: raw mode only) */
    int64_t sku;                      /* 0: none given; the first of --skus */
    int skus;                         /* SKUs bought at once (sku .. sku+skus-1 when given) */
    enum lt_sku_pick sku_pick;        /* which SKU a request buys */
    int buckets; /* of the created SKU: 1 plain, N > 1 a parent over N bucket SKUs */
    int create_sku;
    int64_t stock, limit;
    int64_t users, user_base;
    enum lt_user_pick pick;
    int64_t requests; /* logical requests; retries come on top */
    int concurrency;
    int source_addrs; /* connection i binds to 127.0.0.(1 + i mod source_addrs) */
    double duration_s, warmup_s;
    char qty_spec[128];
    struct lt_dist qty;
    double retry_share;
    uint64_t seed;
    int timeout_ms;
    int error_pause_ms; /* a connection waits this long after no answer or a 503 */
    int64_t admin_deltas;
    int admin_every_ms;
    int64_t admin_max_delta;
    char pg_dsn[LT_DSN_MAX];
    char redis_url[LT_URL_MAX];
    int drain_timeout_s;
    int progress_ms;
    const char *report_html; /* NULL: none */
    const char *json_path;   /* NULL: derived from report_html, else none */
    const char *answers_path;
    int allow_lost_pending; /* a 202 without a row is counted, not a violation */
    /* The order lifecycle (lt_life.h): after the buyers, a share of the orders
     * is paid, a share cancelled, the rest walks away and expires. */
    double pay_share, cancel_share;
    int payment_window_s;    /* of a created SKU; 0: no payment step, confirmed is final */
    int lifecycle_timeout_s; /* beyond the window, for the last expiries and returns */
    char label[LT_LABEL_MAX];
};

/* Parses argv into o (defaults first, then SECKILL_ADMIN_TOKEN,
 * SECKILL_BUYER_TOKEN_SECRET, SECKILL_PG_DSN and SECKILL_REDIS_URL from the
 * environment, then flags).  Returns 0, 1 when
 * --help was asked (usage already printed), or -1 with a message in err. */
int lt_opts_parse(struct lt_opts *o, int argc, char **argv, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Prints the flags and their defaults. */
void lt_opts_usage(FILE *out);

/* True when 'host' is a literal IPv4 address in 127.0.0.0/8 or "localhost". */
int lt_is_loopback(const char *host);

#endif
