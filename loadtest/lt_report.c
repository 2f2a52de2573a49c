#include "lt_report.h"

#include "lt_life.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define US_PER_MS 1000.0
#define CHART_W 860
#define CHART_H 260
#define CHART_ML 64 /* margins: left, right, top, bottom */
#define CHART_MR 16
#define CHART_MT 34
#define CHART_MB 40
#define CHART_TICKS 5
#define BAR_H 22
#define BAR_GAP 6
#define BAR_LABEL_W 210       /* room for "422 idempotency_key_reused" */
#define BAR_VALUE_W 120       /* room for the count after the longest bar */
#define LEGEND_W 150.0        /* per legend entry */
#define WRITER_MIN_SPAN_S 5.0 /* shortest run whose writer rate is reported */
#define LAST_SECOND_MIN 0.2   /* a shorter final second is left out of the charts */

static double us_ms(uint64_t us)
{
    return (double)us / US_PER_MS;
}

void lt_report_metrics(const struct lt_report_in *in, struct lt_metrics *m)
{
    memset(m, 0, sizeof *m);
    if (in->st && in->sum) {
        const struct lt_stats *st = in->st;
        m->answers = lt_stats_total(st, 0);
        m->accepted = lt_stats_new_orders(st->measured);
        if (in->sum->measured_s > 0) {
            m->throughput_rps = (double)m->answers / in->sum->measured_s;
            m->accepted_per_s = (double)m->accepted / in->sum->measured_s;
        }
        m->p50_ms = us_ms(lt_hist_percentile(&st->lat, 50));
        m->p90_ms = us_ms(lt_hist_percentile(&st->lat, 90));
        m->p99_ms = us_ms(lt_hist_percentile(&st->lat, 99));
        m->p999_ms = us_ms(lt_hist_percentile(&st->lat, 99.9));
        m->max_ms = us_ms(st->lat.count ? st->lat.max : 0);
        m->mean_ms = lt_hist_mean(&st->lat) / US_PER_MS;
    }
    const struct lt_check_result *c = in->check;
    if (c && in->sum && in->st && in->sum->last_accept_wall_us > in->sum->first_accept_wall_us &&
        c->f.last_created_us > c->f.first_created_us) {
        const struct lt_check_facts *f = &c->f;
        double acc_span =
            (double)(in->sum->last_accept_wall_us - in->sum->first_accept_wall_us) / 1e6;
        double row_span = (double)(f->last_created_us - f->first_created_us) / 1e6;
        m->have_writer = acc_span >= WRITER_MIN_SPAN_S; /* a burst says nothing about a rate */
        m->writer_accepted_per_s = (double)lt_stats_new_orders(in->st->all) / acc_span;
        m->writer_confirmed_per_s = (double)f->run_orders / row_span;
        m->writer_ratio = m->writer_confirmed_per_s / m->writer_accepted_per_s;
    }
    if (c)
        m->drain_after_s = c->f.drain_s;
}

/* "SKU 7", "SKUs 7..206 (200)" for a run on several, or "SKU 7 in 3
 * buckets" for a bucketed one. */
static const char *sku_words(const struct lt_report_in *in, char *buf, size_t cap)
{
    if (in->nskus > 1)
        snprintf(buf, cap, "SKUs %" PRId64 "..%" PRId64 " (%d)", in->sku, in->sku_last, in->nskus);
    else if (in->nbuckets > 1)
        snprintf(buf, cap, "SKU %" PRId64 " in %d buckets", in->sku, in->nbuckets);
    else
        snprintf(buf, cap, "SKU %" PRId64, in->sku);
    return buf;
}

/* Whether the report has lifecycle figures to show: a run with a phase, or
 * a check that found orders paid, cancelled or expired. */
static int life_shown(const struct lt_report_in *in)
{
    const struct lt_check_facts *f = in->check ? &in->check->f : NULL;
    return (in->ans && lt_life_enabled(in->o)) ||
           (f && f->lc_paid + f->lc_expired + f->lc_cancelled_early + f->lc_cancelled_late > 0);
}

static const char *state_word(enum lt_check_state s)
{
    return s == LT_CHECK_PASSED ? "PASS" : s == LT_CHECK_FAILED ? "FAIL" : "skip";
}

/* ---- text ----------------------------------------------------------------- */

