#include "order/order_sweeper.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/log.h"
#include "order/order_life.h"
#include "store/workers.h"

struct order_sweeper {
    const struct cfg *cfg;
    struct worker_ctx ctx;
    pthread_t tid;
    int running; /* the thread was started */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    int stopping;
};

static void *sweeper_main(void *arg)
{
    struct order_sweeper *s = arg;
    int64_t pause = s->cfg->expiry_sweep_interval_ms, cursor = 0;
    for (;;) {
        struct life_sweep done;
        if (order_life_sweep(&s->ctx, s->cfg->expiry_batch, s->cfg->expiry_sweep_skus, &cursor,
                             &done) == 0 &&
            done.expired > 0)
            log_info("expiry sweep: %" PRId64 " unpaid orders expired on %" PRId64 " SKUs",
                     done.expired, done.skus);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + (pause % 1000) * 1000000;
        until.tv_sec += pause / 1000 + ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        pthread_mutex_lock(&s->mu);
        while (!s->stopping)
            if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT)
                break;
        int stop = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
    }
    return NULL;
}

struct order_sweeper *order_sweeper_start(const struct cfg *c, char *err, size_t errlen)
{
    struct order_sweeper *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->cfg = c;
    if (c->expiry_sweep_interval_ms == 0)
        return s;
    if (worker_ctx_init(&s->ctx, c, err, errlen) != 0) {
        free(s);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    if (pthread_create(&s->tid, NULL, sweeper_main, s) != 0) {
        snprintf(err, errlen, "cannot start the expiry sweeper thread");
        worker_ctx_close(&s->ctx);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    s->running = 1;
    return s;
}

void order_sweeper_stop(struct order_sweeper *s)
{
    if (!s)
        return;
    if (s->running) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->tid, NULL);
        worker_ctx_close(&s->ctx);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
    }
    free(s);
}
