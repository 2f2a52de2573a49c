/*
 * lt_report: what a run tells people and machines.  A text report on stdout,
 * a JSON summary, and a self-contained HTML page (inline SVG charts, no
 * script, no external resource) that opens from a file.
 */
#ifndef LT_REPORT_H
#define LT_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "lt_answers.h"
#include "lt_check.h"
#include "lt_load.h"
#include "lt_opts.h"
#include "lt_stats.h"

struct lt_report_in {
    const struct lt_opts *o;
    int64_t sku;                         /* the first SKU */
    int64_t sku_last;                    /* the last SKU (--skus) */
    int nskus;                           /* 0 or 1: one SKU */
    int nbuckets;                        /* 0 or 1: sku is not bucketed (--buckets) */
    const int64_t *bucket_skus;          /* its buckets' SKUs, in bucket order */
    const struct lt_stats *st;           /* NULL in check-only mode */
    const struct lt_load_summary *sum;   /* NULL in check-only mode */
    const struct lt_answers *ans;        /* NULL in raw mode */
    const struct lt_check_result *check; /* NULL when no check ran */
    const char *check_error;             /* why the check could not finish, or NULL */
    int exit_code;
};

/* Figures derived from a run, shared by the three outputs. */
struct lt_metrics {
    uint64_t answers, accepted;
    double throughput_rps, accepted_per_s; /* measured window */
    double p50_ms, p90_ms, p99_ms, p999_ms, max_ms, mean_ms;
    int have_writer;
    double writer_accepted_per_s;  /* new 202s over their own first..last span */
    double writer_confirmed_per_s; /* order rows over their own first..last span */
    double writer_ratio;           /* confirmed / accepted */
    double drain_after_s;          /* last 202 to the stream found empty */
};

void lt_report_metrics(const struct lt_report_in *in, struct lt_metrics *m);

/* The human report. */
void lt_report_text(FILE *out, const struct lt_report_in *in);

/* Write the JSON summary / the HTML page.  Return 0, or -1 with a message. */
int lt_report_json(const char *path, const struct lt_report_in *in, char *err, size_t errlen)
    __attribute__((warn_unused_result));
int lt_report_html(const char *path, const struct lt_report_in *in, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
