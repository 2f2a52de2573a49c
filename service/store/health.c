#include "store/health.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/ticker.h"
#include "store/db.h"
#include "store/pgwait.h"
#include "store/redis_conn.h"

/* The thread and connection of one store. */
struct prober {
    struct health *h;
    enum health_store store;
    struct ticker *ticker;     /* its thread */
    int ticked;                /* the ticker's first run is due at once: skipped, as
                                * health_start probed just before */
    struct redis_conn redis;   /* HEALTH_REDIS */
    struct db_conn db;         /* HEALTH_POSTGRES */
    struct health_report last; /* under h->mu */
    int64_t last_at_ms;        /* under h->mu: when 'last' ended (clock_mono_ms), 0: never */
};

struct health {
    pthread_mutex_t mu;
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
    int up = rep.total > 0 && rep.up == rep.total;
    metrics_set(p->store == HEALTH_REDIS ? M_STORE_UP_REDIS : M_STORE_UP_POSTGRES, up);
    if (!up)
        metrics_add(p->store == HEALTH_REDIS ? M_STORE_PROBE_FAILURES_REDIS
                                             : M_STORE_PROBE_FAILURES_POSTGRES,
                    1);
    pthread_mutex_lock(&p->h->mu);
    p->last = rep;
    p->last_at_ms = clock_mono_ms();
    pthread_mutex_unlock(&p->h->mu);
}

/* The ticker's job: a probe every interval_ms. */
static int64_t prober_tick(struct ticker *t, void *arg)
{
    struct prober *p = arg;
    (void)t;
    if (p->ticked++)
        probe_once(p);
    return p->h->interval_ms;
}

struct health *health_start(const struct cfg *c, char *err, size_t errlen)
{
    struct health *h = xcalloc(1, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
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
    for (int s = 0; s < HEALTH_STORES; s++)
        if (!(h->p[s].ticker = ticker_start(s == HEALTH_REDIS ? "health-redis" : "health-postgres",
                                            prober_tick, &h->p[s], err, errlen)))
            goto fail;
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
    pthread_mutex_unlock(&h->mu);
    for (int s = 0; s < HEALTH_STORES; s++) {
        ticker_stop(h->p[s].ticker);
        h->p[s].ticker = NULL;
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
    pthread_mutex_destroy(&h->mu);
    free(h);
}