void lt_report_text(FILE *out, const struct lt_report_in *in)
{
    const struct lt_opts *o = in->o;
    struct lt_metrics m;
    lt_report_metrics(in, &m);
    char skuw[64];
    fprintf(out, "\n== seckill-loadtest: %s, %s%s%s ==\n", o->label,
            sku_words(in, skuw, sizeof skuw), o->mode == LT_MODE_CHECK_ONLY ? "" : " at ",
            o->mode == LT_MODE_CHECK_ONLY ? "" : o->url);
    if (in->st && in->sum) {
        const struct lt_load_summary *s = in->sum;
        fprintf(
            out,
            "load      %" PRId64 " users, %" PRIu64 " requests + %" PRIu64
            " retries, %d connections (from %d address%s), qty %s, retry share %.2f, seed %" PRIu64
            "\n",
            o->users, s->issued, s->retries, o->concurrency, o->source_addrs,
            o->source_addrs > 1 ? "es" : "", o->qty_spec, o->retry_share, o->seed);
        fprintf(out,
                "time      %.2f s (measured %.2f s after %.1f s warm-up)%s\n"
                "rate      %.0f answers/s, %.0f new orders/s (201/202/409 with an order id)\n",
                s->elapsed_s, s->measured_s, o->warmup_s, s->interrupted ? ", INTERRUPTED" : "",
                m.throughput_rps, m.accepted_per_s);
        fprintf(out,
                "latency   p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f ms "
                "(%" PRIu64 " answers)\n",
                m.p50_ms, m.p90_ms, m.p99_ms, m.p999_ms, m.max_ms, m.mean_ms, in->st->lat.count);
        fprintf(out, "answers  ");
        for (int a = 0; a < LT_ANS_COUNT; a++)
            if (in->st->all[a])
                fprintf(out, " %s %" PRIu64 ";", lt_answer_name(a), in->st->all[a]);
        fprintf(out, "\n");
        if (in->st->queue_max >= 0)
            fprintf(out,
                    "queue     order stream%s at most %" PRId64 " entries (sampled every 250 ms)\n",
                    in->nskus > 1 || in->nbuckets > 1 ? "s together" : "", in->st->queue_max);
    }
    if (in->nbuckets > 1) {
        fprintf(out, "buckets   %d bucket SKUs of SKU %" PRId64 ":", in->nbuckets, in->sku);
        for (int k = 0; k < in->nbuckets; k++)
            fprintf(out, " %" PRId64, in->bucket_skus[k]);
        fprintf(out, " (user mod %d); each checked, the admin ledger on their sum\n", in->nbuckets);
    }
    const struct lt_answers *a = in->ans;
    if (a && a->admin_ok + a->admin_refused + a->admin_unknown)
        fprintf(out,
                "admin     %" PRIu64 " deltas: %" PRIu64 " applied (sum %+" PRId64 "), %" PRIu64
                " refused 409, %" PRIu64 " unknown\n",
                a->admin_ok + a->admin_refused + a->admin_unknown, a->admin_ok, a->admin_applied,
                a->admin_refused, a->admin_unknown);
    if (a && lt_life_enabled(o)) {
        const struct lt_life_counts *l = &a->life;
        fprintf(out,
                "lifecycle window %d s, pay %.2f, cancel %.2f: %" PRIu64 " pays (200 %" PRIu64
                ", 409 %" PRIu64 ", open %" PRIu64 ", other %" PRIu64 "), %" PRIu64
                " sent twice (200 %" PRIu64 "); %" PRIu64 " cancels (200 %" PRIu64 ", 409 %" PRIu64
                ", open %" PRIu64 ", other %" PRIu64 "); %" PRIu64
                " of those aimed at the deadline; %" PRIu64 " left alone (%" PRIu64
                " unsent); %.2f s\n",
                o->payment_window_s, o->pay_share, o->cancel_share, l->pays, l->pay_ok,
                l->pay_refused, l->pay_unknown, l->pay_other, l->pay_again, l->pay_again_ok,
                l->cancels, l->cancel_ok, l->cancel_refused, l->cancel_unknown, l->cancel_other,
                l->aimed, l->walks, l->unsent, l->elapsed_s);
    }
    const struct lt_check_result *c = in->check;
    if (c && life_shown(in))
        fprintf(out,
                "orders    paid %" PRId64 ", cancelled %" PRId64 " (%" PRId64
                " before confirmation, %" PRId64 " after), expired %" PRId64 "; %" PRId64
                " units given back; settled %.2f s after the drain\n",
                c->f.lc_paid, c->f.lc_cancelled_early + c->f.lc_cancelled_late,
                c->f.lc_cancelled_early, c->f.lc_cancelled_late, c->f.lc_expired,
                c->f.lc_returned_units, c->f.settle_s);
    if (c) {
        const struct lt_check_facts *f = &c->f;
        fprintf(out,
                "database  stock %" PRId64 " (initial %" PRId64 "), Redis %" PRId64
                "; run: %" PRId64 " orders, %" PRId64 " units sold, %" PRId64 " rejected\n",
                f->db_stock, f->initial_stock, f->redis_stock, f->run_orders,
                f->run_confirmed_units, f->run_rejected_orders);
        if (m.have_writer)
            fprintf(out,
                    "writer    %.0f rows/s confirmed vs %.0f orders/s accepted (ratio %.3f); "
                    "drained %.2f s after the run\n",
                    m.writer_confirmed_per_s, m.writer_accepted_per_s, m.writer_ratio,
                    m.drain_after_s);
        fprintf(out, "invariants\n");
        for (int i = 0; i < LT_CHK_COUNT; i++) {
            const struct lt_check_item *it = &c->item[i];
            fprintf(out, "  %s  %-52s %s\n", state_word(it->state), lt_check_name(i), it->detail);
            if (it->state == LT_CHECK_FAILED && it->rows[0]) {
                const char *p = it->rows;
                while (*p) {
                    size_t n = strcspn(p, "\n");
                    fprintf(out, "          %.*s\n", (int)n, p);
                    p += n + (p[n] == '\n');
                }
            }
        }
    }
    if (in->check_error)
        fprintf(out, "check     could not finish: %s\n", in->check_error);
    if (in->exit_code == LT_EXIT_OK)
        fprintf(out, "RESULT    ok%s\n",
                c                              ? ": every invariant held"
                : o->mode == LT_MODE_LOAD_ONLY ? ": answers saved, not checked (--check-only)"
                                               : "");
    else if (in->exit_code == LT_EXIT_VIOLATION)
        fprintf(out, "RESULT    VIOLATION (exit 1)\n");
    else
        fprintf(out, "RESULT    ERROR (exit %d)\n", in->exit_code);
}

