#include "lt_life.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lt_buyers.h"
#include "lt_load.h"

#define US_PER_S 1000000ULL
#define US_PER_MS 1000
#define MAX_BODY_BYTES 4096 /* an order's JSON; larger is not an answer we know */
#define PATH_MAX_LEN 96
/* Buyer tokens outlive the phase, as lt_load's outlive the buyers. */
#define TOKEN_TTL_S (2 * LT_MAX_DURATION_S)

int lt_life_enabled(const struct lt_opts *o)
{
    return o->pay_share > 0 || o->cancel_share > 0 || o->payment_window_s > 0;
}

void lt_life_payment_ref_prefix(char *out, size_t cap, uint64_t seed)
{
    snprintf(out, cap, "lt-%" PRIu64 "-", seed);
}

void lt_life_payment_ref(char *out, size_t cap, uint64_t seed, int64_t order_id)
{
    char prefix[LT_PAYMENT_REF_PREFIX_MAX];
    lt_life_payment_ref_prefix(prefix, sizeof prefix, seed);
    snprintf(out, cap, "%s%" PRId64, prefix, order_id);
}

static void reply_clear(struct lt_reply *r, int code)
{
    memset(r, 0, sizeof *r);
    r->code = code;
}

/* ---- the plan -------------------------------------------------------------- */

int lt_life_plan(const struct lt_opts *o, struct lt_rand *rng, struct lt_answers *a)
{
    free(a->acts);
    a->acts = NULL;
    a->nacts = 0;
    memset(&a->life, 0, sizeof a->life);
    if (a->n == 0)
        return 0;
    a->acts = calloc(a->n, sizeof *a->acts);
    if (!a->acts)
        return -1;
    /* Half the window: the other half is the sweep's, and with a short
     * window the last pays and cancels race it. */
    double spread_us = (double)o->payment_window_s * (double)US_PER_S / 2.0;
    for (size_t i = 0; i < a->n; i++) {
        const struct lt_order *ord = &a->orders[i];
        /* Five draws for every order, planned or not: an order's plan does
         * not depend on what was drawn for the ones before it. */
        double u = lt_rand_unit(rng), again = lt_rand_unit(rng), when = lt_rand_unit(rng);
        double aim = lt_rand_unit(rng), jitter = lt_rand_unit(rng);
        if (ord->promise == LT_PROMISE_REJECTED)
            continue; /* a 409 with an order id: rejected, nothing to pay or cancel */
        if (i > 0 && ord->id == a->orders[i - 1].id)
            continue; /* one id answered to two buyers: I4 reports it; one plan */
        struct lt_act *t = &a->acts[a->nacts++];
        t->id = ord->id;
        t->user = ord->user;
        t->plan = u < o->pay_share                     ? LT_PLAN_PAY
                  : u < o->pay_share + o->cancel_share ? LT_PLAN_CANCEL
                                                       : LT_PLAN_WALK;
        t->again = t->plan == LT_PLAN_PAY && again < LT_PAY_AGAIN_SHARE;
        t->due_us = (uint64_t)(when * spread_us);
        if (t->plan != LT_PLAN_WALK && o->payment_window_s > 0 && ord->answered_wall_us > 0 &&
            aim < LT_DEADLINE_SHARE) {
            int64_t off_us = (int64_t)((2 * jitter - 1) * LT_DEADLINE_JITTER_MS * US_PER_MS);
            t->aim_wall_us =
                ord->answered_wall_us + (int64_t)o->payment_window_s * 1000000 + off_us;
            a->life.aimed++;
        }
        reply_clear(&t->first, -1);
        reply_clear(&t->second, -1);
        if (t->plan == LT_PLAN_WALK)
            a->life.walks++;
    }
    return 0;
}

/* ---- the phase ------------------------------------------------------------- */

struct life;

/* A pay or a cancel to send, and where its answers are counted. */
struct job {
    struct lt_act *act;
    struct lt_life_counts *cnt;
};

