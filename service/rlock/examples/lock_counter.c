/*
 * lock_counter: the rlock library as another program uses it.
 *
 * Adds one to a counter in Redis by reading it (GET) and writing it back
 * (SET): two round trips that lose updates when several processes
 * interleave them.  Each round does it under a simple lock, so that any
 * number of lock_counter processes on one counter add up exactly.
 *
 *   lock_counter [-u redis://[USER:PASSWORD@]HOST:PORT[/DB]] [-h HOST] [-p PORT]
 *                [-k LOCK_KEY] [-c COUNTER_KEY] [-n ROUNDS] [-t TTL_MS]
 *                [-w WAIT_MS] [-s HOLD_MS] [-W] [-v]
 *
 * A round: rlock_acquire() waits up to WAIT_MS for the lock (lease TTL_MS);
 * GET; sleep HOLD_MS (to make a race visible); SET only if the lease surely
 * has time left (rlock_remaining_ms() > 0): a lease lock is only exclusive
 * while its lease lasts; rlock_release(), which deletes the key only if it
 * still holds our token and says so.  With -W the lock has no fixed lease:
 * a watchdog thread keeps renewing a TTL_MS lease every TTL_MS/3 until the
 * release, however long the round takes.
 *
 * Prints one line per round with -v, and a summary with the library's
 * counters.  Exits 0 when every round wrote under a lock it still held at
 * release; 1 on any failure; 2 on bad usage.
 *
 * Build it against an installed rlock (see the Makefile beside it):
 *   cc -o lock_counter lock_counter.c $(pkg-config --cflags --libs rlock)
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <rlock/metrics.h>
#include <rlock/rlock.h>
#include <rlock/url.h>
#include <rlock/watch.h>

#define DEFAULT_TTL_MS 10000
#define DEFAULT_WAIT_MS 10000
#define RETRY_MS 10               /* mean pause between tries of a busy lock */
#define IO_TIMEOUT_MS 5000        /* bound on every Redis round trip */
#define URL_ENV "RLOCK_REDIS_URL" /* the default of -u */

struct opts {
    struct rlock_url redis;
    const char *lock_key;
    const char *counter_key;
    long rounds;
    int ttl_ms;
    int wait_ms;
    int hold_ms;
    int watchdog;
    int verbose;
};

static void usage(void)
{
    fprintf(stderr,
            "usage: lock_counter [-u redis://[USER:PASSWORD@]HOST:PORT[/DB]] [-h HOST] [-p PORT]\n"
            "                    [-k LOCK_KEY] [-c COUNTER_KEY] [-n ROUNDS] [-t TTL_MS]\n"
            "                    [-w WAIT_MS] [-s HOLD_MS] [-W] [-v]\n"
            "  -u defaults to $" URL_ENV "\n");
    exit(2);
}