/* ---- JSON ------------------------------------------------------------------- */

static json_t *series_json(const struct lt_stats *st)
{
    json_t *t = json_array(), *rps = json_array(), *acc = json_array(), *p50 = json_array(),
           *p99 = json_array(), *mx = json_array(), *queue = json_array(), *by = json_object();
    for (int a = 0; a < LT_ANS_COUNT; a++)
        json_object_set_new(by, lt_answer_key(a), json_array());
    for (size_t i = 0; i < st->nseconds; i++) {
        const struct lt_second *s = &st->sec[i];
        uint64_t n = 0;
        for (int a = 0; a < LT_ANS_COUNT; a++) {
            n += s->answers[a];
            json_array_append_new(json_object_get(by, lt_answer_key(a)),
                                  json_integer((json_int_t)s->answers[a]));
        }
        json_array_append_new(t, json_integer((json_int_t)i));
        json_array_append_new(rps, json_integer((json_int_t)n));
        json_array_append_new(acc, json_integer((json_int_t)lt_stats_new_orders(s->answers)));
        json_array_append_new(p50, json_real(us_ms(lt_hist_percentile(&s->lat, 50))));
        json_array_append_new(p99, json_real(us_ms(lt_hist_percentile(&s->lat, 99))));
        json_array_append_new(mx, json_real(us_ms(s->lat.count ? s->lat.max : 0)));
        json_array_append_new(queue, s->queue_len >= 0 ? json_integer(s->queue_len) : json_null());
    }
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "second", t, "answers_per_s", rps,
                     "accepted_per_s", acc, "p50_ms", p50, "p99_ms", p99, "max_ms", mx, "queue_len",
                     queue, "by_answer", by);
}

