#include "http/metrics_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "order/soldout.h"
#include "sku/sku_gauges.h"
#include "store/pgwait.h"
#include "store/workers.h"

/* One refresh's text, shared by every scrape that answers from it, and the
 * same gzip-compressed (Prometheus asks for it: a tenth of the bytes to copy
 * out per scrape). */
struct snapshot {
    atomic_int refs;
    size_t len, gz_len;
    char *text;
    unsigned char *gz; /* NULL when compression failed: the plain text serves */
};

/* One scrape waiting for the next read, on the loop that asked. */
struct waiter {
    struct waiter *next;
    struct event_base *base;
    metrics_cache_fn *fn;
    void *arg;
    struct snapshot *snap; /* a reference, set when the read is done */
};

struct metrics_cache {
    const struct cfg *cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopping;
    struct waiter *waiting; /* under mu: for the next read */
    struct snapshot *last;  /* under mu: the last read (a reference), NULL before the first */
    int64_t last_start_ms;  /* under mu: when it began (clock_mono_ms) */
    pthread_t tid;
    int started;
    struct worker_ctx ctx; /* the thread's own Redis and PostgreSQL connections */
};

static struct snapshot *snapshot_ref(struct snapshot *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

static void snapshot_unref(struct snapshot *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
        free(s->text);
        free(s->gz);
        free(s);
    }
}

/* Whether the last read may still be served (under mu). */
static int fresh(const struct metrics_cache *mc, int64_t now)
{
    return mc->last && now - mc->last_start_ms < CFG_LIVE(mc->cfg, metrics_refresh_ms);
}

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    struct waiter *w = arg;
    (void)fd;
    (void)what;
    struct metrics_text t = {0};
    if (w->snap)
        t = (struct metrics_text){w->snap->text, w->snap->len, w->snap->gz, w->snap->gz_len};
    w->fn(w->snap ? &t : NULL, w->arg);
    snapshot_unref(w->snap);
    free(w);
}

/* Hands snap (NULL: none) to every waiter of the list on its own loop. */
static void hand_out(struct waiter *list, struct snapshot *snap)
{
    while (list) {
        struct waiter *w = list;
        list = w->next;
        w->snap = snap ? snapshot_ref(snap) : NULL;
        struct timeval now = {0, 0};
        if (event_base_once(w->base, -1, EV_TIMEOUT, on_ready, w, &now) != 0) {
            log_error("cannot hand the metrics gauges back to their loop");
            abort();
        }
    }
}

struct flagged {
    int64_t sku[SOLDOUT_SLOTS]; /* one flag per slot at most */
    size_t n;
};

static void note_flagged(int64_t sku, void *arg)
{
    struct flagged *f = arg;
    if (f->n < SOLDOUT_SLOTS)
        f->sku[f->n++] = sku;
}

/* Compresses s->text into s->gz (gzip framing, for Content-Encoding: gzip);
 * leaves s->gz NULL when zlib fails. */
static void compress_text(struct snapshot *s)
{
    z_stream z = {0};
    /* 15 + 16: a 32 KiB window and the gzip header and trailer */
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return;
    uLong cap = deflateBound(&z, (uLong)s->len);
    unsigned char *out = xmalloc(cap);
    z.next_in = (Bytef *)s->text;
    z.avail_in = (uInt)s->len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) == Z_STREAM_END) {
        s->gz = out;
        s->gz_len = z.total_out;
    } else {
        free(out);
    }
    deflateEnd(&z);
}

/* One refresh: the per-SKU gauges read from the stores (bounded by
 * request_deadline_ms like any request's waits), then the whole text with
 * this process's counters and local sold-out flags (order/soldout.h). */