/* Parses a non-negative decimal integer up to max into *out; 0 or -1. */
static int parse_num(const char *s, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Parses a redis:// URL (rlock/url.h) into t; 0, or -1 with why on stderr. */
static int parse_url(const char *url, struct rlock_url *t)
{
    char err[256];
    if (rlock_url_parse(url, t, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "lock_counter: %s\n", err);
    return -1;
}

/* A connection with bounded I/O, authenticated, the database selected, or
 * NULL (why on stderr).  Also the watchdog's rlock_connect_fn: arg is the
 * target. */
static redisContext *connect_to(void *arg)
{
    char err[320];
    redisContext *c = rlock_url_connect(arg, IO_TIMEOUT_MS, IO_TIMEOUT_MS, err, sizeof err);
    if (!c)
        fprintf(stderr, "lock_counter: %s\n", err);
    return c;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Reads the counter (0 when absent) into *v.  Returns 0 or -1 (why on stderr). */
static int read_counter(redisContext *c, const char *key, long long *v)
{
    redisReply *r = redisCommand(c, "GET %s", key);
    int rc = -1;
    if (!r)
        fprintf(stderr, "lock_counter: GET %s: %s\n", key, c->errstr);
    else if (r->type == REDIS_REPLY_NIL) {
        *v = 0;
        rc = 0;
    } else if (r->type == REDIS_REPLY_STRING && sscanf(r->str, "%lld", v) == 1)
        rc = 0;
    else
        fprintf(stderr, "lock_counter: GET %s: not a counter\n", key);
    freeReplyObject(r);
    return rc;
}

/* Writes the counter.  Returns 0 or -1 (why on stderr). */
static int write_counter(redisContext *c, const char *key, long long v)
{
    redisReply *r = redisCommand(c, "SET %s %lld", key, v);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        fprintf(stderr, "lock_counter: SET %s: %s\n", key,
                r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* One round under the lock.  Returns 0, or -1 with the reason on stderr. */
static int one_round(redisContext *c, const struct opts *o, const struct rlock_opts *lo, long n)
{
    struct rlock l = {0};
    enum rlock_status st = rlock_acquire(c, &l, o->lock_key, lo);
    if (st != RLOCK_OK) {
        fprintf(stderr, "lock_counter: acquire %s: %s: %s\n", o->lock_key, rlock_status_str(st),
                l.err);
        return -1;
    }

    long long v = 0;
    int rc = read_counter(c, o->counter_key, &v);
    if (rc == 0 && o->hold_ms > 0)
        sleep_ms(o->hold_ms);
    /* Write only while the lease surely lasts; past it another process may
     * hold the lock and our write would undo its increment. */
    if (rc == 0 && rlock_lost(&l)) {
        fprintf(stderr, "lock_counter: the lease of %s ran out before the write; not written\n",
                o->lock_key);
        rc = -1;
    }
    if (rc == 0)
        rc = write_counter(c, o->counter_key, v + 1);

    char token[RLOCK_TOKEN_LEN + 1];
    memcpy(token, l.token, sizeof token);
    st = rlock_release(c, &l);
    if (st != RLOCK_OK) {
        /* NOT_OWNER: the key had expired or was someone else's by then. */
        fprintf(stderr, "lock_counter: release %s: %s: %s\n", o->lock_key, rlock_status_str(st),
                l.err);
        return -1;
    }
    if (rc == 0 && o->verbose)
        printf("round %ld: lock %s (token %s): %s %lld -> %lld, released\n", n, o->lock_key, token,
               o->counter_key, v, v + 1);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {.redis = {.host = "127.0.0.1", .port = 6379},
                     .lock_key = "lock_counter:{demo}:lock",
                     .counter_key = "lock_counter:{demo}:count",
                     .rounds = 1,
                     .ttl_ms = DEFAULT_TTL_MS,
                     .wait_ms = DEFAULT_WAIT_MS};
    long v;
    int ch;
    /* A URL with a password is best passed in the environment (not in ps). */
    const char *env_url = getenv(URL_ENV);
    if (env_url && parse_url(env_url, &o.redis) < 0)
        usage();
    while ((ch = getopt(argc, argv, "u:h:p:k:c:n:t:w:s:Wv")) != -1) {
        switch (ch) {
        case 'u':
            if (parse_url(optarg, &o.redis) < 0)
                usage();
            break;
        case 'h':
            snprintf(o.redis.host, sizeof o.redis.host, "%s", optarg);
            break;
        case 'p':
            if (parse_num(optarg, 65535, &v) < 0 || v == 0)
                usage();
            o.redis.port = (int)v;
            break;
        case 'k':
            o.lock_key = optarg;
            break;
        case 'c':
            o.counter_key = optarg;
            break;
        case 'n':
            if (parse_num(optarg, 1000000000L, &o.rounds) < 0)
                usage();
            break;
        case 't':
            if (parse_num(optarg, 86400000L, &v) < 0 || v < 30)
                usage();
            o.ttl_ms = (int)v;
            break;
        case 'w':
            if (parse_num(optarg, 86400000L, &v) < 0)
                usage();
            o.wait_ms = (int)v;
            break;
        case 's':
            if (parse_num(optarg, 86400000L, &v) < 0)
                usage();
            o.hold_ms = (int)v;
            break;
        case 'W':
            o.watchdog = 1;
            break;
        case 'v':
            o.verbose = 1;
            break;
        default:
            usage();
        }
    }
    if (optind != argc)
        usage();

    redisContext *c = connect_to(&o.redis);
    if (!c)
        return 1;
    struct rlock_opts lo = {.ttl_ms = o.ttl_ms, .wait_ms = o.wait_ms, .retry_ms = RETRY_MS};
    struct rlock_watchdog *wd = NULL;
    if (o.watchdog) {
        char err[128];
        struct rlock_watchdog_opts wo = {.lease_ms = o.ttl_ms};
        wd = rlock_watchdog_new(connect_to, &o.redis, &wo, err, sizeof err);
        if (!wd) {
            fprintf(stderr, "lock_counter: %s\n", err);
            redisFree(c);
            return 1;
        }
        lo.ttl_ms = 0; /* the watchdog's lease, renewed until release */
        lo.watchdog = wd;
    }

    int rc = 0;
    long done = 0;
    for (long n = 1; n <= o.rounds && rc == 0; n++) {
        rc = one_round(c, &o, &lo, n);
        if (rc == 0)
            done++;
    }

    long long now = -1;
    if (read_counter(c, o.counter_key, &now) < 0)
        rc = -1;
    struct rlock_metrics m;
    rlock_metrics_snapshot(&m);
    printf("lock_counter: %ld of %ld rounds under lock %s%s; %s is now %lld; "
           "acquired %" PRIu64 " (waited %" PRIu64 "), renewed %" PRIu64 ", released %" PRIu64
           ", lost %" PRIu64 "\n",
           done, o.rounds, o.lock_key, o.watchdog ? " (watchdog)" : "", o.counter_key, now,
           m.acquired, m.waited, m.renewed, m.released, m.lost);

    rlock_watchdog_free(wd);
    redisFree(c);
    return rc == 0 ? 0 : 1;
}