int lt_report_json(const char *path, const struct lt_report_in *in, char *err, size_t errlen)
{
    const struct lt_opts *o = in->o;
    struct lt_metrics m;
    lt_report_metrics(in, &m);
    static const char *const modes[] = {"run", "check-only", "raw", "load-only"};
    json_t *root = json_object();
    json_object_set_new(root, "label", json_string(o->label));
    json_object_set_new(root, "mode", json_string(modes[o->mode]));
    json_object_set_new(root, "url", json_string(o->url));
    json_object_set_new(root, "sku", json_integer(in->sku));
    json_object_set_new(root, "skus", json_integer(in->nskus > 1 ? in->nskus : 1));
    json_object_set_new(root, "sku_last", json_integer(in->nskus > 1 ? in->sku_last : in->sku));
    json_object_set_new(root, "buckets", json_integer(in->nbuckets > 1 ? in->nbuckets : 1));
    if (in->nbuckets > 1) {
        json_t *ids = json_array();
        for (int k = 0; k < in->nbuckets; k++)
            json_array_append_new(ids, json_integer(in->bucket_skus[k]));
        json_object_set_new(root, "bucket_skus", ids);
    }
    json_object_set_new(root, "exit_code", json_integer(in->exit_code));
    json_object_set_new(
        root, "config",
        json_pack("{s:I, s:I, s:I, s:i, s:f, s:f, s:s, s:f, s:I, s:i, s:I, s:i, s:I}", "users",
                  (json_int_t)o->users, "user_base", (json_int_t)o->user_base, "requests",
                  (json_int_t)o->requests, "concurrency", o->concurrency, "duration_s",
                  o->duration_s, "warmup_s", o->warmup_s, "qty", o->qty_spec, "retry_share",
                  o->retry_share, "seed", (json_int_t)o->seed, "timeout_ms", o->timeout_ms,
                  "admin_deltas", (json_int_t)o->admin_deltas, "admin_every_ms", o->admin_every_ms,
                  "admin_max_delta", (json_int_t)o->admin_max_delta));
    json_object_set_new(json_object_get(root, "config"), "source_addrs",
                        json_integer(o->source_addrs));
    json_object_set_new(json_object_get(root, "config"), "lifecycle",
                        json_pack("{s:f, s:f, s:i, s:i}", "pay_share", o->pay_share, "cancel_share",
                                  o->cancel_share, "payment_window_s", o->payment_window_s,
                                  "lifecycle_timeout_s", o->lifecycle_timeout_s));
    if (in->st && in->sum) {
        const struct lt_load_summary *s = in->sum;
        json_t *answers = json_object();
        for (int a = 0; a < LT_ANS_COUNT; a++)
            json_object_set_new(answers, lt_answer_key(a),
                                json_integer((json_int_t)in->st->all[a]));
        json_object_set_new(root, "run",
                            json_pack("{s:I, s:I, s:I, s:f, s:f, s:f, s:b, s:f, s:f, s:o}",
                                      "issued", (json_int_t)s->issued, "retries",
                                      (json_int_t)s->retries, "answered", (json_int_t)s->answered,
                                      "elapsed_s", s->elapsed_s, "measured_s", s->measured_s,
                                      "cpu_s", s->cpu_s, "interrupted", s->interrupted,
                                      "throughput_rps", m.throughput_rps, "accepted_per_s",
                                      m.accepted_per_s, "answers", answers));
        json_object_set_new(root, "latency_ms",
                            json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "p50", m.p50_ms, "p90",
                                      m.p90_ms, "p99", m.p99_ms, "p99_9", m.p999_ms, "max",
                                      m.max_ms, "mean", m.mean_ms, "count",
                                      (json_int_t)in->st->lat.count));
        json_object_set_new(root, "series", series_json(in->st));
        json_object_set_new(root, "queue_max", json_integer(in->st->queue_max));
    }
    if (in->ans)
        json_object_set_new(
            root, "promises",
            json_pack("{s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}}", "orders",
                      (json_int_t)in->ans->n, "unknown", (json_int_t)in->ans->unknown,
                      "idem_mismatch", (json_int_t)in->ans->idem_mismatch, "unexpected",
                      (json_int_t)in->ans->unexpected, "admin", "applied_sum",
                      (json_int_t)in->ans->admin_applied, "ok", (json_int_t)in->ans->admin_ok,
                      "refused", (json_int_t)in->ans->admin_refused, "unknown",
                      (json_int_t)in->ans->admin_unknown));
    if (in->ans && lt_life_enabled(o)) {
        const struct lt_life_counts *l = &in->ans->life;
        json_object_set_new(
            root, "lifecycle",
            json_pack("{s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:I, s:I}, "
                      "s:I, s:I, s:I, s:f}",
                      "pays", "sent", (json_int_t)l->pays, "ok_200", (json_int_t)l->pay_ok,
                      "refused_409", (json_int_t)l->pay_refused, "open", (json_int_t)l->pay_unknown,
                      "other", (json_int_t)l->pay_other, "sent_twice", (json_int_t)l->pay_again,
                      "twice_ok_200", (json_int_t)l->pay_again_ok, "cancels", "sent",
                      (json_int_t)l->cancels, "ok_200", (json_int_t)l->cancel_ok, "refused_409",
                      (json_int_t)l->cancel_refused, "open", (json_int_t)l->cancel_unknown, "other",
                      (json_int_t)l->cancel_other, "aimed_at_deadline", (json_int_t)l->aimed,
                      "left_alone", (json_int_t)l->walks, "unsent", (json_int_t)l->unsent,
                      "elapsed_s", l->elapsed_s));
    }
    if (m.have_writer)
        json_object_set_new(root, "writer",
                            json_pack("{s:f, s:f, s:f, s:f}", "accepted_per_s",
                                      m.writer_accepted_per_s, "confirmed_per_s",
                                      m.writer_confirmed_per_s, "ratio", m.writer_ratio, "drain_s",
                                      m.drain_after_s));
    json_t *inv = json_object();
    json_object_set_new(inv, "checked", json_boolean(in->check != NULL));
    json_object_set_new(inv, "ok", json_boolean(in->check && in->check->ok && !in->check_error));
    if (in->check_error)
        json_object_set_new(inv, "error", json_string(in->check_error));
    if (in->check) {
        const struct lt_check_facts *f = &in->check->f;
        json_t *checks = json_array();
        for (int i = 0; i < LT_CHK_COUNT; i++) {
            const struct lt_check_item *it = &in->check->item[i];
            json_array_append_new(checks, json_pack("{s:s, s:s, s:s, s:s, s:s}", "key",
                                                    lt_check_key(i), "name", lt_check_name(i),
                                                    "state", state_word(it->state), "detail",
                                                    it->detail, "rows", it->rows));
        }
        json_object_set_new(inv, "checks", checks);
        json_object_set_new(
            inv, "facts",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "db_stock",
                      (json_int_t)f->db_stock, "redis_stock", (json_int_t)f->redis_stock,
                      "initial_stock", (json_int_t)f->initial_stock, "per_user_limit",
                      (json_int_t)f->per_user_limit, "run_orders", (json_int_t)f->run_orders,
                      "run_units_sold", (json_int_t)f->run_confirmed_units, "run_rejected_orders",
                      (json_int_t)f->run_rejected_orders, "answered_units",
                      (json_int_t)f->answered_units, "unanswered_rows",
                      (json_int_t)f->unanswered_rows, "admin_ledger_sum",
                      (json_int_t)f->admin_ledger_sum, "drain_s", f->drain_s));
        json_object_set_new(json_object_get(inv, "facts"), "answered",
                            json_pack("{s:I, s:I, s:I, s:I, s:I}", "confirmed_201",
                                      (json_int_t)f->answered_confirmed, "rejected_409",
                                      (json_int_t)f->answered_rejected, "pending_202",
                                      (json_int_t)f->answered_pending, "lost_202",
                                      (json_int_t)f->lost_pending_orders, "lost_202_units",
                                      (json_int_t)f->lost_pending_units));
        json_object_set_new(
            json_object_get(inv, "facts"), "lifecycle",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "payment_window_s",
                      (json_int_t)f->payment_window_s, "paid", (json_int_t)f->lc_paid,
                      "cancelled_before_confirmation", (json_int_t)f->lc_cancelled_early,
                      "cancelled_after_confirmation", (json_int_t)f->lc_cancelled_late, "expired",
                      (json_int_t)f->lc_expired, "returned_units", (json_int_t)f->lc_returned_units,
                      "settle_s", f->settle_s));
    }
    json_object_set_new(root, "invariants", inv);
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (rc != 0) {
        snprintf(err, errlen, "cannot write %s", path);
        return -1;
    }
    return 0;
}

