/*
 * seckill-loadtest: a flash sale against a live seckill service, then the
 * proof from PostgreSQL and Redis that nothing was oversold, lost or
 * duplicated.  See `seckill-loadtest --help` and docs/performance.md.
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
#include "lt_life.h"
#include "lt_load.h"
#include "lt_opts.h"
#include "lt_report.h"
#include "lt_stats.h"

#define PROG "seckill-loadtest"
#define FD_RESERVE 64         /* descriptors beyond the connections */
#define STATS_SLACK_SECONDS 5 /* per-second slots beyond duration + timeout */
/* The lifecycle's draws come from their own stream of --seed: the buyers'
 * draws stay what they were without it. */
#define LIFE_SEED_SALT 0x6c69666563796c65ULL

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

/* Sums the counters of n answers records into agg (its orders stay empty):
 * what the reports say about the run's promises, all SKUs together. */
static void answers_total(struct lt_answers *agg, const struct lt_answers *ans, int n)
{
    lt_answers_init(agg, ans[0].sku);
    agg->base = ans[0].base;
    for (int i = 0; i < n; i++) {
        agg->n += ans[i].n;
        agg->unknown += ans[i].unknown;
        agg->idem_mismatch += ans[i].idem_mismatch;
        agg->unexpected += ans[i].unexpected;
        agg->admin_applied += ans[i].admin_applied;
        agg->admin_ok += ans[i].admin_ok;
        agg->admin_refused += ans[i].admin_refused;
        agg->admin_unknown += ans[i].admin_unknown;
        agg->admin_unknown_abs += ans[i].admin_unknown_abs;
    }
}

static void life_add(struct lt_life_counts *into, const struct lt_life_counts *c)
{
    into->pays += c->pays;
    into->pay_ok += c->pay_ok;
    into->pay_refused += c->pay_refused;
    into->pay_unknown += c->pay_unknown;
    into->pay_other += c->pay_other;
    into->pay_again += c->pay_again;
    into->pay_again_ok += c->pay_again_ok;
    into->cancels += c->cancels;
    into->cancel_ok += c->cancel_ok;
    into->cancel_refused += c->cancel_refused;
    into->cancel_unknown += c->cancel_unknown;
    into->cancel_other += c->cancel_other;
    into->aimed += c->aimed;
    into->walks += c->walks;
    into->unsent += c->unsent;
}

/* The lifecycle phase (lt_life.h) on the orders of every SKU, once their
 * streams have drained (a 202's order can be paid once it is written); its
 * counts go into agg.  Returns 0 (also when a stream did not drain: the
 * check reports that), or -1 (message printed) when it could not run. */