struct life_slot {
    struct life *lf;
    struct evhttp_connection *conn;       /* the buyer's cancels: the public listener */
    struct evhttp_connection *admin_conn; /* the payment callbacks: the internal one */
    struct job job;                       /* act NULL: idle */
    int second;                           /* the pay's second sending is the one in flight */
};

struct life {
    const struct lt_opts *o;
    struct event_base *base;
    struct lt_buyers *buyers;
    char admin_auth[LT_TOKEN_MAX + 16];
    struct job *jobs; /* by due time */
    size_t njobs, next;
    struct life_slot *slots;
    int nslots;
    int *idle; /* indexes of idle slots, a stack */
    int nidle;
    int inflight;
    int stopping; /* the end, or a signal: send nothing more */
    uint64_t t0_us;
    struct event *due, *end_timer, *sig_int, *sig_term;
};

static struct timeval us_tv(uint64_t us)
{
    struct timeval tv = {(time_t)(us / US_PER_S), (suseconds_t)(us % US_PER_S)};
    return tv;
}

static int job_cmp(const void *x, const void *y)
{
    const struct job *a = x, *b = y;
    if (a->act->due_us != b->act->due_us)
        return a->act->due_us < b->act->due_us ? -1 : 1;
    return a->act->id < b->act->id ? -1 : a->act->id > b->act->id;
}

/* Copies a word an answer names ("order_not_payable", "expired") into dst;
 * anything but lower-case letters and '_' becomes "?" (it goes into a COPY
 * row and a report as it is). */
static void copy_word(char *dst, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (!s)
        dst[0] = '\0';
    else if (n == 0 || n >= LT_WORD_MAX || strspn(s, "abcdefghijklmnopqrstuvwxyz_") != n)
        snprintf(dst, LT_WORD_MAX, "?");
    else
        memcpy(dst, s, n + 1);
}

static void read_reply(struct evhttp_request *req, const struct life *lf, const struct lt_act *t,
                       struct lt_reply *r)
{
    int code = req ? evhttp_request_get_response_code(req) : 0;
    reply_clear(r, code);
    if (code == 0)
        return;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    json_t *j = NULL;
    if (n > 0 && n <= MAX_BODY_BYTES) {
        unsigned char *p = evbuffer_pullup(in, (ev_ssize_t)n);
        j = p ? json_loadb((const char *)p, n, 0, NULL) : NULL;
    }
    copy_word(r->error, json_string_value(json_object_get(j, "error")));
    copy_word(r->state, json_string_value(json_object_get(j, "status")));
    r->replayed = json_is_true(json_object_get(j, "replayed"));
    const char *ref = json_string_value(json_object_get(j, "payment_ref"));
    char want[LT_PAYMENT_REF_MAX];
    lt_life_payment_ref(want, sizeof want, lf->o->seed, t->id);
    r->ref_ok = ref && strcmp(ref, want) == 0;
    json_decref(j);
}

static void count(struct lt_life_counts *c, const struct lt_act *t, const struct lt_reply *r,
                  int second)
{
    /* Open: no answer or a 503 (the service may or may not have acted), or a
     * 429 (a rate limit refused it: the order is left as it was). */
    int unknown = r->code == 0 || r->code == 429 || r->code == 503;
    if (second) {
        c->pay_again++;
        c->pay_again_ok += r->code == 200;
    } else if (t->plan == LT_PLAN_PAY) {
        c->pays++;
        c->pay_ok += r->code == 200;
        c->pay_refused += r->code == 409;
        c->pay_unknown += unknown;
        c->pay_other += r->code != 200 && r->code != 409 && !unknown;
    } else {
        c->cancels++;
        c->cancel_ok += r->code == 200;
        c->cancel_refused += r->code == 409;
        c->cancel_unknown += unknown;
        c->cancel_other += r->code != 200 && r->code != 409 && !unknown;
    }
}