/* ---- HTML ------------------------------------------------------------------ */

static void html_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* A "nice" axis maximum: 1, 2 or 5 times a power of ten, at least v. */
static double nice_max(double v)
{
    if (v <= 0)
        return 1;
    double p = 1;
    while (p * 10 <= v)
        p *= 10;
    while (p > v)
        p /= 10;
    static const double steps[] = {1, 2, 5, 10};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (p * steps[i] >= v)
            return p * steps[i];
    return p * 10;
}

struct line {
    const char *name, *color;
    const double *y; /* n values; negative = no value */
};

static void svg_lines(FILE *f, const char *title, const char *unit, const struct line *lines,
                      size_t nlines, size_t n, double warmup_s)
{
    double ymax = 0;
    for (size_t l = 0; l < nlines; l++)
        for (size_t i = 0; i < n; i++)
            if (lines[l].y[i] > ymax)
                ymax = lines[l].y[i];
    ymax = nice_max(ymax);
    double pw = CHART_W - CHART_ML - CHART_MR, ph = CHART_H - CHART_MT - CHART_MB;
    double xs = n > 1 ? pw / (double)(n - 1) : pw;
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n", CHART_W,
            CHART_H, CHART_W, CHART_H);
    fprintf(f, "<text x=\"%d\" y=\"20\" class=\"t\">", CHART_ML);
    html_escape(f, title);
    fprintf(f, "</text>\n");
    if (warmup_s > 0 && n > 1) {
        double wx = warmup_s * xs;
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"#eee\"/>"
                "<text x=\"%.1f\" y=\"%d\" class=\"a\">warm-up</text>\n",
                CHART_ML, CHART_MT, wx > pw ? pw : wx, ph, CHART_ML + 4.0, CHART_MT + 12);
    }
    for (int t = 0; t <= CHART_TICKS; t++) {
        double v = ymax * t / CHART_TICKS, y = CHART_MT + ph - ph * t / CHART_TICKS;
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"g\"/>"
                "<text x=\"%d\" y=\"%.1f\" class=\"a\" text-anchor=\"end\">%g</text>\n",
                CHART_ML, y, CHART_ML + pw, y, CHART_ML - 6, y + 4, v);
    }
    size_t xstep = n > 10 ? (n + 9) / 10 : 1;
    for (size_t i = 0; i < n; i += xstep)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"a\" text-anchor=\"middle\">%zus</text>\n",
                CHART_ML + (double)i * xs, CHART_MT + ph + 16, i);
    fprintf(f, "<text x=\"12\" y=\"%d\" class=\"a\">", CHART_MT - 8);
    html_escape(f, unit);
    fprintf(f, "</text>\n");
    double legend_x = CHART_W - CHART_MR - LEGEND_W * (double)nlines; /* right-aligned */
    for (size_t l = 0; l < nlines; l++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                lines[l].color);
        for (size_t i = 0; i < n; i++)
            if (lines[l].y[i] >= 0)
                fprintf(f, "%.1f,%.1f ", CHART_ML + (double)i * xs,
                        CHART_MT + ph - ph * lines[l].y[i] / ymax);
        fprintf(f, "\"/>\n");
        if (n == 1)
            fprintf(f, "<circle cx=\"%d\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", CHART_ML,
                    CHART_MT + ph - ph * lines[l].y[0] / ymax, lines[l].color);
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%d\" width=\"12\" height=\"4\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%d\" class=\"a\">",
                legend_x + LEGEND_W * (double)l, 14, lines[l].color,
                legend_x + 16.0 + LEGEND_W * (double)l, 20);
        html_escape(f, lines[l].name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

static void svg_bars(FILE *f, const struct lt_stats *st)
{
    static const char *const colors[LT_ANS_COUNT] = {
        [LT_ANS_CONFIRMED] = "#1b7837",    [LT_ANS_ACCEPTED] = "#2a9d43",
        [LT_ANS_REJECTED] = "#8c6bb1",     [LT_ANS_REPLAYED] = "#74c476",
        [LT_ANS_SOLD_OUT] = "#3778bf",     [LT_ANS_LIMIT] = "#6baed6",
        [LT_ANS_NOT_ACTIVE] = "#9ecae1",   [LT_ANS_CONFLICT] = "#d62728",
        [LT_ANS_IDEM_REUSED] = "#d62728",  [LT_ANS_BAD_REQUEST] = "#d62728",
        [LT_ANS_NOT_FOUND] = "#d62728",    [LT_ANS_UNAVAILABLE] = "#ff9f1c",
        [LT_ANS_RATE_LIMITED] = "#ffbf69", [LT_ANS_UNCERTAIN] = "#ff7f0e",
        [LT_ANS_TIMEOUT] = "#ff7f0e",      [LT_ANS_NET_ERROR] = "#ff7f0e",
        [LT_ANS_OTHER] = "#d62728",
    };
    uint64_t max = 0;
    int rows = 0;
    for (int a = 0; a < LT_ANS_COUNT; a++) {
        if (st->all[a] > max)
            max = st->all[a];
        rows += st->all[a] > 0;
    }
    if (!rows)
        return;
    int label_w = BAR_LABEL_W, h = CHART_MT + rows * (BAR_H + BAR_GAP) + BAR_GAP;
    double pw = CHART_W - label_w - BAR_VALUE_W;
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n", CHART_W, h,
            CHART_W, h);
    fprintf(f, "<text x=\"%d\" y=\"20\" class=\"t\">Answers by status</text>\n", CHART_ML);
    int r = 0;
    for (int a = 0; a < LT_ANS_COUNT; a++) {
        if (!st->all[a])
            continue;
        double y = CHART_MT + r * (BAR_H + BAR_GAP), w = pw * (double)st->all[a] / (double)max;
        fprintf(f,
                "<text x=\"%d\" y=\"%.1f\" class=\"a\" text-anchor=\"end\">%s</text>"
                "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" class=\"a\">%" PRIu64 "</text>\n",
                label_w - 8, y + 15, lt_answer_name(a), label_w, y, w < 1 ? 1 : w, BAR_H, colors[a],
                label_w + (w < 1 ? 1 : w) + 6, y + 15, st->all[a]);
        r++;
    }
    fprintf(f, "</svg>\n");
}