static int lifecycle(const struct lt_opts *o, struct lt_answers *ans, int n, struct lt_answers *agg)
{
    char err[512];
    for (int i = 0; i < n; i++)
        if (lt_check_drain(o, ans[i].sku, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": lifecycle skipped: SKU %" PRId64 ": %s\n", ans[i].sku, err);
            return 0;
        }
    struct lt_rand rng;
    lt_rand_seed(&rng, o->seed ^ LIFE_SEED_SALT);
    for (int i = 0; i < n; i++)
        if (lt_life_plan(o, &rng, &ans[i]) != 0) {
            fprintf(stderr, PROG ": out of memory planning the lifecycle\n");
            return -1;
        }
    if (o->payment_window_s > 0)
        fprintf(stderr,
                PROG ": lifecycle: paying %.0f %%, cancelling %.0f %% of the orders over %.1f s "
                     "(half the payment window of %d s), the rest left to expire\n",
                o->pay_share * 100, o->cancel_share * 100, o->payment_window_s / 2.0,
                o->payment_window_s);
    else
        fprintf(stderr,
                PROG ": lifecycle: cancelling %.0f %% of the orders at once (no payment window: "
                     "the rest stay confirmed)\n",
                o->cancel_share * 100);
    double elapsed;
    if (lt_life_run(o, ans, n, &elapsed, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    for (int i = 0; i < n; i++)
        life_add(&agg->life, &ans[i].life);
    struct lt_life_counts *c = &agg->life;
    c->elapsed_s = elapsed;
    fprintf(stderr,
            PROG ": lifecycle: %" PRIu64 " pays (200 %" PRIu64 ", 409 %" PRIu64 ", unknown %" PRIu64
                 ", other %" PRIu64 ") + %" PRIu64 " again (200 %" PRIu64 "); %" PRIu64
                 " cancels (200 %" PRIu64 ", 409 %" PRIu64 ", unknown %" PRIu64 ", other %" PRIu64
                 "); %" PRIu64 " of those aimed at the deadline; %" PRIu64 " walk away (%" PRIu64
                 " unsent); %.2f s\n",
            c->pays, c->pay_ok, c->pay_refused, c->pay_unknown, c->pay_other, c->pay_again,
            c->pay_again_ok, c->cancels, c->cancel_ok, c->cancel_refused, c->cancel_unknown,
            c->cancel_other, c->aimed, c->walks, c->unsent, elapsed);
    return 0;
}

/* How a check names the part of the run whose record is ans[i]: its SKU, or
 * which bucket of the parent SKU it is. */
static void part_name(char *buf, size_t cap, int64_t parent, int i, int64_t sku)
{
    if (parent)
        snprintf(buf, cap, "bucket %d (SKU %" PRId64 ") of SKU %" PRId64, i, sku, parent);
    else
        snprintf(buf, cap, "SKU %" PRId64, sku);
}

/* Checks every SKU of the run (answers ans[i] about skus[i]) into chk; with
 * parent not 0 they are the buckets of that SKU, whose admin ledger is
 * judged on their sum against the parent's record 'group'.  Returns
 * lt_check_run's result: -1 (err set) as soon as one could not be checked. */
static int check_all(const struct lt_opts *o, const struct lt_answers *ans, int n, int64_t parent,
                     const struct lt_answers *group, struct lt_check_result *chk, char *err,
                     size_t errlen)
{
    if (n == 1)
        return lt_check_run(o, &ans[0], chk, err, errlen);
    struct lt_check_result *one = calloc(1, sizeof *one);
    if (!one) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    char name[72]; /* "bucket 63 (SKU <19 digits>) of SKU <19 digits>" */
    for (int i = 0; i < n; i++) {
        char e[432];
        int crc = lt_check_run(o, &ans[i], one, e, sizeof e);
        part_name(name, sizeof name, parent, i, ans[i].sku);
        lt_check_merge(chk, one, name, i == 0);
        if (crc != 0) {
            snprintf(err, errlen, "%s: %s", name, e);
            chk->ok = 0;
            rc = -1;
            break;
        }
    }
    free(one);
    /* A passed check shows the first part's detail, saying so. */
    for (int i = 0; i < LT_CHK_COUNT && rc == 0; i++) {
        struct lt_check_item *it = &chk->item[i];
        if (it->state != LT_CHECK_PASSED)
            continue;
        char d[sizeof it->detail];
        if (parent)
            snprintf(d, sizeof d,
                     "all %d buckets of SKU %" PRId64 "; bucket 0 (SKU %" PRId64 "): %s", n, parent,
                     ans[0].sku, it->detail);
        else
            snprintf(d, sizeof d, "all %d SKUs; SKU %" PRId64 ": %s", n, ans[0].sku, it->detail);
        memcpy(it->detail, d, sizeof d);
    }
    if (parent && rc == 0) {
        char who[96];
        snprintf(who, sizeof who, "all %d buckets of SKU %" PRId64 " together: ", n, parent);
        lt_check_admin_ledger(chk, group, who);
    }
    return rc;
}

/* A bucketed SKU (--buckets): the buyers order on the parent, the check
 * judges its buckets, each on the parent's answers of its own buyers. */
struct buckets {
    int n;                  /* 0: the run's SKUs are not bucketed */
    int64_t *skus;          /* the bucket SKUs, in bucket order */
    struct lt_answers *ans; /* their records */
};

static int buckets_alloc(struct buckets *b, int n)
{
    memset(b, 0, sizeof *b);
    if (n <= 1)
        return 0;
    b->n = n;
    b->skus = calloc((size_t)n, sizeof *b->skus);
    b->ans = calloc((size_t)n, sizeof *b->ans);
    return b->skus && b->ans ? 0 : -1;
}

static void buckets_free(struct buckets *b)
{
    for (int k = 0; b->ans && k < b->n; k++)
        lt_answers_free(&b->ans[k]);
    free(b->ans);
    free(b->skus);
}

/* Creates SKU i of the run (o->create_sku) as skus[i], with its buckets
 * into b when there are.  Returns 0, or -1 (message printed). */
static int create_one(const struct lt_opts *o, int64_t *skus, int n, int i, struct buckets *b)
{
    char err[512];
    struct lt_opts one = *o;
    one.sku = skus[i];
    if (lt_admin_create_sku(&one, &skus[i], b->skus, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    if (n > 1 && i != 0 && i != n - 1)
        return 0; /* of many SKUs, the first and the last say enough */
    fprintf(stderr,
            PROG ": created SKU %" PRId64 " (stock %" PRId64 ", limit %" PRId64 " per user)%s",
            skus[i], o->stock, o->limit, n > 1 && i == 0 ? ", the first of --skus" : "");
    if (b->n) {
        fprintf(stderr, " in %d buckets, SKUs", b->n);
        for (int k = 0; k < b->n; k++)
            fprintf(stderr, " %" PRId64, b->skus[k]);
    }
    fputc('\n', stderr);
    return 0;
}

/* Takes the baseline of one SKU into its record a (sku set).  Returns 0, or
 * -1 (message printed). */
static int baseline_one(const struct lt_opts *o, struct lt_answers *a)
{
    char err[512];
    if (lt_check_baseline(o, a->sku, &a->base, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, PROG ": before the run: SKU %" PRId64 ": %s\n", a->sku, err);
    return -1;
}

/* Creates the run's SKUs when asked and takes their baselines (of a
 * bucketed SKU, its buckets': the parent holds no stock, orders or ledger
 * rows of its own).  Returns 0, or -1 (message printed). */
static int prepare(const struct lt_opts *o, int64_t *skus, struct lt_answers *ans, int n,
                   struct buckets *b)
{
    for (int i = 0; i < n; i++) {
        if (o->create_sku && create_one(o, skus, n, i, b) != 0)
            return -1;
        char err[512];
        if (!o->create_sku && b->n && lt_admin_sku_buckets(o, skus[i], b->skus, err, sizeof err)) {
            fprintf(stderr, PROG ": %s\n", err);
            return -1;
        }
        ans[i].sku = skus[i];
        if (!b->n && baseline_one(o, &ans[i]) != 0)
            return -1;
    }
    for (int k = 0; k < b->n; k++) {
        lt_answers_init(&b->ans[k], b->skus[k]);
        if (baseline_one(o, &b->ans[k]) != 0)
            return -1;
    }
    return 0;
}

static int run(const struct lt_opts *o)
{
    char err[512];
    int n = o->skus;
    struct lt_answers *ans = calloc((size_t)n, sizeof *ans);
    int64_t *skus = calloc((size_t)n, sizeof *skus);
    struct buckets b;
    struct lt_stats st;
    struct lt_load_summary sum;
    struct lt_check_result *chk = NULL;
    struct lt_answers agg;
    int rc = LT_EXIT_ERROR;
    int raw = o->mode == LT_MODE_RAW;
    size_t max_s = (size_t)o->duration_s + (size_t)(o->timeout_ms / 1000) + STATS_SLACK_SECONDS;
    lt_answers_init(&agg, 0);
    if (buckets_alloc(&b, o->buckets) != 0 || !ans || !skus || lt_stats_init(&st, max_s) != 0) {
        fprintf(stderr, PROG ": out of memory\n");
        buckets_free(&b);
        free(ans);
        free(skus);
        return LT_EXIT_ERROR;
    }
    for (int i = 0; i < n; i++) {
        skus[i] = o->sku ? o->sku + i : 0;
        lt_answers_init(&ans[i], skus[i]);
    }
    if (!raw && prepare(o, skus, ans, n, &b) != 0)
        goto out;
    if (lt_load_run(o, skus, n, b.skus, b.n, &st, raw ? NULL : ans, &sum, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        goto out;
    }
    answers_total(&agg, ans, n);
    struct lt_report_in in = {.o = o,
                              .sku = skus[0],
                              .sku_last = skus[n - 1],
                              .nskus = n,
                              .nbuckets = b.n,
                              .bucket_skus = b.skus,
                              .st = &st,
                              .sum = &sum,
                              .ans = raw ? NULL : &agg};
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
    /* What the check judges: the records of the run's SKUs, or the parent's
     * answers split by the service's routing into its buckets' records. */
    struct lt_answers *judged = b.n ? b.ans : ans;
    int njudged = b.n ? b.n : n;
    if (b.n && lt_answers_split(&ans[0], b.ans, b.n) != 0) {
        fprintf(stderr, PROG ": out of memory splitting the answers by bucket\n");
        goto out;
    }
    for (int i = 0; i < njudged; i++)
        lt_answers_dedupe(&judged[i]);
    if (o->answers_path && lt_answers_save(&ans[0], o->answers_path, err, sizeof err) != 0) {
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
    if (lt_life_enabled(o) && lifecycle(o, judged, njudged, &agg) != 0)
        goto out;
    chk = calloc(1, sizeof *chk);
    if (!chk) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    fprintf(stderr, PROG ": load done; checking invariants (waiting for the order stream%s)\n",
            njudged > 1 ? "s" : "");
    int crc = check_all(o, judged, njudged, b.n ? skus[0] : 0, &ans[0], chk, err, sizeof err);
    rc = exit_of_check(crc, chk);
    in.check = chk;
    in.check_error = crc ? err : NULL;
    in.exit_code = rc;
    write_outputs(o, &in);
out:
    free(chk);
    lt_stats_free(&st);
    for (int i = 0; i < n; i++)
        lt_answers_free(&ans[i]);
    lt_answers_free(&agg);
    buckets_free(&b);
    free(ans);
    free(skus);
    return rc;
}

static int check_only(const struct lt_opts *o)
{
    char err[512];
    int n = o->skus;
    struct lt_answers *ans = calloc((size_t)n, sizeof *ans);
    struct lt_check_result *chk = calloc(1, sizeof *chk);
    int rc = LT_EXIT_ERROR;
    if (!ans || !chk) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    for (int i = 0; i < n; i++)
        lt_answers_init(&ans[i], o->sku + i);
    if (o->answers_path) { /* one SKU only (lt_opts) */
        if (lt_answers_load(&ans[0], o->answers_path, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            goto out;
        }
        if (ans[0].sku != o->sku) {
            fprintf(stderr, PROG ": %s is about SKU %" PRId64 ", not %" PRId64 "\n",
                    o->answers_path, ans[0].sku, o->sku);
            rc = LT_EXIT_USAGE;
            goto out;
        }
        lt_answers_dedupe(&ans[0]);
    }
    int crc = check_all(o, ans, n, 0, NULL, chk, err, sizeof err);
    rc = exit_of_check(crc, chk);
    struct lt_report_in in = {.o = o,
                              .sku = o->sku,
                              .sku_last = o->sku + n - 1,
                              .nskus = n,
                              .ans = o->answers_path ? &ans[0] : NULL,
                              .check = chk,
                              .check_error = crc ? err : NULL,
                              .exit_code = rc};
    write_outputs(o, &in);
out:
    if (ans)
        for (int i = 0; i < n; i++)
            lt_answers_free(&ans[i]);
    free(ans);
    free(chk);
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
