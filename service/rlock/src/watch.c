/*
 * watch: one thread renews every watched lock (see rlock/watch.h).
 *
 * The thread sleeps on a CLOCK_MONOTONIC condition variable until the next
 * renewal is due, marks that watch busy, drops the mutex for the round trip
 * and takes it back to record the outcome.  rlock_watch_stop() waits while
 * its watch is busy, which is what guarantees that no renewal and no lost
 * callback follows a release.
 */
#include "rlock/watch.h"

#include "rlock/cluster.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "rlock/metrics.h"
#include "rlock/resp.h"
#include "rlock/script.h"
#include "rlock/url.h"

/* After a failed round trip the next try comes after lease / this, so a
 * short outage is ridden out while the lease still has time. */
#define RETRY_DIVISOR 10
/* The longest idle sleep; the condition variable wakes the thread earlier. */
#define IDLE_MS 1000

struct rlock_watch {
    struct rlock_watch *next;
    struct rlock_watchdog *wd;
    const struct rlock_script *script;
    int nkeys;
    int nargs;
    char **argv;     /* KEYS then ARGV, one allocation (rlock_strv_dup), owned */
    int64_t next_ms; /* when the next renewal is due */
    _Atomic int64_t valid_until_ms;
    atomic_int lost;
    int busy;     /* the thread is renewing w or calling its callback */
    int stopped;  /* rlock_watch_stop() was called from the lost callback */
    int reported; /* the lost callback has run (or is running) */
    rlock_lost_fn *fn;
    void *arg;
};

struct rlock_watchdog {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* new watch, stop request */
    pthread_cond_t idle; /* a busy watch became idle */
    pthread_t thread;
    int stop;
    int lease_ms;
    int op_timeout_ms;
    rlock_connect_fn *connect;
    void *connect_arg;
    struct rlock_cluster *cluster; /* instead of connect: a cluster, used on the thread only */
    struct rlock_watch *watches;
};

static void free_watch(struct rlock_watch *w)
{
    if (!w)
        return;
    free(w->argv);
    free(w);
}

static void do_unlink(struct rlock_watchdog *wd, struct rlock_watch *w)
{
    for (struct rlock_watch **pp = &wd->watches; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            return;
        }
    }
}

/* Marks w lost once and runs its callback with the mutex released (w stays
 * busy, so it cannot be freed meanwhile). */
static void do_report_lost(struct rlock_watchdog *wd, struct rlock_watch *w)
{
    atomic_store(&w->lost, 1);
    if (w->reported)
        return;
    w->reported = 1;
    rlock_metrics_add(RLOCK_M_LOST, 1);
    if (w->fn && !w->stopped) {
        pthread_mutex_unlock(&wd->mu);
        w->fn(w->argv[0], w->arg);
        pthread_mutex_lock(&wd->mu);
    }
}

/* Renews w once over *c (opened on demand).  Called without the mutex. */
static void renew(struct rlock_watchdog *wd, redisContext **c, struct rlock_watch *w, int *gone,
                  int *ok)
{
    *gone = 0;
    *ok = 0;
    redisReply *r;
    if (wd->cluster) { /* to the master of the lock's first key, redirects followed */
        char err[256];
        r = rlock_cluster_script(wd->cluster, w->script, w->nkeys, w->nargs, (const char **)w->argv,
                                 NULL, err, sizeof err);
        if (r && r->type == REDIS_REPLY_INTEGER) {
            *ok = r->integer == 1;
            *gone = r->integer != 1;
        }
        freeReplyObject(r);
        return;
    }
    if (!*c) {
        redisContext *nc = wd->connect(wd->connect_arg);
        if (!nc || nc->err) {
            redisFree(nc);
            return;
        }
        struct timeval tv = {wd->op_timeout_ms / 1000, (wd->op_timeout_ms % 1000) * 1000};
        (void)redisSetTimeout(nc, tv);
        *c = nc;
    }
    r = rlock_script_run(*c, w->script, w->nkeys, w->nargs, (const char **)w->argv, NULL);
    if (!r) {
        redisFree(*c); /* timed out or broken: a fresh connection next time */
        *c = NULL;
        return;
    }
    if (r->type == REDIS_REPLY_INTEGER) {
        *ok = r->integer == 1;
        *gone = r->integer != 1;
    }
    /* A failover demoted that server (READONLY): the next renewal connects
     * again, to wherever the connection function now finds the master. */
    if (rlock_reply_kind(r) == RLOCK_REPLY_READONLY) {
        redisFree(*c);
        *c = NULL;
    }
    freeReplyObject(r);
}