static void on_reply(struct evhttp_request *req, void *arg);

/* Sends the slot's pay or cancel (its second pay when s->second).  Returns
 * 0, or -1 when evhttp refused it: nothing was sent, and the reply says no
 * answer. */
static int send_job(struct life_slot *s)
{
    struct life *lf = s->lf;
    struct lt_act *t = s->job.act;
    struct evhttp_request *req = evhttp_request_new(on_reply, s);
    if (!req) {
        fprintf(stderr, "seckill-loadtest: out of memory creating a request\n");
        abort();
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    int pay = t->plan == LT_PLAN_PAY;
    evhttp_add_header(h, "Host", pay ? lf->o->admin.host : lf->o->host);
    char path[PATH_MAX_LEN];
    if (t->plan == LT_PLAN_PAY) {
        char ref[LT_PAYMENT_REF_MAX], body[LT_PAYMENT_REF_MAX + 32];
        lt_life_payment_ref(ref, sizeof ref, lf->o->seed, t->id);
        int n = snprintf(body, sizeof body, "{\"payment_ref\":\"%s\"}", ref);
        evhttp_add_header(h, "Authorization", lf->admin_auth);
        evhttp_add_header(h, "Content-Type", "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(req), body, (size_t)n);
        snprintf(path, sizeof path, "/admin/v1/orders/%" PRId64 "/payment", t->id);
    } else {
        /* The buyer's own token: an order is cancelled by whom it belongs to.
         * A token that could not be signed is sent as none: the 401 shows. */
        const char *auth = lt_buyers_auth(lf->buyers, t->user);
        if (auth)
            evhttp_add_header(h, "Authorization", auth);
        evhttp_add_header(h, "Content-Length", "0");
        snprintf(path, sizeof path, "/api/v1/orders/%" PRId64 "/cancel", t->id);
    }
    lf->inflight++;
    if (evhttp_make_request(pay ? s->admin_conn : s->conn, req, EVHTTP_REQ_POST, path) != 0) {
        lf->inflight--; /* evhttp freed req and will not call back */
        struct lt_reply *r = s->second ? &t->second : &t->first;
        reply_clear(r, 0);
        count(s->job.cnt, t, r, s->second);
        return -1;
    }
    return 0;
}

static void release(struct life_slot *s)
{
    struct life *lf = s->lf;
    s->job.act = NULL;
    s->second = 0;
    lf->idle[lf->nidle++] = (int)(s - lf->slots);
}

/* Gives every idle slot a job that is due, arms the timer for the next one,
 * and ends the loop when nothing is left to send or wait for. */
static void pump(struct life *lf)
{
    uint64_t now = lt_now_us() - lf->t0_us;
    while (!lf->stopping && lf->nidle > 0 && lf->next < lf->njobs &&
           lf->jobs[lf->next].act->due_us <= now) {
        struct life_slot *s = &lf->slots[lf->idle[--lf->nidle]];
        s->job = lf->jobs[lf->next++];
        if (send_job(s) != 0)
            release(s);
    }
    if (!lf->stopping && lf->nidle > 0 && lf->next < lf->njobs) {
        struct timeval tv = us_tv(lf->jobs[lf->next].act->due_us - now);
        if (evtimer_add(lf->due, &tv) != 0)
            lf->stopping = 1; /* no timer, no schedule: end with what was answered */
    }
    if ((lf->stopping || lf->next == lf->njobs) && lf->inflight == 0)
        event_base_loopbreak(lf->base);
}

static void on_reply(struct evhttp_request *req, void *arg)
{
    struct life_slot *s = arg;
    struct life *lf = s->lf;
    struct lt_act *t = s->job.act;
    struct lt_reply *r = s->second ? &t->second : &t->first;
    lf->inflight--;
    read_reply(req, lf, t, r);
    count(s->job.cnt, t, r, s->second);
    /* The second pay follows its first at once, whatever the first got: the
     * same ref must pay the order once, answered 200 both times. */
    if (!s->second && t->again && !lf->stopping) {
        s->second = 1;
        if (send_job(s) == 0)
            return;
    }
    release(s);
    pump(lf);
}

static void on_due(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    pump(arg);
}

static void on_end(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct life *lf = arg;
    fprintf(stderr,
            "seckill-loadtest: lifecycle: hard end with %d requests in flight and %zu unsent\n",
            lf->inflight, lf->njobs - lf->next);
    lf->stopping = 1;
    event_base_loopbreak(lf->base);
}

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct life *lf = arg;
    if (lf->stopping) {
        event_base_loopbreak(lf->base);
        return;
    }
    fprintf(stderr,
            "seckill-loadtest: signal %d: lifecycle: finishing the requests in flight (again to "
            "stop now)\n",
            (int)fd);
    lf->stopping = 1;
    pump(lf);
}

/* The pays and cancels of every SKU, by due time: an aimed one's from its
 * wall clock aim (at once when that has passed).  Returns 0 or -1. */
static int collect_jobs(struct life *lf, struct lt_answers *ans, int n, int64_t t0_wall)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += ans[i].nacts;
    lf->jobs = calloc(total ? total : 1, sizeof *lf->jobs);
    if (!lf->jobs)
        return -1;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < ans[i].nacts; k++)
            if (ans[i].acts[k].plan != LT_PLAN_WALK) {
                struct lt_act *t = &ans[i].acts[k];
                if (t->aim_wall_us)
                    t->due_us = t->aim_wall_us > t0_wall ? (uint64_t)(t->aim_wall_us - t0_wall) : 0;
                lf->jobs[lf->njobs++] = (struct job){t, &ans[i].life};
            }
    qsort(lf->jobs, lf->njobs, sizeof *lf->jobs, job_cmp);
    return 0;
}

