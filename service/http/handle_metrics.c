#include "http/handle_metrics.h"

#include <stdlib.h>

#include "core/clock.h"
#include "core/metrics.h"
#include "order/soldout.h"
#include "sku/sku_gauges.h"

#define CONTENT_TYPE "text/plain; version=0.0.4"

struct metrics_job {
    struct job job; /* first: the pool hands back this pointer */
    struct http_req req;
    struct metrics_sku *skus; /* NULL: left out */
    size_t n;
};

static void job_run(struct job *j, struct worker_ctx *w)
{
    struct metrics_job *mj = (struct metrics_job *)j;
    if (w->cfg->metrics_max_skus > 0 && sku_gauges_read(w, &mj->skus, &mj->n) != 0)
        metrics_add(M_METRICS_SCRAPE_ERRORS, 1);
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

static void job_done(struct job *j)
{
    struct metrics_job *mj = (struct metrics_job *)j;
    /* Past the request's deadline in the queue: the SKU block is left out,
     * as when its reads fail. */
    if (j->late && http_loop_cfg(mj->req.loop)->metrics_max_skus > 0)
        metrics_add(M_METRICS_SCRAPE_ERRORS, 1);
    /* This process's local sold-out flags (order/soldout.h), read on the
     * loop from memory. */
    struct flagged *f = calloc(1, sizeof *f);
    if (!f)
        abort();
    if (http_loop_cfg(mj->req.loop)->sold_out_flag_ms > 0)
        (void)soldout_each(soldout_shared(), clock_mono_ms(), note_flagged, f);
    size_t len;
    char *text = metrics_render_skus(mj->skus, mj->n, f->sku, f->n, &len);
    http_reply_raw(&mj->req, 200, CONTENT_TYPE, text, len);
    free(text);
    free(f);
    free(mj->skus);
    free(mj);
}

void handle_metrics_get(struct http_req *r, int64_t id)
{
    (void)id;
    struct metrics_job *mj = calloc(1, sizeof *mj);
    if (!mj)
        abort();
    mj->req = *r;
    mj->job.run = job_run;
    mj->job.done = job_done;
    /* Urgent, like admin jobs: a flood of buyer lookups must not starve it. */
    if (http_try_submit(r, &mj->job, 1) == 0)
        return;
    /* No worker: the process's own numbers still answer. */
    if (http_loop_cfg(r->loop)->metrics_max_skus > 0)
        metrics_add(M_METRICS_SCRAPE_ERRORS, 1);
    job_done(&mj->job);
}
