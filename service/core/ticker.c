#include "core/ticker.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/alloc.h"

struct ticker {
    ticker_fn *fn;
    void *arg;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    int stopping, kicked;
    atomic_int halt; /* stopping, for a run to look at without mu */
};

static void *ticker_main(void *arg)
{
    struct ticker *t = arg;
    for (;;) {
        int64_t pause = t->fn(t, t->arg);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + (pause % 1000) * 1000000;
        until.tv_sec += pause / 1000 + ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        pthread_mutex_lock(&t->mu);
        while (!t->stopping && !t->kicked)
            if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
                break;
        int stop = t->stopping;
        t->kicked = 0;
        pthread_mutex_unlock(&t->mu);
        if (stop)
            break;
    }
    return NULL;
}

struct ticker *ticker_start(const char *name, ticker_fn *fn, void *arg, char *err, size_t errlen)
{
    struct ticker *t = xcalloc(1, sizeof *t);
    t->fn = fn;
    t->arg = arg;
    atomic_init(&t->halt, 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&t->mu, NULL);
    if (pthread_create(&t->tid, NULL, ticker_main, t) != 0) {
        snprintf(err, errlen, "cannot start the %s thread", name);
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

void ticker_kick(struct ticker *t)
{
    pthread_mutex_lock(&t->mu);
    t->kicked = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

const atomic_int *ticker_halt(const struct ticker *t)
{
    return &t->halt;
}

void ticker_stop(struct ticker *t)
{
    if (!t)
        return;
    atomic_store(&t->halt, 1);
    pthread_mutex_lock(&t->mu);
    t->stopping = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->tid, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
