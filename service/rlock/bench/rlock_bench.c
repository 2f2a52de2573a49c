/*
 * rlock-bench: acquire+release pairs per second of the rlock simple lock,
 * driven through one hiredis async connection on one libevent loop, the way
 * the service's event loops use Redis.  bench-rlock.sh (beside it) runs it
 * next to the same workload on node-redlock and prints the ratio.
 *
 *   rlock-bench --redis-url redis://127.0.0.1:6379/0 --mode uncontended|contended
 *               [--client library|raw] [--notifier on|off] [--concurrency 50]
 *               [--duration-ms 5000] [--ttl-ms 10000] [--retry-ms 10]
 *
 * uncontended: 'concurrency' loops, each on its own key, each doing
 *   SET key token NX PX ttl, then the release script, then again.
 * contended:   'concurrency' waiters on ONE key; each attempt comes after a
 *   jittered pause of retry_ms (uniform in [retry/2, retry*3/2], as rlock and
 *   node-redlock's retryDelay +- retryJitter), also the first one after a
 *   release, so the last holder does not simply take the lock again; the
 *   holder releases at once.  Reports the hand-over latency: from one
 *   holder's release reply to the next holder's acquire reply.
 *
 * --client library (default) goes through the library's async API
 * (rlock_async.h: per-command deadlines, waiting, and with --notifier on,
 * the default, early wake-ups from a notifier on the release channel, as the
 * daemon runs it: a second connection, subscribed only while someone waits).
 * --notifier off leaves the library one connection, polling only.
 * --client raw sends the same kind of operations by hand (SET NX PX; EVALSHA
 * of lua/rlock/release.lua, EVAL on NOSCRIPT, via rlock_script_run_async()):
 * the floor of what one connection can do, to see the library's own cost.
 * It takes the script from the library's registry (src/internal.h): the
 * bench sits beside the library and measures exactly what it sends.
 *
 * Prints one line of key=value pairs on stdout; exits 1 on errors.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <rlock/async.h>
#include <rlock/notify.h>
#include <rlock/rlock.h>
#include <rlock/script.h>
#include <rlock/url.h>

#include "internal.h"

#define MAX_CONCURRENCY 10000
#define DRAIN_GRACE_MS 5000 /* after the run, how long in-flight pairs may take */
#define OP_TIMEOUT_MS 5000  /* library client: bound on one Redis round trip */

struct opts {
    struct rlock_url redis;
    int contended;
    int raw;      /* 1: hand-made commands; 0: the library's async API */
    int notifier; /* library: wake waiters through a notifier (pub/sub) */
    int concurrency;
    int duration_ms;
    int ttl_ms;
    int retry_ms;
};

/* Latencies in microseconds, grown as needed. */
struct samples {
    uint32_t *v;
    size_t n, cap;
};

struct bench;

struct loop {
    struct bench *b;
    int id;
    char key[64];
    char token[RLOCK_TOKEN_LEN + 1];
    int64_t started_ns; /* this pair's acquire was sent */
    struct event *retry;
    int busy; /* a command of this loop is in flight or a retry is armed */
};

