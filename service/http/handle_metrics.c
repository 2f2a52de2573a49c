#include "http/handle_metrics.h"

#include <stdlib.h>

#include "core/clock.h"
#include "core/metrics.h"
#include "order/soldout.h"

#define CONTENT_TYPE "text/plain; version=0.0.4"

static struct metrics_cache *cache;

void handle_metrics_init(struct metrics_cache *mc)
{
    cache = mc;
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

/* The answer, on the request's loop, with the gauges of the last read. */
static void answer(const struct metrics_sku *skus, size_t n, void *arg)
{
    struct http_req *r = arg;
    /* This process's local sold-out flags (order/soldout.h), read from memory. */
    struct flagged *f = calloc(1, sizeof *f);
    if (!f)
        abort();
    if (http_loop_cfg(r->loop)->sold_out_flag_ms > 0)
        (void)soldout_each(soldout_shared(), clock_mono_ms(), note_flagged, f);
    size_t len;
    char *text = metrics_render_skus(skus, n, f->sku, f->n, &len);
    http_reply_raw(r, 200, CONTENT_TYPE, text, len);
    free(text);
    free(f);
    free(r);
}

void handle_metrics_get(struct http_req *r, int64_t id)
{
    (void)id;
    struct http_req *copy = malloc(sizeof *copy);
    if (!copy)
        abort();
    *copy = *r;
    if (metrics_cache_get(cache, http_loop_base(r->loop), answer, copy) != 0)
        answer(NULL, 0, copy); /* no cache, or it stops: the process's own numbers */
}