static int setup(struct life *lf, char *err, size_t errlen)
{
    const struct lt_opts *o = lf->o;
    lf->nslots = (size_t)o->concurrency < lf->njobs ? o->concurrency : (int)lf->njobs;
    lf->base = event_base_new();
    lf->slots = calloc((size_t)lf->nslots, sizeof *lf->slots);
    lf->idle = calloc((size_t)lf->nslots, sizeof *lf->idle);
    lf->buyers = lt_buyers_new(o->buyer_secret, o->user_base, o->users, TOKEN_TTL_S);
    if (!lf->base || !lf->slots || !lf->idle || !lf->buyers) {
        snprintf(err, errlen, "lifecycle: cannot set up (memory, event loop or buyer secret)");
        return -1;
    }
    struct timeval to = us_tv((uint64_t)o->timeout_ms * 1000u);
    for (int i = 0; i < lf->nslots; i++) {
        struct life_slot *s = &lf->slots[i];
        const struct lt_target *t = &o->targets[i % o->ntargets];
        s->lf = lf;
        s->conn = evhttp_connection_base_new(lf->base, NULL, t->host, (ev_uint16_t)t->port);
        s->admin_conn =
            evhttp_connection_base_new(lf->base, NULL, o->admin.host, (ev_uint16_t)o->admin.port);
        if (!s->conn || !s->admin_conn) {
            snprintf(err, errlen, "lifecycle: cannot create connection %d", i);
            return -1;
        }
        evhttp_connection_set_timeout_tv(s->conn, &to);
        evhttp_connection_set_retries(s->conn, 0);
        evhttp_connection_set_max_body_size(s->conn, MAX_BODY_BYTES);
        evhttp_connection_set_timeout_tv(s->admin_conn, &to);
        evhttp_connection_set_retries(s->admin_conn, 0);
        evhttp_connection_set_max_body_size(s->admin_conn, MAX_BODY_BYTES);
        lf->idle[lf->nidle++] = i;
    }
    /* Bounded: the window (an aimed one is due at most a window after the
     * phase began), then the timeout for the last answers (a second pay may
     * follow its first). */
    uint64_t end_us = (uint64_t)o->payment_window_s * US_PER_S + LT_DEADLINE_JITTER_MS * US_PER_MS +
                      (uint64_t)o->lifecycle_timeout_s * US_PER_S +
                      2 * (uint64_t)o->timeout_ms * 1000u;
    struct timeval end = us_tv(end_us);
    lf->due = evtimer_new(lf->base, on_due, lf);
    lf->end_timer = evtimer_new(lf->base, on_end, lf);
    lf->sig_int = evsignal_new(lf->base, SIGINT, on_signal, lf);
    lf->sig_term = evsignal_new(lf->base, SIGTERM, on_signal, lf);
    if (!lf->due || !lf->end_timer || !lf->sig_int || !lf->sig_term ||
        event_add(lf->end_timer, &end) != 0 || event_add(lf->sig_int, NULL) != 0 ||
        event_add(lf->sig_term, NULL) != 0) {
        snprintf(err, errlen, "lifecycle: cannot set up timers");
        return -1;
    }
    snprintf(lf->admin_auth, sizeof lf->admin_auth, "Bearer %s", o->token);
    return 0;
}