struct bench {
    struct opts o;
    struct event_base *base;
    redisAsyncContext *ac;
    struct rlock_async *lib;            /* library client, or NULL with --client raw */
    struct rlock_notifier *notifier;    /* library client: release wake-ups */
    const struct rlock_script *release; /* raw client: the library's release script */
    struct loop *loops;
    struct event *stop, *give_up;
    int stopping;
    int in_flight; /* loops that have not stopped yet */
    int64_t start_ns, stop_ns;
    int64_t last_release_ns; /* contended: when the lock was last handed back */
    unsigned long long pairs, busy_retries, errors, lost;
    uint64_t rng;
    struct samples pair_us, handover_us;
    char first_error[256];
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sample_add(struct samples *s, int64_t ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        uint32_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return; /* keep counting pairs; lose the sample */
        s->v = v;
        s->cap = cap;
    }
    int64_t us = ns / 1000;
    s->v[s->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Returns the q-quantile in milliseconds (nearest rank), NAN if empty. */
static double quantile_ms(struct samples *s, double q)
{
    if (s->n == 0)
        return NAN;
    size_t rank = (size_t)ceil(q * (double)s->n);
    if (rank < 1)
        rank = 1;
    return s->v[rank - 1] / 1000.0;
}

static void fail(struct bench *b, const char *what, const char *detail)
{
    b->errors++;
    if (!b->first_error[0])
        snprintf(b->first_error, sizeof b->first_error, "%s: %s", what, detail ? detail : "");
    b->stopping = 1;
}

static void loop_next(struct loop *l);

/* Schedules l's next attempt after a pause uniform in [retry/2, retry*3/2]
 * (xorshift64*: only spreads waiters apart). */
static void arm_retry(struct loop *l)
{
    struct bench *b = l->b;
    uint64_t x = b->rng;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    b->rng = x;
    uint64_t span_us = (uint64_t)b->o.retry_ms * 1000;
    int64_t pause_us = (int64_t)(span_us / 2 + (x * 0x2545f4914f6cdd1dULL) % (span_us + 1));
    struct timeval tv = {pause_us / 1000000, pause_us % 1000000};
    l->busy = 1;
    evtimer_add(l->retry, &tv);
}

/* A loop that will issue nothing more. */
static void loop_done(struct loop *l)
{
    struct bench *b = l->b;
    l->busy = 0;
    if (--b->in_flight > 0)
        return;
    /* Nothing left to run: no timer may keep the loop alive. */
    evtimer_del(b->stop);
    evtimer_del(b->give_up);
    /* After an error the connection may already be going away by itself. */
    if (b->lib)
        rlock_async_set_context(b->lib, NULL);
    if (b->errors || !b->ac)
        event_base_loopbreak(b->base);
    else
        redisAsyncDisconnect(b->ac);
}

static void on_release(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    struct loop *l = privdata;
    struct bench *b = l->b;
    redisReply *reply = r;
    int64_t t = now_ns();
    if (!reply || reply->type != REDIS_REPLY_INTEGER) {
        fail(b, "release", reply && reply->type == REDIS_REPLY_ERROR ? reply->str : "no reply");
        loop_done(l);
        return;
    }
    if (reply->integer != 1)
        b->lost++; /* the lease ran out under us: never expected with these ttls */
    if (t <= b->stop_ns) {
        b->pairs++;
        sample_add(&b->pair_us, t - l->started_ns);
    }
    b->last_release_ns = t;
    loop_next(l);
}

static void on_acquire(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    struct loop *l = privdata;
    struct bench *b = l->b;
    redisReply *reply = r;
    if (!reply) {
        fail(b, "acquire", ac->errstr);
        loop_done(l);
        return;
    }
    if (reply->type == REDIS_REPLY_NIL) {
        /* Busy (contended mode): wait a jittered retry_ms, as rlock does. */
        b->busy_retries++;
        if (b->stopping) {
            loop_done(l);
            return;
        }
        arm_retry(l);
        return;
    }
    if (reply->type != REDIS_REPLY_STATUS || strcmp(reply->str, "OK") != 0) {
        fail(b, "acquire", reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        loop_done(l);
        return;
    }
    if (b->o.contended && b->last_release_ns > 0)
        sample_add(&b->handover_us, now_ns() - b->last_release_ns);
    const char *argv[] = {l->key, l->token};
    if (rlock_script_run_async(b->ac, b->release, on_release, l, 1, 1, argv, NULL) != 0) {
        fail(b, "release", "could not queue");
        loop_done(l);
    }
}

/* ---- --client library ---- */

static void lib_on_release(enum rlock_status st, const char *err, void *arg)
{
    struct loop *l = arg;
    struct bench *b = l->b;
    int64_t t = now_ns();
    if (st == RLOCK_ERR) {
        fail(b, "release", err);
        loop_done(l);
        return;
    }
    if (st != RLOCK_OK)
        b->lost++;
    if (t <= b->stop_ns) {
        b->pairs++;
        sample_add(&b->pair_us, t - l->started_ns);
    }
    b->last_release_ns = t;
    loop_next(l);
}

static void lib_on_acquire(enum rlock_status st, struct rlock_async_lock *lk, const char *err,
                           void *arg)
{
    struct loop *l = arg;
    struct bench *b = l->b;
    if (st == RLOCK_BUSY) {
        /* The wait ends with the run; before that only a try-once is busy. */
        b->busy_retries++;
        loop_next(l);
        return;
    }
    if (st != RLOCK_OK) {
        fail(b, "acquire", err);
        loop_done(l);
        return;
    }
    if (b->o.contended && b->last_release_ns > 0)
        sample_add(&b->handover_us, now_ns() - b->last_release_ns);
    if (rlock_async_release(lk, lib_on_release, l) != 0) {
        rlock_async_forget(lk);
        fail(b, "release", "could not queue");
        loop_done(l);
    }
}

/* The library waits by itself (jittered polls, woken early by the notifier)
 * until the end of the run. */
static void lib_acquire(struct loop *l)
{
    struct bench *b = l->b;
    int64_t left_ms = (b->stop_ns - now_ns()) / 1000000;
    struct rlock_async_req r = {
        .key = l->key,
        .ttl_ms = b->o.ttl_ms,
        .wait_ms = b->o.contended ? (int)(left_ms > 1 ? left_ms : 1) : 0,
        .retry_ms = b->o.retry_ms,
    };
    if (rlock_async_acquire(b->lib, &r, lib_on_acquire, l) != 0) {
        fail(b, "acquire", "could not start");
        loop_done(l);
    }
}

/* ---- --client raw ---- */

/* Sends SET NX PX for l's current token (or starts the library's acquire). */
static void send_acquire(struct loop *l)
{
    struct bench *b = l->b;
    if (b->lib) {
        if (!l->started_ns)
            l->started_ns = now_ns();
        l->busy = 1;
        lib_acquire(l);
        return;
    }
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", b->o.ttl_ms);
    const char *argv[] = {"SET", l->key, l->token, "NX", "PX", ttl};
    if (!l->started_ns)
        l->started_ns = now_ns(); /* a pair counts from its first attempt */
    l->busy = 1;
    if (redisAsyncCommandArgv(b->ac, on_acquire, l, 6, argv, NULL) != REDIS_OK) {
        fail(b, "acquire", "could not queue");
        loop_done(l);
    }
}

/* Sends the next acquire of l, or ends l once the run is over. */
static void loop_next(struct loop *l)
{
    struct bench *b = l->b;
    if (b->stopping) {
        loop_done(l);
        return;
    }
    if (rlock_token_new(l->token) < 0) {
        fail(b, "token", strerror(errno));
        loop_done(l);
        return;
    }
    l->started_ns = 0;
    if (b->o.contended) {
        /* Everyone, the last holder included, waits before trying again, as
         * a worker that does other things between two critical sections. */
        arm_retry(l);
        return;
    }
    send_acquire(l);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct loop *l = arg;
    if (l->b->stopping) {
        loop_done(l);
        return;
    }
    send_acquire(l); /* a retry keeps the pair's start: the pair includes its waiting */
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct bench *b = arg;
    b->stopping = 1;
    /* Waiters parked on a retry timer end now rather than at their timer. */
    for (int i = 0; i < b->o.concurrency; i++) {
        struct loop *l = &b->loops[i];
        if (evtimer_pending(l->retry, NULL)) {
            evtimer_del(l->retry);
            loop_done(l);
        }
    }
}

static void on_give_up(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct bench *b = arg;
    fail(b, "drain", "in-flight pairs did not finish");
    event_base_loopbreak(b->base);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    if (status != REDIS_OK)
        fprintf(stderr, "rlock-bench: connect: %s\n", ac->errstr);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct bench *b = ac->data;
    (void)status;
    b->ac = NULL; /* hiredis frees it after this callback */
}

/* The notifier's subscriber connection (made on its own thread). */
static redisContext *notifier_connect(void *arg)
{
    const struct opts *o = arg;
    char err[320];
    redisContext *c = rlock_url_connect(&o->redis, OP_TIMEOUT_MS, OP_TIMEOUT_MS, err, sizeof err);
    if (!c)
        fprintf(stderr, "rlock-bench: %s\n", err);
    return c;
}

static int parse_url(const char *url, struct opts *o)
{
    char err[256];
    if (rlock_url_parse(url, &o->redis, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "rlock-bench: %s\n", err);
    return -1;
}

static int parse_int(const char *s, int min, int max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

static void usage(FILE *out)
{
    fputs("usage: rlock-bench --redis-url redis://[USER:PASSWORD@]HOST:PORT[/DB] --mode "
          "uncontended|contended\n"
          "                   [--client library|raw] [--notifier on|off] [--concurrency N]\n"
          "                   [--duration-ms MS] [--ttl-ms MS] [--retry-ms MS]\n",
          out);
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option longs[] = {
        {"redis-url", required_argument, NULL, 'u'},
        {"mode", required_argument, NULL, 'm'},
        {"concurrency", required_argument, NULL, 'c'},
        {"duration-ms", required_argument, NULL, 'd'},
        {"ttl-ms", required_argument, NULL, 't'},
        {"retry-ms", required_argument, NULL, 'r'},
        {"client", required_argument, NULL, 'k'},
        {"notifier", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct opts){
        .concurrency = 50, .duration_ms = 5000, .ttl_ms = 10000, .retry_ms = 10, .notifier = 1};
    int have_url = 0, have_mode = 0, ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'u':
            bad = parse_url(optarg, o);
            have_url = 1;
            break;
        case 'm':
            have_mode = 1;
            if (strcmp(optarg, "contended") == 0)
                o->contended = 1;
            else
                bad = strcmp(optarg, "uncontended") != 0;
            break;
        case 'k':
            if (strcmp(optarg, "raw") == 0)
                o->raw = 1;
            else
                bad = strcmp(optarg, "library") != 0;
            break;
        case 'n':
            if (strcmp(optarg, "on") == 0)
                o->notifier = 1;
            else if (strcmp(optarg, "off") == 0)
                o->notifier = 0;
            else
                bad = 1;
            break;
        case 'c':
            bad = parse_int(optarg, 1, MAX_CONCURRENCY, &o->concurrency);
            break;
        case 'd':
            bad = parse_int(optarg, 100, 3600000, &o->duration_ms);
            break;
        case 't':
            bad = parse_int(optarg, 100, INT_MAX, &o->ttl_ms);
            break;
        case 'r':
            bad = parse_int(optarg, 1, 60000, &o->retry_ms);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "rlock-bench: bad value for an option\n");
            usage(stderr);
            return -1;
        }
    }
    if (!have_url || !have_mode || optind != argc) {
        usage(stderr);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct bench b;
    if (parse_opts(argc, argv, &b.o) < 0)
        return 2;
    b.release = rlock_lua(RLOCK_LUA_RELEASE);
    b.rng = (uint64_t)now_ns() | 1;

    /* Retry pauses are a few ms: with the default millisecond epoll timeouts,
     * waiters would wake in batches and the hand-over would measure the timer
     * granularity instead of the lock. */
    int use_notifier = !b.o.raw && b.o.notifier;
    if (use_notifier && evthread_use_pthreads() != 0) /* the notifier wakes the loop */
        return 1;
    struct event_config *ec = event_config_new();
    if (ec)
        event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    b.base = ec ? event_base_new_with_config(ec) : NULL;
    if (ec)
        event_config_free(ec);
    b.ac = b.base ? redisAsyncConnect(b.o.redis.host, b.o.redis.port) : NULL;
    if (!b.ac || b.ac->err) {
        fprintf(stderr, "rlock-bench: cannot connect to %s:%d\n", b.o.redis.host, b.o.redis.port);
        return 1;
    }
    b.ac->data = &b;
    redisLibeventAttach(b.ac, b.base);
    redisAsyncSetConnectCallback(b.ac, on_connect);
    redisAsyncSetDisconnectCallback(b.ac, on_disconnect);
    if (rlock_url_handshake_async(b.ac, &b.o.redis, NULL, NULL) != 0) {
        fprintf(stderr, "rlock-bench: cannot queue AUTH / SELECT\n");
        return 1;
    }
    if (!b.o.raw) {
        char err[160] = "out of memory";
        if (use_notifier)
            b.notifier = rlock_notifier_new(notifier_connect, &b.o, err, sizeof err);
        struct rlock_async_opts ao = {.op_timeout_ms = OP_TIMEOUT_MS, .notifier = b.notifier};
        b.lib = !use_notifier || b.notifier ? rlock_async_new(b.base, &ao) : NULL;
        if (!b.lib) {
            fprintf(stderr, "rlock-bench: library client: %s\n", err);
            return 1;
        }
        rlock_async_set_context(b.lib, b.ac);
    }

    b.loops = calloc((size_t)b.o.concurrency, sizeof *b.loops);
    if (!b.loops)
        return 1;
    unsigned run_id = (unsigned)(now_ns() % 1000000);
    for (int i = 0; i < b.o.concurrency; i++) {
        struct loop *l = &b.loops[i];
        l->b = &b;
        l->id = i;
        if (b.o.contended)
            snprintf(l->key, sizeof l->key, "rlock-bench:%u:{contended}", run_id);
        else
            snprintf(l->key, sizeof l->key, "rlock-bench:%u:{key:%d}", run_id, i);
        l->retry = evtimer_new(b.base, on_retry, l);
        if (!l->retry)
            return 1;
    }

    struct timeval run = {b.o.duration_ms / 1000, (b.o.duration_ms % 1000) * 1000};
    struct timeval grace = {(b.o.duration_ms + DRAIN_GRACE_MS) / 1000,
                            ((b.o.duration_ms + DRAIN_GRACE_MS) % 1000) * 1000};
    b.stop = evtimer_new(b.base, on_stop, &b);
    b.give_up = evtimer_new(b.base, on_give_up, &b);
    if (!b.stop || !b.give_up)
        return 1;
    evtimer_add(b.stop, &run);
    evtimer_add(b.give_up, &grace);

    b.start_ns = now_ns();
    b.stop_ns = b.start_ns + (int64_t)b.o.duration_ms * 1000000;
    b.in_flight = b.o.concurrency;
    for (int i = 0; i < b.o.concurrency; i++)
        loop_next(&b.loops[i]);
    event_base_dispatch(b.base);

    double secs = b.o.duration_ms / 1000.0;
    if (b.pair_us.n)
        qsort(b.pair_us.v, b.pair_us.n, sizeof *b.pair_us.v, cmp_u32);
    if (b.handover_us.n)
        qsort(b.handover_us.v, b.handover_us.n, sizeof *b.handover_us.v, cmp_u32);
    printf("mode=%s impl=%s notifier=%s concurrency=%d duration_s=%.2f pairs=%llu pairs_per_s=%.0f "
           "pair_p50_ms=%.3f pair_p99_ms=%.3f handover_p50_ms=%.3f handover_p99_ms=%.3f "
           "busy_retries=%llu lost=%llu errors=%llu\n",
           b.o.contended ? "contended" : "uncontended", b.o.raw ? "rlock-raw" : "rlock-async",
           use_notifier ? "on" : "off", b.o.concurrency, secs, b.pairs, b.pairs / secs,
           quantile_ms(&b.pair_us, 0.50), quantile_ms(&b.pair_us, 0.99),
           quantile_ms(&b.handover_us, 0.50), quantile_ms(&b.handover_us, 0.99), b.busy_retries,
           b.lost, b.errors);
    if (b.errors)
        fprintf(stderr, "rlock-bench: %llu errors, first: %s\n", b.errors, b.first_error);

    rlock_async_free(b.lib);
    if (b.ac)
        redisAsyncFree(b.ac);
    rlock_notifier_free(b.notifier);
    for (int i = 0; i < b.o.concurrency; i++)
        event_free(b.loops[i].retry);
    event_free(b.stop);
    event_free(b.give_up);
    free(b.loops);
    free(b.pair_us.v);
    free(b.handover_us.v);
    event_base_free(b.base);
    return b.errors ? 1 : 0;
}
