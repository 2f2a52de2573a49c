#include "http/handle_metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The exposition so far, grown as the sold-out flags are appended. */
struct text {
    char *p;
    size_t len;
};

static void append(struct text *t, const char *s, size_t n)
{
    char *p = realloc(t->p, t->len + n + 1);
    if (!p)
        abort();
    memcpy(p + t->len, s, n);
    t->len += n;
    p[t->len] = '\0';
    t->p = p;
}

static void flag_line(int64_t sku, void *arg)
{
    char line[96];
    int n = snprintf(line, sizeof line, "seckill_sku_sold_out_flag{sku=\"%" PRId64 "\"} 1\n", sku);
    append(arg, line, (size_t)n);
}

/* This process's local sold-out flags (order/soldout.h): one sample per SKU
 * answered without Redis right now; read on the loop, from memory. */
static void render_sold_out_flags(struct text *t, int64_t window_ms)
{
    static const char head[] =
        "# HELP seckill_sku_sold_out_flag 1 while this instance answers the SKU's orders sold "
        "out without asking Redis (sold_out_flag_ms)\n"
        "# TYPE seckill_sku_sold_out_flag gauge\n";
    append(t, head, sizeof head - 1);
    if (window_ms > 0)
        (void)soldout_each(soldout_shared(), clock_mono_ms(), flag_line, t);
}

static void job_done(struct job *j)
{
    struct metrics_job *mj = (struct metrics_job *)j;
    struct text t = {0};
    t.p = metrics_render_skus(mj->skus, mj->n, &t.len);
    render_sold_out_flags(&t, http_loop_cfg(mj->req.loop)->sold_out_flag_ms);
    char *text = t.p;
    size_t len = t.len;
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
