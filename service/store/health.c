#include "store/health.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "store/db.h"
#include "store/pgwait.h"
#include "store/redis_conn.h"

/* The thread and connection of one store. */
struct prober {
    struct health *h;
    enum health_store store;
    pthread_t tid;
    int started;
    struct redis_conn redis;   /* HEALTH_REDIS */
    struct db_conn db;         /* HEALTH_POSTGRES */
    struct health_report last; /* under h->mu */
    int64_t last_at_ms;        /* under h->mu: when 'last' ended (clock_mono_ms), 0: never */
};

struct health {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the probe threads early to stop */
    int stopping;
    int64_t timeout_ms, interval_ms;
    struct prober p[HEALTH_STORES];
};

/* PING to every server that holds keys, each within what is left of the
 * probe's bound. */
static void probe_redis(struct prober *p, struct health_report *rep)
{
    redis_conn_set_deadline(&p->redis, clock_mono_ms() + p->h->timeout_ms);
    rep->cluster = p->redis.target.nseeds > 0;
    int n = redis_conn_nservers(&p->redis);
    rep->total = n > 0 ? n : 0;
    for (int i = 0; i < n; i++) {
        redisContext *c = redis_conn_server(&p->redis, i);
        redisReply *r = c ? redisCommand(c, "PING") : NULL;
        rep->up += r && r->type != REDIS_REPLY_ERROR;
        freeReplyObject(r);
    }
}

/* SELECT 1 (after a connect, if needed) within the probe's bound. */
static void probe_postgres(struct prober *p, struct health_report *rep)
{
    pgwait_set_thread_deadline(clock_mono_ms() + p->h->timeout_ms);
    rep->total = 1;
    rep->up = db_ping(&p->db) == 0;
    pgwait_set_thread_deadline(0);
}

/* One probe of p's store; its result replaces the last one. */
static void probe_once(struct prober *p)
{
    struct health_report rep = {.store = p->store, .probed = 1};
    if (p->store == HEALTH_REDIS)
        probe_redis(p, &rep);
    else
        probe_postgres(p, &rep);
    pthread_mutex_lock(&p->h->mu);
    p->last = rep;
    p->last_at_ms = clock_mono_ms();
    pthread_mutex_unlock(&p->h->mu);
}

static void *prober_main(void *arg)
{
    struct prober *p = arg;
    struct health *h = p->h;
    for (;;) {
        /* The pause between probes, on CLOCK_REALTIME as condition waits are;
         * a clock step only makes one pause shorter or longer. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(h->interval_ms / 1000);
        until.tv_nsec += (long)(h->interval_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&h->mu);
        int rc = 0;
        while (!h->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&h->cv, &h->mu, &until);
        int stopping = h->stopping;
        pthread_mutex_unlock(&h->mu);
        if (stopping)
            break;
        probe_once(p);
    }
    return NULL;
}

struct health *health_start(const struct cfg *c, char *err, size_t errlen)
{
    struct health *h = xcalloc(1, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->timeout_ms = c->health_timeout_ms;
    h->interval_ms = c->health_probe_interval_ms;
    for (int s = 0; s < HEALTH_STORES; s++) {
        struct prober *p = &h->p[s];
        p->h = h;
        p->store = (enum health_store)s;
        p->last.store = p->store;
        db_conn_init(&p->db, c);
        if (redis_conn_init(&p->redis, c, err, errlen) != 0)
            goto fail;
    }
    /* A first result before the listeners open: the first check is true. */
    for (int s = 0; s < HEALTH_STORES; s++)
        probe_once(&h->p[s]);
    for (int s = 0; s < HEALTH_STORES; s++) {
        if (pthread_create(&h->p[s].tid, NULL, prober_main, &h->p[s]) != 0) {
            snprintf(err, errlen, "cannot start a health probe thread");
            goto fail;
        }
        h->p[s].started = 1;
    }
    return h;
fail:
    health_free(h);
    return NULL;
}

void health_read(struct health *h, struct health_report rep[HEALTH_STORES])
{
    for (int s = 0; s < HEALTH_STORES; s++)
        rep[s] = (struct health_report){.store = (enum health_store)s};
    if (!h)
        return;
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&h->mu);
    for (int s = 0; s < HEALTH_STORES && !h->stopping; s++) {
        const struct prober *p = &h->p[s];
        /* A probe ends within timeout_ms of its start, interval_ms after the
         * one before: an older result means the thread waits on a store
         * that does not answer. */
        if (p->last_at_ms > 0 && now - p->last_at_ms <= h->interval_ms + h->timeout_ms)
            rep[s] = p->last;
    }
    pthread_mutex_unlock(&h->mu);
}

void health_stop(struct health *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    for (int s = 0; s < HEALTH_STORES; s++)
        if (h->p[s].started) {
            pthread_join(h->p[s].tid, NULL);
            h->p[s].started = 0;
        }
}

void health_free(struct health *h)
{
    if (!h)
        return;
    health_stop(h);
    for (int s = 0; s < HEALTH_STORES; s++) {
        redis_conn_close(&h->p[s].redis);
        db_conn_close(&h->p[s].db);
    }
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