static void teardown(struct life *lf)
{
    for (int i = 0; lf->slots && i < lf->nslots; i++) {
        /* each frees a request in flight, without its callback */
        if (lf->slots[i].conn)
            evhttp_connection_free(lf->slots[i].conn);
        if (lf->slots[i].admin_conn)
            evhttp_connection_free(lf->slots[i].admin_conn);
    }
    struct event *evs[] = {lf->due, lf->end_timer, lf->sig_int, lf->sig_term};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            event_free(evs[i]);
    if (lf->base)
        event_base_free(lf->base);
    lt_buyers_free(lf->buyers);
    free(lf->slots);
    free(lf->idle);
    free(lf->jobs);
}

/* After the loop: a request still in flight got no answer, and a job never
 * sent leaves its order alone (it walks away). */
static void settle_leftovers(struct life *lf)
{
    for (int i = 0; i < lf->nslots; i++) {
        struct life_slot *s = &lf->slots[i];
        if (!s->job.act)
            continue;
        struct lt_reply *r = s->second ? &s->job.act->second : &s->job.act->first;
        reply_clear(r, 0);
        count(s->job.cnt, s->job.act, r, s->second);
    }
    for (size_t k = lf->next; k < lf->njobs; k++) {
        lf->jobs[k].act->plan = LT_PLAN_WALK;
        lf->jobs[k].cnt->unsent++;
        lf->jobs[k].cnt->walks++;
    }
}

int lt_life_run(const struct lt_opts *o, struct lt_answers *ans, int n, double *elapsed_s,
                char *err, size_t errlen)
{
    struct life lf;
    memset(&lf, 0, sizeof lf);
    lf.o = o;
    *elapsed_s = 0;
    int rc = -1;
    lf.t0_us = lt_now_us(); /* the phase's start, on both clocks */
    if (collect_jobs(&lf, ans, n, lt_wall_us()) != 0) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (lf.njobs == 0) {
        rc = 0;
        goto out;
    }
    if (setup(&lf, err, errlen) != 0)
        goto out;
    pump(&lf);
    /* A loopbreak before the loop runs is forgotten: enter it only when
     * something is in flight or still to send. */
    if (lf.inflight > 0 || (!lf.stopping && lf.next < lf.njobs))
        event_base_dispatch(lf.base); /* ends: all answered, the hard end, or a signal */
    settle_leftovers(&lf);
    *elapsed_s = (double)(lt_now_us() - lf.t0_us) / (double)US_PER_S;
    rc = 0;
out:
    teardown(&lf);
    return rc;
}
