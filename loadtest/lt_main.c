/*
 * seckill-loadtest: a flash sale against a live seckill service, then the
 * proof from PostgreSQL and Redis that nothing was oversold, lost or
 * duplicated.  See `seckill-loadtest --help` and README.md "Performance".
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lt_admin.h"
#include "lt_answers.h"
#include "lt_check.h"
#include "lt_load.h"
#include "lt_opts.h"
#include "lt_report.h"
#include "lt_stats.h"

#define PROG "seckill-loadtest"
#define FD_RESERVE 64         /* descriptors beyond the connections */
#define STATS_SLACK_SECONDS 5 /* per-second slots beyond duration + timeout */

/* Raises the open file limit to fit the connections.  Returns 0 or -1. */
static int fit_fd_limit(int connections)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)connections + FD_RESERVE;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if (rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        return -1;
    rl.rlim_cur = need;
    return setrlimit(RLIMIT_NOFILE, &rl);
}

static char *json_path_for(const struct lt_opts *o)
{
    if (o->json_path)
        return strdup(o->json_path);
    if (!o->report_html)
        return NULL;
    size_t n = strlen(o->report_html);
    char *p = malloc(n + 6);
    if (!p)
        return NULL;
    memcpy(p, o->report_html, n + 1);
    if (n > 5 && strcmp(p + n - 5, ".html") == 0)
        p[n - 5] = '\0';
    strcat(p, ".json");
    return p;
}

static void write_outputs(const struct lt_opts *o, const struct lt_report_in *in)
{
    char err[512];
    lt_report_text(stdout, in);
    fflush(stdout);
    char *jp = json_path_for(o);
    if (jp && lt_report_json(jp, in, err, sizeof err) != 0)
        fprintf(stderr, PROG ": %s\n", err);
    else if (jp)
        printf("json      %s\n", jp);
    free(jp);
    if (o->report_html && lt_report_html(o->report_html, in, err, sizeof err) != 0)
        fprintf(stderr, PROG ": %s\n", err);
    else if (o->report_html)
        printf("html      %s\n", o->report_html);
}

static int exit_of_check(int check_rc, const struct lt_check_result *r)
{
    if (check_rc != 0)
        return LT_EXIT_ERROR;
    return r->ok ? LT_EXIT_OK : LT_EXIT_VIOLATION;
}

static int run(const struct lt_opts *o)
{
    char err[512];
    int64_t sku = o->sku;
    struct lt_answers ans;
    struct lt_stats st;
    struct lt_load_summary sum;
    struct lt_check_result *chk = NULL;
    int rc = LT_EXIT_ERROR;
    int raw = o->mode == LT_MODE_RAW;
    lt_answers_init(&ans, sku);
    size_t max_s = (size_t)o->duration_s + (size_t)(o->timeout_ms / 1000) + STATS_SLACK_SECONDS;
    if (lt_stats_init(&st, max_s) != 0) {
        fprintf(stderr, PROG ": out of memory\n");
        return LT_EXIT_ERROR;
    }
    if (!raw) {
        if (o->create_sku) {
            if (lt_admin_create_sku(o, &sku, err, sizeof err) != 0) {
                fprintf(stderr, PROG ": %s\n", err);
                goto out;
            }
            fprintf(stderr,
                    PROG ": created SKU %" PRId64 " (stock %" PRId64 ", limit %" PRId64
                         " per user)\n",
                    sku, o->stock, o->limit);
        }
        ans.sku = sku;
        if (lt_check_baseline(o, sku, &ans.base, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": before the run: %s\n", err);
            goto out;
        }
    }
    if (lt_load_run(o, sku, &st, raw ? NULL : &ans, &sum, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        goto out;
    }
    struct lt_report_in in = {.o = o, .sku = sku, .st = &st, .sum = &sum, .ans = raw ? NULL : &ans};
    if (raw) {
        uint64_t unknown = 0;
        for (int a = 0; a < LT_ANS_COUNT; a++)
            if (lt_answer_is_unknown(a))
                unknown += st.all[a];
        rc = unknown == lt_stats_total(&st, 1) ? LT_EXIT_ERROR : LT_EXIT_OK;
        in.exit_code = rc;
        write_outputs(o, &in);
        goto out;
    }
    lt_answers_dedupe(&ans);
    if (o->answers_path && lt_answers_save(&ans, o->answers_path, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        if (o->mode == LT_MODE_LOAD_ONLY)
            goto out; /* the answers were the point of the run */
    }
    if (o->mode == LT_MODE_LOAD_ONLY) {
        rc = LT_EXIT_OK;
        in.exit_code = rc;
        write_outputs(o, &in);
        goto out;
    }
    chk = calloc(1, sizeof *chk);
    if (!chk) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    fprintf(stderr, PROG ": load done; checking invariants (waiting for the order stream)\n");
    int crc = lt_check_run(o, &ans, chk, err, sizeof err);
    rc = exit_of_check(crc, chk);
    in.check = chk;
    in.check_error = crc ? err : NULL;
    in.exit_code = rc;
    write_outputs(o, &in);
out:
    free(chk);
    lt_stats_free(&st);
    lt_answers_free(&ans);
    return rc;
}

static int check_only(const struct lt_opts *o)
{
    char err[512];
    struct lt_answers ans;
    lt_answers_init(&ans, o->sku);
    if (o->answers_path) {
        if (lt_answers_load(&ans, o->answers_path, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            lt_answers_free(&ans);
            return LT_EXIT_ERROR;
        }
        if (ans.sku != o->sku) {
            fprintf(stderr, PROG ": %s is about SKU %" PRId64 ", not %" PRId64 "\n",
                    o->answers_path, ans.sku, o->sku);
            lt_answers_free(&ans);
            return LT_EXIT_USAGE;
        }
        lt_answers_dedupe(&ans);
    }
    struct lt_check_result *chk = calloc(1, sizeof *chk);
    if (!chk) {
        lt_answers_free(&ans);
        return LT_EXIT_ERROR;
    }
    int crc = lt_check_run(o, &ans, chk, err, sizeof err);
    int rc = exit_of_check(crc, chk);
    struct lt_report_in in = {.o = o,
                              .sku = o->sku,
                              .ans = o->answers_path ? &ans : NULL,
                              .check = chk,
                              .check_error = crc ? err : NULL,
                              .exit_code = rc};
    write_outputs(o, &in);
    free(chk);
    lt_answers_free(&ans);
    return rc;
}

int main(int argc, char **argv)
{
    struct lt_opts o;
    char err[512];
    int p = lt_opts_parse(&o, argc, argv, err, sizeof err);
    if (p == 1)
        return LT_EXIT_OK;
    if (p != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return LT_EXIT_USAGE;
    }
    signal(SIGPIPE, SIG_IGN);
    if (fit_fd_limit(o.concurrency) != 0) {
        fprintf(stderr, PROG ": cannot raise the open file limit to %d (ulimit -n)\n",
                o.concurrency + FD_RESERVE);
        return LT_EXIT_USAGE;
    }
    return o.mode == LT_MODE_CHECK_ONLY ? check_only(&o) : run(&o);
}
