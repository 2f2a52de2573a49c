#include "store/health.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "store/db.h"
#include "store/pgwait.h"
#include "store/redis_conn.h"

/* One ask of one store, from health_ask() to its report on the asking loop. */
struct ask {
    struct ask *next;
    struct event_base *base;
    health_fn *fn;
    void *arg;
    struct health_report rep;
};

/* The thread and connection of one store. */
struct prober {
    struct health *h;
    enum health_store store;
    pthread_cond_t cv;
    struct ask *pending; /* under h->mu: the next probe's asks */
    pthread_t tid;
    int started;
    struct redis_conn redis; /* HEALTH_REDIS */
    struct db_conn db;       /* HEALTH_POSTGRES */
};

struct health {
    pthread_mutex_t mu;
    int stopping;
    int64_t timeout_ms;
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

static void on_report(evutil_socket_t fd, short what, void *arg)
{
    struct ask *a = arg;
    (void)fd;
    (void)what;
    a->fn(&a->rep, a->arg);
    free(a);
}

/* Hands rep to every ask of the list on its own loop. */
static void report(struct ask *list, const struct health_report *rep)
{
    while (list) {
        struct ask *a = list;
        list = a->next;
        a->rep = *rep;
        struct timeval now = {0, 0};
        if (event_base_once(a->base, -1, EV_TIMEOUT, on_report, a, &now) != 0) {
            log_error("cannot hand a health report back to its loop");
            abort();
        }
    }
}

static void *prober_main(void *arg)
{
    struct prober *p = arg;
    struct health *h = p->h;
    for (;;) {
        pthread_mutex_lock(&h->mu);
        while (!p->pending && !h->stopping)
            pthread_cond_wait(&p->cv, &h->mu);
        struct ask *asks = p->pending;
        p->pending = NULL;
        int stopping = h->stopping;
        pthread_mutex_unlock(&h->mu);
        if (!asks)
            break; /* stopping, and every ask has had its report */
        struct health_report rep = {.store = p->store};
        if (!stopping) {
            if (p->store == HEALTH_REDIS)
                probe_redis(p, &rep);
            else
                probe_postgres(p, &rep);
            rep.probed = 1;
        }
        report(asks, &rep);
    }
    return NULL;
}

struct health *health_start(const struct cfg *c, char *err, size_t errlen)
{
    struct health *h = calloc(1, sizeof *h);
    if (!h)
        abort();
    pthread_mutex_init(&h->mu, NULL);
    h->timeout_ms = c->health_timeout_ms;
    for (int s = 0; s < HEALTH_STORES; s++) {
        struct prober *p = &h->p[s];
        p->h = h;
        p->store = (enum health_store)s;
        pthread_cond_init(&p->cv, NULL);
        db_conn_init(&p->db, c);
        if (redis_conn_init(&p->redis, c, err, errlen) != 0)
            goto fail;
    }
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

int health_ask(struct health *h, struct event_base *base, health_fn *fn, void *arg)
{
    if (!h)
        return -1;
    struct ask *a[HEALTH_STORES];
    for (int s = 0; s < HEALTH_STORES; s++) {
        a[s] = calloc(1, sizeof *a[s]);
        if (!a[s])
            abort();
        *a[s] = (struct ask){.base = base, .fn = fn, .arg = arg};
    }
    pthread_mutex_lock(&h->mu);
    int stopping = h->stopping;
    for (int s = 0; s < HEALTH_STORES && !stopping; s++) {
        a[s]->next = h->p[s].pending;
        h->p[s].pending = a[s];
        pthread_cond_signal(&h->p[s].cv);
    }
    pthread_mutex_unlock(&h->mu);
    if (stopping)
        for (int s = 0; s < HEALTH_STORES; s++)
            free(a[s]);
    return stopping ? -1 : 0;
}

void health_stop(struct health *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    for (int s = 0; s < HEALTH_STORES; s++)
        pthread_cond_signal(&h->p[s].cv);
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
        pthread_cond_destroy(&h->p[s].cv);
    }
    pthread_mutex_destroy(&h->mu);
    free(h);
}
