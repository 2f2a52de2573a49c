#include "store/workers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "store/pgwait.h"

struct workers {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Two FIFOs: a flood of buyer lookups must not starve operators and the
     * load balancer's health checks. */
    struct job *head[2], *tail[2];
    size_t queued[2], max_queued;
    int stopping;
    size_t n;
    pthread_t *threads;
    struct worker_ctx *ctx;
    struct health *health;
};

int worker_ctx_init(struct worker_ctx *w, const struct cfg *c, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    w->cfg = c;
    db_conn_init(&w->db, c);
    return redis_conn_init(&w->redis, c, err, errlen);
}

void worker_ctx_close(struct worker_ctx *w)
{
    redis_conn_close(&w->redis);
    db_conn_close(&w->db);
}

static void run_done(evutil_socket_t fd, short what, void *arg)
{
    struct job *j = arg;
    (void)fd;
    (void)what;
    j->done(j);
}

static void *worker_main(void *arg)
{
    struct workers *ws = ((void **)arg)[0];
    struct worker_ctx *w = ((void **)arg)[1];
    free(arg);
    for (;;) {
        pthread_mutex_lock(&ws->mu);
        while (!ws->head[0] && !ws->head[1] && !ws->stopping)
            pthread_cond_wait(&ws->cv, &ws->mu);
        int q = ws->head[1] ? 1 : 0;
        struct job *j = ws->head[q];
        if (!j) {
            pthread_mutex_unlock(&ws->mu);
            break;
        }
        ws->head[q] = j->next;
        if (!ws->head[q])
            ws->tail[q] = NULL;
        ws->queued[q]--;
        pthread_mutex_unlock(&ws->mu);

        /* A request whose deadline passed while its job waited has been
         * given up by now: no store work is started for it. */
        j->late = j->deadline_ms > 0 && clock_mono_ms() >= j->deadline_ms;
        if (!j->late) {
            redis_conn_set_deadline(&w->redis, j->deadline_ms);
            pgwait_set_thread_deadline(j->deadline_ms);
            j->run(j, w);
            pgwait_set_thread_deadline(0);
            redis_conn_set_deadline(&w->redis, 0);
        }
        /* Hand the job back to its loop; event_base_once is thread-safe once
         * evthread_use_pthreads() ran (main does it first thing). */
        struct timeval now = {0, 0};
        if (event_base_once(j->base, -1, EV_TIMEOUT, run_done, j, &now) != 0) {
            log_error("cannot hand a finished job back to its loop");
            abort();
        }
    }
    return NULL;
}

struct workers *workers_start(const struct cfg *c, char *err, size_t errlen)
{
    struct workers *ws = xcalloc(1, sizeof *ws);
    pthread_mutex_init(&ws->mu, NULL);
    pthread_cond_init(&ws->cv, NULL);
    ws->health = health_start(c, err, errlen);
    if (!ws->health) {
        pthread_mutex_destroy(&ws->mu);
        pthread_cond_destroy(&ws->cv);
        free(ws);
        return NULL;
    }
    ws->max_queued = (size_t)c->worker_queue_max;
    ws->n = (size_t)c->worker_threads;
    ws->threads = xcalloc(ws->n, sizeof *ws->threads);
    ws->ctx = xcalloc(ws->n, sizeof *ws->ctx);
    size_t started = 0;
    for (; started < ws->n; started++) {
        size_t i = started;
        if (worker_ctx_init(&ws->ctx[i], c, err, errlen) != 0)
            break;
        void **arg = xmalloc(2 * sizeof *arg);
        arg[0] = ws;
        arg[1] = &ws->ctx[i];
        if (pthread_create(&ws->threads[i], NULL, worker_main, arg) != 0) {
            snprintf(err, errlen, "cannot start worker thread");
            free(arg);
            worker_ctx_close(&ws->ctx[i]);
            break;
        }
    }
    if (started < ws->n) {
        /* Join the threads already running before the caller tears down. */
        ws->n = started;
        workers_free(ws);
        return NULL;
    }
    return ws;
}

int workers_submit(struct workers *ws, struct job *j)
{
    int rc = -1;
    j->next = NULL;
    pthread_mutex_lock(&ws->mu);
    int q = j->urgent ? 1 : 0;
    if (!ws->stopping && ws->queued[q] < ws->max_queued) {
        if (ws->tail[q])
            ws->tail[q]->next = j;
        else
            ws->head[q] = j;
        ws->tail[q] = j;
        ws->queued[q]++;
        pthread_cond_signal(&ws->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&ws->mu);
    return rc;
}

struct health *workers_health(struct workers *ws)
{
    return ws->health;
}

void workers_drain(struct workers *ws)
{
    if (!ws)
        return;
    health_stop(ws->health);
    pthread_mutex_lock(&ws->mu);
    int joined = ws->stopping;
    ws->stopping = 1;
    pthread_cond_broadcast(&ws->cv);
    pthread_mutex_unlock(&ws->mu);
    if (joined)
        return;
    for (size_t i = 0; i < ws->n; i++) {
        pthread_join(ws->threads[i], NULL);
        worker_ctx_close(&ws->ctx[i]);
    }
}

void workers_free(struct workers *ws)
{
    if (!ws)
        return;
    workers_drain(ws);
    health_free(ws->health);
    pthread_mutex_destroy(&ws->mu);
    pthread_cond_destroy(&ws->cv);
    free(ws->threads);
    free(ws->ctx);
    free(ws);
}