static void html_charts(FILE *f, const struct lt_report_in *in)
{
    const struct lt_stats *st = in->st;
    size_t n = st->nseconds;
    /* The last second is usually partial: scale it to a rate, or drop a sliver. */
    double last_frac = in->sum ? in->sum->elapsed_s - (double)(n ? n - 1 : 0) : 1;
    if (n > 1 && last_frac < LAST_SECOND_MIN) {
        n--;
        last_frac = 1;
    }
    if (last_frac <= 0 || last_frac > 1)
        last_frac = 1;
    if (!n)
        return;
    double *buf = calloc(n * 6, sizeof *buf);
    if (!buf)
        return;
    double *rps = buf, *acc = buf + n, *p50 = buf + 2 * n, *p99 = buf + 3 * n, *mx = buf + 4 * n,
           *queue = buf + 5 * n;
    int have_queue = 0;
    for (size_t i = 0; i < n; i++) {
        const struct lt_second *s = &st->sec[i];
        uint64_t tot = 0;
        for (int a = 0; a < LT_ANS_COUNT; a++)
            tot += s->answers[a];
        double scale = i == n - 1 ? 1.0 / last_frac : 1.0;
        rps[i] = (double)tot * scale;
        acc[i] = (double)lt_stats_new_orders(s->answers) * scale;
        p50[i] = s->lat.count ? us_ms(lt_hist_percentile(&s->lat, 50)) : -1;
        p99[i] = s->lat.count ? us_ms(lt_hist_percentile(&s->lat, 99)) : -1;
        mx[i] = s->lat.count ? us_ms(s->lat.max) : -1;
        queue[i] = (double)s->queue_len;
        have_queue |= s->queue_len >= 0;
    }
    struct line thr[] = {{"answers/s", "#3778bf", rps}, {"new orders/s", "#2a9d43", acc}};
    svg_lines(f, "Throughput per second", "per s", thr, 2, n, in->o->warmup_s);
    struct line lat[] = {{"p50", "#2a9d43", p50}, {"p99", "#ff7f0e", p99}, {"max", "#d62728", mx}};
    svg_lines(f, "Latency per second", "ms", lat, 3, n, in->o->warmup_s);
    if (have_queue) {
        struct line ql[] = {{"order stream length", "#6a3d9a", queue}};
        svg_lines(f, "Order queue (waiting for the writer)", "entries", ql, 1, n, in->o->warmup_s);
    }
    svg_bars(f, st);
    free(buf);
}

