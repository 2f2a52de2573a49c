#include "http/handle_metrics.h"

#include <stdlib.h>

#include "core/metrics.h"
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

static void job_done(struct job *j)
{
    struct metrics_job *mj = (struct metrics_job *)j;
    size_t len;
    char *text = metrics_render_skus(mj->skus, mj->n, &len);
    http_reply_raw(&mj->req, 200, CONTENT_TYPE, text, len);
    free(text);
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
    /* Urgent, like health: a flood of buyer lookups must not starve it. */
    if (http_try_submit(r, &mj->job, 1) == 0)
        return;
    /* No worker: the process's own numbers still answer. */
    if (http_loop_cfg(r->loop)->metrics_max_skus > 0)
        metrics_add(M_METRICS_SCRAPE_ERRORS, 1);
    job_done(&mj->job);
}