static struct snapshot *refresh(struct metrics_cache *mc)
{
    struct snapshot *s = xcalloc(1, sizeof *s);
    struct flagged *f = xcalloc(1, sizeof *f);
    atomic_init(&s->refs, 1);
    metrics_add(M_METRICS_REFRESHES, 1);
    struct metrics_sku *skus = NULL;
    size_t n = 0;
    if (CFG_LIVE(mc->cfg, metrics_max_skus) > 0) {
        int64_t deadline = clock_mono_ms() + CFG_LIVE(mc->cfg, request_deadline_ms);
        redis_conn_set_deadline(&mc->ctx.redis, deadline);
        pgwait_set_thread_deadline(deadline);
        if (sku_gauges_read(&mc->ctx, &skus, &n) != 0)
            metrics_add(M_METRICS_SCRAPE_ERRORS, 1);
        pgwait_set_thread_deadline(0);
        redis_conn_set_deadline(&mc->ctx.redis, 0);
    }
    if (CFG_LIVE(mc->cfg, sold_out_flag_ms) > 0)
        (void)soldout_each(soldout_shared(), clock_mono_ms(), note_flagged, f);
    s->text = metrics_render_skus(skus, n, f->sku, f->n, &s->len);
    compress_text(s);
    free(skus);
    free(f);
    return s;
}

static void *cache_main(void *arg)
{
    struct metrics_cache *mc = arg;
    pthread_mutex_lock(&mc->mu);
    for (;;) {
        while (!mc->waiting && !mc->stopping)
            pthread_cond_wait(&mc->cv, &mc->mu);
        if (mc->stopping)
            break;
        struct waiter *list = mc->waiting;
        mc->waiting = NULL;
        int64_t now = clock_mono_ms();
        /* Asked while the read before ended: that one is fresh enough. */
        if (!fresh(mc, now)) {
            mc->last_start_ms = now;
            pthread_mutex_unlock(&mc->mu);
            struct snapshot *s = refresh(mc);
            pthread_mutex_lock(&mc->mu);
            snapshot_unref(mc->last);
            mc->last = s;
        }
        hand_out(list, mc->last);
    }
    /* Stopping: what still waits is answered without gauges. */
    struct waiter *list = mc->waiting;
    mc->waiting = NULL;
    pthread_mutex_unlock(&mc->mu);
    hand_out(list, NULL);
    return NULL;
}

struct metrics_cache *metrics_cache_start(const struct cfg *c, char *err, size_t errlen)
{
    struct metrics_cache *mc = xcalloc(1, sizeof *mc);
    mc->cfg = c;
    pthread_mutex_init(&mc->mu, NULL);
    pthread_cond_init(&mc->cv, NULL);
    if (worker_ctx_init(&mc->ctx, c, err, errlen) != 0)
        goto fail;
    if (pthread_create(&mc->tid, NULL, cache_main, mc) != 0) {
        snprintf(err, errlen, "cannot start the metrics reading thread");
        goto fail;
    }
    mc->started = 1;
    return mc;
fail:
    metrics_cache_free(mc);
    return NULL;
}

int metrics_cache_get(struct metrics_cache *mc, struct event_base *base, metrics_cache_fn *fn,
                      void *arg)
{
    if (!mc)
        return -1;
    pthread_mutex_lock(&mc->mu);
    if (mc->stopping) {
        pthread_mutex_unlock(&mc->mu);
        return -1;
    }
    if (fresh(mc, clock_mono_ms())) {
        struct snapshot *s = snapshot_ref(mc->last);
        pthread_mutex_unlock(&mc->mu);
        struct metrics_text t = {s->text, s->len, s->gz, s->gz_len};
        fn(&t, arg);
        snapshot_unref(s);
        return 0;
    }
    struct waiter *w = xcalloc(1, sizeof *w);
    *w = (struct waiter){.next = mc->waiting, .base = base, .fn = fn, .arg = arg};
    mc->waiting = w;
    pthread_cond_signal(&mc->cv);
    pthread_mutex_unlock(&mc->mu);
    return 0;
}

void metrics_cache_stop(struct metrics_cache *mc)
{
    if (!mc)
        return;
    pthread_mutex_lock(&mc->mu);
    mc->stopping = 1;
    pthread_cond_signal(&mc->cv);
    pthread_mutex_unlock(&mc->mu);
    if (mc->started) {
        pthread_join(mc->tid, NULL);
        mc->started = 0;
    }
}

void metrics_cache_free(struct metrics_cache *mc)
{
    if (!mc)
        return;
    metrics_cache_stop(mc);
    snapshot_unref(mc->last);
    worker_ctx_close(&mc->ctx);
    pthread_cond_destroy(&mc->cv);
    pthread_mutex_destroy(&mc->mu);
    free(mc);
}