int lt_report_html(const char *path, const struct lt_report_in *in, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    struct lt_metrics m;
    lt_report_metrics(in, &m);
    const struct lt_opts *o = in->o;
    int ok = in->exit_code == LT_EXIT_OK;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>");
    html_escape(f, o->label);
    fprintf(
        f,
        " - seckill-loadtest</title>\n<style>\n"
        "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:900px}\n"
        "h1{font-size:20px} h2{font-size:16px;margin-top:28px}\n"
        "table{border-collapse:collapse} td,th{padding:3px 10px;text-align:left;"
        "border-bottom:1px solid #ddd} td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
        ".ok{color:#fff;background:#2a9d43;padding:2px 8px;border-radius:3px}\n"
        ".bad{color:#fff;background:#d62728;padding:2px 8px;border-radius:3px}\n"
        ".skip{color:#777} pre{background:#f6f6f6;padding:6px;font-size:12px;overflow:auto}\n"
        "svg{display:block;margin:12px 0} .t{font-weight:600;font-size:14px}\n"
        ".a{font-size:11px;fill:#555} .g{stroke:#e4e4e4}\n"
        "</style></head><body>\n<h1>");
    html_escape(f, o->label);
    char skuw[64];
    fprintf(f, ": %s at ", sku_words(in, skuw, sizeof skuw));
    html_escape(f, o->url);
    fprintf(f, " <span class=\"%s\">%s</span></h1>\n", ok ? "ok" : "bad",
            ok                                   ? (in->check ? "every invariant held" : "ok")
            : in->exit_code == LT_EXIT_VIOLATION ? "VIOLATION"
                                                 : "ERROR");
    if (in->st && in->sum) {
        const struct lt_load_summary *s = in->sum;
        fprintf(f,
                "<p>%" PRId64 " users, %" PRIu64 " requests + %" PRIu64
                " retries over %d keep-alive connections in %.2f s; quantities ",
                o->users, s->issued, s->retries, o->concurrency, s->elapsed_s);
        html_escape(f, o->qty_spec);
        fprintf(f, ", retry share %.2f, seed %" PRIu64 ".</p>\n", o->retry_share, o->seed);
        fprintf(
            f,
            "<table><tr><th>throughput</th><th>new orders</th><th>p50</th><th>p90</th>"
            "<th>p99</th><th>p99.9</th><th>max</th></tr>\n<tr><td class=\"n\">%.0f/s</td>"
            "<td class=\"n\">%.0f/s</td><td class=\"n\">%.3f ms</td><td class=\"n\">%.3f ms</td>"
            "<td class=\"n\">%.3f ms</td><td class=\"n\">%.3f ms</td><td class=\"n\">%.3f ms"
            "</td></tr></table>\n",
            m.throughput_rps, m.accepted_per_s, m.p50_ms, m.p90_ms, m.p99_ms, m.p999_ms, m.max_ms);
        html_charts(f, in);
    }
    if (in->check) {
        const struct lt_check_facts *fa = &in->check->f;
        fprintf(f, "<h2>Invariants, read from PostgreSQL and Redis</h2>\n");
        fprintf(f,
                "<p>Stock %" PRId64 " in the database, %" PRId64 " in Redis (initial %" PRId64
                "); this run: %" PRId64 " orders, %" PRId64 " units sold, %" PRId64
                " rejected.</p>\n",
                fa->db_stock, fa->redis_stock, fa->initial_stock, fa->run_orders,
                fa->run_confirmed_units, fa->run_rejected_orders);
        if (life_shown(in))
            fprintf(f,
                    "<p>Order lifecycle: %" PRId64 " paid, %" PRId64 " cancelled (%" PRId64
                    " before confirmation), %" PRId64 " expired; %" PRId64
                    " units given back; settled %.2f s after the drain.</p>\n",
                    fa->lc_paid, fa->lc_cancelled_early + fa->lc_cancelled_late,
                    fa->lc_cancelled_early, fa->lc_expired, fa->lc_returned_units, fa->settle_s);
        if (in->ans && lt_life_enabled(o)) {
            const struct lt_life_counts *l = &in->ans->life;
            fprintf(f,
                    "<table><tr><th>lifecycle</th><th>sent</th><th>200</th><th>409</th>"
                    "<th>open</th><th>other</th></tr>\n"
                    "<tr><td>pay</td><td class=\"n\">%" PRIu64 "</td><td class=\"n\">%" PRIu64
                    "</td><td class=\"n\">%" PRIu64 "</td><td class=\"n\">%" PRIu64
                    "</td><td class=\"n\">%" PRIu64 "</td></tr>\n"
                    "<tr><td>pay again (same ref)</td><td class=\"n\">%" PRIu64
                    "</td><td class=\"n\">%" PRIu64 "</td><td></td><td></td><td></td></tr>\n"
                    "<tr><td>cancel</td><td class=\"n\">%" PRIu64 "</td><td class=\"n\">%" PRIu64
                    "</td><td class=\"n\">%" PRIu64 "</td><td class=\"n\">%" PRIu64
                    "</td><td class=\"n\">%" PRIu64 "</td></tr>\n</table>\n"
                    "<p>%" PRIu64 " pays and cancels aimed at their order's deadline; %" PRIu64
                    " orders left alone (%" PRIu64
                    " of them unsent at the phase's end); payment window %d s.</p>\n",
                    l->pays, l->pay_ok, l->pay_refused, l->pay_unknown, l->pay_other, l->pay_again,
                    l->pay_again_ok, l->cancels, l->cancel_ok, l->cancel_refused, l->cancel_unknown,
                    l->cancel_other, l->aimed, l->walks, l->unsent, o->payment_window_s);
        }
        if (m.have_writer)
            fprintf(f,
                    "<p>Order writer: %.0f rows/s confirmed vs %.0f orders/s accepted (ratio "
                    "%.3f), stream drained %.2f s after the run.</p>\n",
                    m.writer_confirmed_per_s, m.writer_accepted_per_s, m.writer_ratio,
                    m.drain_after_s);
        fprintf(f, "<table><tr><th></th><th>check</th><th>what was found</th></tr>\n");
        for (int i = 0; i < LT_CHK_COUNT; i++) {
            const struct lt_check_item *it = &in->check->item[i];
            const char *cls = it->state == LT_CHECK_PASSED   ? "ok"
                              : it->state == LT_CHECK_FAILED ? "bad"
                                                             : "skip";
            fprintf(f, "<tr><td><span class=\"%s\">%s</span></td><td>", cls, state_word(it->state));
            html_escape(f, lt_check_name(i));
            fprintf(f, "</td><td>");
            html_escape(f, it->detail);
            if (it->state == LT_CHECK_FAILED && it->rows[0]) {
                fprintf(f, "<pre>");
                html_escape(f, it->rows);
                fprintf(f, "</pre>");
            }
            fprintf(f, "</td></tr>\n");
        }
        fprintf(f, "</table>\n");
    }
    if (in->check_error) {
        fprintf(f, "<p class=\"bad\">The check could not finish: ");
        html_escape(f, in->check_error);
        fprintf(f, "</p>\n");
    }
    fprintf(f, "<p class=\"skip\">seckill-loadtest; latencies from a log-bucketed histogram "
               "(under 0.8 %% error overall, 6 %% per second).</p>\n</body></html>\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, errlen, "cannot write %s", path);
        return -1;
    }
    return 0;
}