static void *watchdog_main(void *arg)
{
    struct rlock_watchdog *wd = arg;
    redisContext *c = NULL;

    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        int64_t now = rlock_mono_ms();
        struct rlock_watch *due = NULL;
        int64_t next = now + IDLE_MS;
        for (struct rlock_watch *w = wd->watches; w; w = w->next) {
            if (w->stopped || atomic_load(&w->lost))
                continue;
            if (w->next_ms <= now && (!due || w->next_ms < due->next_ms))
                due = w;
            if (w->next_ms < next)
                next = w->next_ms;
        }
        if (!due) {
            struct timespec ts = rlock_mono_timespec(next);
            (void)pthread_cond_timedwait(&wd->wake, &wd->mu, &ts);
            continue;
        }

        due->busy = 1;
        pthread_mutex_unlock(&wd->mu);
        int64_t start = rlock_mono_ms();
        int gone, ok;
        renew(wd, &c, due, &gone, &ok);
        pthread_mutex_lock(&wd->mu);

        now = rlock_mono_ms();
        if (ok) {
            atomic_store(&due->valid_until_ms, start + wd->lease_ms);
            due->next_ms = start + wd->lease_ms / 3;
            rlock_metrics_add(RLOCK_M_RENEWED, 1);
        } else if (gone ||
                   atomic_load(&due->valid_until_ms) - rlock_drift_ms(wd->lease_ms) <= now) {
            do_report_lost(wd, due);
        } else {
            due->next_ms = now + wd->lease_ms / RETRY_DIVISOR;
        }
        due->busy = 0;
        if (due->stopped) {
            /* Stopped from its own lost callback: freeing is ours. */
            do_unlink(wd, due);
            free_watch(due);
        }
        pthread_cond_broadcast(&wd->idle);
    }
    pthread_mutex_unlock(&wd->mu);
    redisFree(c);
    return NULL;
}

/* Allocates a watchdog with o's lease and timeout.  NULL with err set. */
static struct rlock_watchdog *watchdog_alloc(const struct rlock_watchdog_opts *o, char *err,
                                             size_t errlen)
{
    int lease = o && o->lease_ms > 0 ? o->lease_ms : RLOCK_WATCHDOG_LEASE_MS;
    int timeout = o && o->op_timeout_ms > 0 ? o->op_timeout_ms : lease / 3;
    if (lease < 30 || timeout <= 0) {
        rlock_err_set(err, errlen, "watchdog: need lease_ms >= 30");
        return NULL;
    }
    struct rlock_watchdog *wd = calloc(1, sizeof *wd);
    if (!wd) {
        rlock_err_set(err, errlen, "watchdog: out of memory");
        return NULL;
    }
    wd->lease_ms = lease;
    wd->op_timeout_ms = timeout;
    return wd;
}

/* Starts wd's thread; frees wd (and its cluster) and returns NULL on failure. */
static struct rlock_watchdog *watchdog_start(struct rlock_watchdog *wd, char *err, size_t errlen)
{
    pthread_mutex_init(&wd->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->wake, &ca);
    pthread_cond_init(&wd->idle, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&wd->thread, NULL, watchdog_main, wd);
    if (rc != 0) {
        rlock_err_set(err, errlen, "watchdog: pthread_create: %s", strerror(rc));
        pthread_cond_destroy(&wd->wake);
        pthread_cond_destroy(&wd->idle);
        pthread_mutex_destroy(&wd->mu);
        rlock_cluster_free(wd->cluster);
        free(wd);
        return NULL;
    }
    return wd;
}

struct rlock_watchdog *rlock_watchdog_new(rlock_connect_fn *connect, void *connect_arg,
                                          const struct rlock_watchdog_opts *o, char *err,
                                          size_t errlen)
{
    if (!connect) {
        rlock_err_set(err, errlen, "watchdog: need a connect function");
        return NULL;
    }
    struct rlock_watchdog *wd = watchdog_alloc(o, err, errlen);
    if (!wd)
        return NULL;
    wd->connect = connect;
    wd->connect_arg = connect_arg;
    return watchdog_start(wd, err, errlen);
}

struct rlock_watchdog *rlock_watchdog_new_cluster(const struct rlock_url *u,
                                                  const struct rlock_cluster_opts *co,
                                                  const struct rlock_watchdog_opts *o, char *err,
                                                  size_t errlen)
{
    struct rlock_watchdog *wd = watchdog_alloc(o, err, errlen);
    if (!wd)
        return NULL;
    struct rlock_cluster_opts opts = co ? *co : (struct rlock_cluster_opts){0};
    if (opts.io_timeout_ms <= 0) /* a renewal's bound */
        opts.io_timeout_ms = wd->op_timeout_ms;
    if (opts.connect_timeout_ms <= 0)
        opts.connect_timeout_ms = wd->op_timeout_ms;
    wd->cluster = rlock_cluster_new(u, &opts, err, errlen);
    if (!wd->cluster) {
        free(wd);
        return NULL;
    }
    return watchdog_start(wd, err, errlen);
}

void rlock_watchdog_free(struct rlock_watchdog *wd)
{
    if (!wd)
        return;
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_broadcast(&wd->wake);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    /* Watches left behind are the caller's bug; they are not freed, since
     * their locks still point at them. */
    pthread_cond_destroy(&wd->wake);
    pthread_cond_destroy(&wd->idle);
    pthread_mutex_destroy(&wd->mu);
    rlock_cluster_free(wd->cluster);
    free(wd);
}

int rlock_watchdog_lease_ms(const struct rlock_watchdog *wd)
{
    return wd ? wd->lease_ms : 0;
}

/* Builds and registers a watch over argv[0..nkeys+nargs) (copied). */
static struct rlock_watch *watch_start(struct rlock_watchdog *wd, const struct rlock_script *s,
                                       int nkeys, int nargs, const char *const *argv,
                                       int64_t since_ms, rlock_lost_fn *fn, void *arg)
{
    if (!wd)
        return NULL;
    struct rlock_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->argv = rlock_strv_dup(argv, (size_t)(nkeys + nargs));
    if (!w->argv) {
        free(w);
        return NULL;
    }
    w->nkeys = nkeys;
    w->nargs = nargs;
    w->wd = wd;
    w->script = s;
    w->fn = fn;
    w->arg = arg;
    atomic_store(&w->valid_until_ms, since_ms + wd->lease_ms);
    w->next_ms = since_ms + wd->lease_ms / 3;

    pthread_mutex_lock(&wd->mu);
    w->next = wd->watches;
    wd->watches = w;
    pthread_cond_signal(&wd->wake);
    pthread_mutex_unlock(&wd->mu);
    return w;
}

struct rlock_watch *rlock_watch_tokens(struct rlock_watchdog *wd, const char *const *keys,
                                       size_t nkeys, const char *token, int64_t since_ms,
                                       rlock_lost_fn *fn, void *arg)
{
    if (!wd || !keys || nkeys == 0 || nkeys > 1024 * 1024 || !token)
        return NULL;
    char lease[16];
    snprintf(lease, sizeof lease, "%d", wd->lease_ms);
    const char **argv = malloc((nkeys + 2) * sizeof *argv);
    if (!argv)
        return NULL;
    for (size_t i = 0; i < nkeys; i++)
        argv[i] = keys[i];
    argv[nkeys] = token;
    argv[nkeys + 1] = lease;
    struct rlock_watch *w =
        watch_start(wd, rlock_lua(RLOCK_LUA_EXTEND), (int)nkeys, 2, argv, since_ms, fn, arg);
    free(argv);
    return w;
}

struct rlock_watch *rlock_watch_owner(struct rlock_watchdog *wd, const char *key, const char *owner,
                                      int64_t since_ms, rlock_lost_fn *fn, void *arg)
{
    if (!wd || !key || !owner)
        return NULL;
    char lease[16];
    snprintf(lease, sizeof lease, "%d", wd->lease_ms);
    const char *argv[] = {key, lease, owner};
    return watch_start(wd, rlock_lua(RLOCK_LUA_REENTRANT_RENEW), 1, 2, argv, since_ms, fn, arg);
}

int rlock_watch_lost(const struct rlock_watch *w)
{
    return rlock_watch_remaining_ms(w) == 0;
}

int64_t rlock_watch_remaining_ms(const struct rlock_watch *w)
{
    if (atomic_load(&w->lost))
        return 0;
    int64_t left =
        atomic_load(&w->valid_until_ms) - rlock_drift_ms(w->wd->lease_ms) - rlock_mono_ms();
    return left > 0 ? left : 0;
}

void rlock_watch_stop(struct rlock_watch *w)
{
    if (!w)
        return;
    struct rlock_watchdog *wd = w->wd;
    pthread_mutex_lock(&wd->mu);
    if (w->busy && pthread_equal(pthread_self(), wd->thread)) {
        /* From inside its own lost callback: the thread frees it after. */
        w->stopped = 1;
        pthread_mutex_unlock(&wd->mu);
        return;
    }
    while (w->busy)
        pthread_cond_wait(&wd->idle, &wd->mu);
    do_unlink(wd, w);
    pthread_mutex_unlock(&wd->mu);
    free_watch(w);
}
