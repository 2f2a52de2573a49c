#include "lt_load.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/keys.h"
#include "lt_buyers.h"
#include "lt_redis.h"
#include <rlock/rlock.h>

#define US_PER_S 1000000ULL
#define US_PER_MS 1000ULL
#define TICK_MS 250          /* queue sampling and progress check */
#define END_GRACE_MS 2000    /* beyond the request timeout, at the very end */
#define REDIS_TIMEOUT_MS 500 /* the queue sample must not stall the loop */
#define MAX_BODY_BYTES 4096  /* answers are small; larger is an error */
#define IDEM_KEY_MAX 64
#define PATH_MAX_LEN 128
#define ADMIN_REASON "seckill-loadtest delta"
/* Buyer tokens outlive any run: its duration, drain and check are bounded. */
#define TOKEN_TTL_S (2 * LT_MAX_DURATION_S)

struct lt_load;

/* One logical request: a buyer's order, maybe sent twice with the same key. */
struct lt_req {
    uint64_t seq;
    int sku; /* index into the run's SKUs */
    int64_t user, qty;
    int attempt; /* 0 first, 1 the retry */
    int retry;   /* carries an Idempotency-Key and is sent twice */
    char key[IDEM_KEY_MAX];
    enum lt_answer first; /* answer of attempt 0 */
    int64_t first_id;     /* the order it named, if any */
    int resolved;         /* some attempt got an order or a refusal */
    int open;             /* some attempt got no answer: it may have taken stock */
};

struct lt_slot {
    struct lt_load *ld;
    struct evhttp_connection *conn;
    struct lt_req req;
    struct event *pause; /* a buyer who got no answer or a 503 waits before the next try */
    int pausing;
    int want_retry; /* attempt 0 answered, its retry not sent yet */
    int busy;
    uint64_t sent_us;
    int failed; /* the error callback ran for the current attempt */
    enum evhttp_request_error error;
};

struct lt_admin {
    struct evhttp_connection *conn;
    struct event *timer;
    int busy;
    int64_t fired;
    int64_t delta; /* of the one in flight */
};

struct lt_load {
    const struct lt_opts *o;
    const int64_t *skus;
    int nskus;
    const int64_t *streams; /* the SKUs whose order streams make the queue */
    int nstreams;
    struct event_base *base;
    struct lt_slot *slots;
    struct lt_stats *st;
    struct lt_answers *ans;
    struct lt_load_summary *sum;
    struct lt_rand rng;
    char admin_path[PATH_MAX_LEN];
    char auth[LT_TOKEN_MAX + 16];
    uint64_t t0_us, warmup_us, deadline_us;
    uint64_t next_seq;
    int inflight;
    int pausing;
    int stop_issuing;
    struct event *tick, *end_timer, *sig_int, *sig_term;
    struct lt_admin admin;
    struct lt_buyers *buyers; /* NULL: no secret (raw mode against the ceiling) */
    struct lt_redis redis;
    int have_redis;
    int tty;
    uint64_t last_progress_us, last_progress_done;
    uint64_t last_answer_us;
};

/* User + system CPU seconds of this process so far. */
static double cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

uint64_t lt_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * US_PER_S + (uint64_t)ts.tv_nsec / 1000u;
}

int64_t lt_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * (int64_t)US_PER_S + ts.tv_nsec / 1000;
}

/* ---- answers ------------------------------------------------------------ */

/* Parses a JSON body (NUL-terminated copy).  NULL when it is not JSON. */
static json_t *body_json(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n == 0 || n > MAX_BODY_BYTES)
        return NULL;
    unsigned char *p = evbuffer_pullup(in, (ev_ssize_t)n);
    return p ? json_loadb((const char *)p, n, 0, NULL) : NULL;
}

/* The order an answer names: its id (0 when the body names none) and what the
 * answer promised about it. */
struct lt_named {
    int64_t id;
    enum lt_promise promise;
};

/* Reads "order_id" and "replayed" of an answer's body into n.  Returns the
 * parsed body (caller decrefs) or NULL when it is not JSON. */
static json_t *order_body(struct evhttp_request *req, struct lt_named *n, int *replayed)
{
    json_t *j = body_json(req);
    json_t *id = j ? json_object_get(j, "order_id") : NULL;
    n->id = json_is_integer(id) ? (int64_t)json_integer_value(id) : 0;
    *replayed = json_is_true(j ? json_object_get(j, "replayed") : NULL);
    return j;
}

/* Classifies the answer; for one naming an order also the order. */
static enum lt_answer classify(struct lt_slot *s, struct evhttp_request *req, struct lt_named *n)
{
    n->id = 0;
    n->promise = LT_PROMISE_PENDING;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    if (!req || code == 0)
        return s->failed && s->error == EVREQ_HTTP_TIMEOUT ? LT_ANS_TIMEOUT : LT_ANS_NET_ERROR;
    int replayed;
    switch (code) {
    case 201:
    case 202:
        json_decref(order_body(req, n, &replayed));
        n->promise = code == 201 ? LT_PROMISE_CONFIRMED : LT_PROMISE_PENDING;
        if (n->id <= 0)
            return LT_ANS_OTHER;
        return replayed ? LT_ANS_REPLAYED : code == 201 ? LT_ANS_CONFIRMED : LT_ANS_ACCEPTED;
    case 409: {
        json_t *j = order_body(req, n, &replayed);
        const char *e = j ? json_string_value(json_object_get(j, "error")) : NULL;
        enum lt_answer a = LT_ANS_CONFLICT;
        n->promise = LT_PROMISE_REJECTED;
        if (n->id > 0) /* reserved, then refused by the database: a rejected row */
            a = replayed ? LT_ANS_REPLAYED : LT_ANS_REJECTED;
        else if (e && strcmp(e, "sold_out") == 0)
            a = LT_ANS_SOLD_OUT;
        else if (e && strcmp(e, "limit_exceeded") == 0)
            a = LT_ANS_LIMIT;
        else if (e && strcmp(e, "sale_not_active") == 0)
            a = LT_ANS_NOT_ACTIVE;
        json_decref(j);
        return a;
    }
    case 422:
        return LT_ANS_IDEM_REUSED;
    case 400:
        return LT_ANS_BAD_REQUEST;
    case 404:
        return LT_ANS_NOT_FOUND;
    case 429: /* refused before anything was taken; a later try may pass */
        return LT_ANS_RATE_LIMITED;
    case 503: {
        /* One that names an Idempotency-Key says the outcome is unknown (Redis
         * went away, or stalled, after the reserve script was sent). */
        json_t *j = order_body(req, n, &replayed);
        int named = j && json_is_string(json_object_get(j, "idempotency_key"));
        json_decref(j);
        return named ? LT_ANS_UNCERTAIN : LT_ANS_UNAVAILABLE;
    }
    case 502:
    case 504:
        /* A load balancer's: the daemon it passed the request to died or
         * stalled before answering, so it may have taken the order: the
         * outcome is unknown, as when the connection breaks. */
        return LT_ANS_NET_ERROR;
    default:
        return LT_ANS_OTHER;
    }
}

/* Books one attempt's answer into the I4 record.  Returns 1 when the
 * logical request needs its retry now. */
/* The answers record of a request's SKU (NULL in raw mode). */
static struct lt_answers *ans_of(struct lt_load *ld, const struct lt_req *r)
{
    return ld->ans ? &ld->ans[r->sku] : NULL;
}

static int book(struct lt_load *ld, struct lt_req *r, enum lt_answer a, const struct lt_named *n)
{
    struct lt_answers *ans = ans_of(ld, r);
    if (lt_answer_settles(a))
        r->resolved = 1;
    if (lt_answer_is_unknown(a))
        r->open = 1;
    if (!ans)
        return 0;
    if (lt_answer_is_unexpected(a))
        ans->unexpected++;
    if (lt_answer_names_order(a) &&
        lt_answers_add(ans, n->id, r->user, r->qty, n->promise, lt_wall_us()) != 0) {
        fprintf(stderr, "seckill-loadtest: out of memory recording answers\n");
        abort();
    }
    if (r->attempt == 0) {
        r->first = a;
        r->first_id = n->id;
        if (r->retry)
            return 1;
    } else if (lt_answer_names_order(r->first)) {
        /* The key was remembered with the order: the retry must name it again
         * (a 503 or no answer says nothing about the key). */
        if (lt_answer_settles(a) && (!lt_answer_names_order(a) || n->id != r->first_id))
            ans->idem_mismatch++;
    }
    if (r->open && !r->resolved)
        lt_answers_unknown(ans, r->user);
    return 0;
}

/* ---- issuing ------------------------------------------------------------- */

static void send_attempt(struct lt_slot *s);
static void maybe_finish(struct lt_load *ld);

/* Draws the next logical request and sends it on slot s.  Returns 1 when one
 * was sent, 0 when the budget or the duration is used up. */
static int issue_next(struct lt_load *ld, struct lt_slot *s)
{
    const struct lt_opts *o = ld->o;
    if (ld->stop_issuing || ld->next_seq >= (uint64_t)o->requests)
        return 0;
    struct lt_req *r = &s->req;
    memset(r, 0, sizeof *r);
    r->seq = ld->next_seq++;
    if (ld->nskus > 1)
        r->sku = o->sku_pick == LT_SKU_ROUND_ROBIN ? (int)(r->seq % (uint64_t)ld->nskus)
                                                   : (int)lt_rand_range(&ld->rng, 0, ld->nskus - 1);
    r->user = o->pick == LT_PICK_SEQ
                  ? o->user_base + (int64_t)(r->seq % (uint64_t)o->users)
                  : lt_rand_range(&ld->rng, o->user_base, o->user_base + o->users - 1);
    r->qty = lt_dist_sample(&o->qty, &ld->rng);
    r->retry = o->retry_share > 0 && lt_rand_unit(&ld->rng) < o->retry_share;
    if (r->retry)
        snprintf(r->key, sizeof r->key, "lt-%" PRIu64 "-%" PRIu64, o->seed, r->seq);
    ld->sum->issued++;
    send_attempt(s);
    return 1;
}

static void on_error(enum evhttp_request_error e, void *arg)
{
    struct lt_slot *s = arg;
    s->failed = 1;
    s->error = e;
}

/* Goes on with slot s after an answer (and its pause): the retry of the same
 * request, else the next request, else maybe the end of the run. */
static void slot_continue(struct lt_slot *s)
{
    struct lt_load *ld = s->ld;
    int want_retry = s->want_retry;
    s->want_retry = 0;
    if (want_retry && !ld->stop_issuing) {
        s->req.attempt = 1;
        ld->sum->retries++;
        send_attempt(s);
        return;
    }
    if (want_retry && s->req.open && !s->req.resolved && ld->ans)
        /* its retry will not be sent: the outcome stays unknown */
        lt_answers_unknown(ans_of(ld, &s->req), s->req.user);
    if (issue_next(ld, s) != 0)
        return;
    maybe_finish(ld);
}

static void on_pause_end(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct lt_slot *s = arg;
    s->pausing = 0;
    s->ld->pausing--;
    slot_continue(s);
}

static void on_answer(struct evhttp_request *req, void *arg)
{
    struct lt_slot *s = arg;
    struct lt_load *ld = s->ld;
    uint64_t now = lt_now_us();
    struct lt_named named;
    enum lt_answer a = classify(s, req, &named);
    uint64_t t = now - ld->t0_us;
    lt_stats_record(ld->st, t, a, now - s->sent_us, now >= ld->t0_us + ld->warmup_us);
    ld->sum->answered++;
    ld->last_answer_us = now;
    if (lt_answer_names_order(a) && a != LT_ANS_REPLAYED) {
        int64_t w = lt_wall_us();
        if (!ld->sum->first_accept_wall_us)
            ld->sum->first_accept_wall_us = w;
        ld->sum->last_accept_wall_us = w;
    }
    s->busy = 0;
    ld->inflight--;
    s->want_retry = book(ld, &s->req, a, &named);
    /* A buyer without an answer does not hammer a service that is down. */
    if (!lt_answer_settles(a) && ld->o->error_pause_ms > 0 && !ld->stop_issuing) {
        struct timeval tv = rlock_ms_tv(ld->o->error_pause_ms);
        if (evtimer_add(s->pause, &tv) == 0) {
            s->pausing = 1;
            ld->pausing++;
            return;
        }
    }
    slot_continue(s);
}

static void send_attempt(struct lt_slot *s)
{
    struct lt_load *ld = s->ld;
    struct lt_req *r = &s->req;
    struct evhttp_request *req = evhttp_request_new(on_answer, s);
    if (!req) {
        fprintf(stderr, "seckill-loadtest: out of memory creating a request\n");
        abort();
    }
    evhttp_request_set_error_cb(req, on_error);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", ld->o->host);
    evhttp_add_header(h, "Content-Type", "application/json");
    if (r->retry)
        evhttp_add_header(h, "Idempotency-Key", r->key);
    /* The buyer is whom the token names; the body says only how many. */
    const char *auth = ld->buyers ? lt_buyers_auth(ld->buyers, r->user) : NULL;
    if (auth)
        evhttp_add_header(h, "Authorization", auth);
    char body[64];
    int n = snprintf(body, sizeof body, "{\"qty\":%" PRId64 "}", r->qty);
    evbuffer_add(evhttp_request_get_output_buffer(req), body, (size_t)n);
    s->busy = 1;
    s->failed = 0;
    ld->inflight++;
    s->sent_us = lt_now_us();
    char path[PATH_MAX_LEN];
    snprintf(path, sizeof path, "/api/v1/skus/%" PRId64 "/orders", ld->skus[r->sku]);
    if (evhttp_make_request(s->conn, req, EVHTTP_REQ_POST, path) != 0) {
        /* evhttp freed req and will not call back: count it as a failed attempt */
        s->busy = 0;
        ld->inflight--;
        lt_stats_record(ld->st, s->sent_us - ld->t0_us, LT_ANS_NET_ERROR, 0, 1);
        ld->sum->answered++;
        r->open = 1;
        if (ld->ans && !r->resolved)
            lt_answers_unknown(ans_of(ld, r), r->user);
        ld->stop_issuing = 1;
        maybe_finish(ld);
    }
}

/* ---- admin deltas ---------------------------------------------------------- */

static void on_admin_answer(struct evhttp_request *req, void *arg)
{
    struct lt_load *ld = arg;
    struct lt_admin *ad = &ld->admin;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    ad->busy = 0;
    if (ld->ans) {
        if (code == 200) {
            ld->ans->admin_applied += ad->delta;
            ld->ans->admin_ok++;
        } else if (code == 409) {
            ld->ans->admin_refused++;
        } else {
            ld->ans->admin_unknown++;
            ld->ans->admin_unknown_abs += ad->delta < 0 ? -ad->delta : ad->delta;
            if (code != 0 && code != 503)
                fprintf(stderr, "\nseckill-loadtest: admin delta answered %d\n", code);
        }
    }
    maybe_finish(ld);
}

static void fire_admin(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct lt_load *ld = arg;
    struct lt_admin *ad = &ld->admin;
    if (ad->busy || ld->stop_issuing || ad->fired >= ld->o->admin_deltas)
        return;
    int64_t mag = lt_rand_range(&ld->rng, 1, ld->o->admin_max_delta);
    ad->delta = (lt_rand_next(&ld->rng) & 1) ? mag : -mag;
    struct evhttp_request *req = evhttp_request_new(on_admin_answer, ld);
    if (!req)
        abort();
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", ld->o->admin.host);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Authorization", ld->auth);
    char body[128];
    int n = snprintf(body, sizeof body, "{\"delta\":%" PRId64 ",\"reason\":\"%s %" PRId64 "\"}",
                     ad->delta, ADMIN_REASON, ad->fired + 1);
    evbuffer_add(evhttp_request_get_output_buffer(req), body, (size_t)n);
    ad->fired++;
    ad->busy = 1;
    if (evhttp_make_request(ad->conn, req, EVHTTP_REQ_POST, ld->admin_path) != 0) {
        ad->busy = 0;
        if (ld->ans) {
            ld->ans->admin_unknown++;
            ld->ans->admin_unknown_abs += mag;
        }
    }
}

/* ---- progress, queue, end -------------------------------------------------- */

/* Entries in the order streams (ld->streams) together, -1 when Redis
 * did not answer.  Sampled every tick (TICK_MS): queue_max is the largest
 * sample, not the exact peak between two. */
static int64_t queue_len(struct lt_load *ld)
{
    if (!ld->have_redis)
        return -1;
    int64_t total = 0;
    for (int i = 0; i < ld->nstreams; i++) {
        char key[KEYS_MAX];
        keys_sku(key, ld->streams[i], KEY_STREAM);
        const char *argv[] = {"XLEN", key};
        redisReply *r = lt_redis_cmd(&ld->redis, 2, argv);
        int64_t n = r && r->type == REDIS_REPLY_INTEGER ? (int64_t)r->integer : -1;
        if (r)
            freeReplyObject(r);
        if (n < 0)
            return -1;
        total += n;
    }
    return total;
}

static void print_progress(struct lt_load *ld, uint64_t now, int64_t queue, int final)
{
    const struct lt_stats *st = ld->st;
    uint64_t done = lt_stats_total(st, 1);
    double dt = (double)(now - ld->last_progress_us) / (double)US_PER_S;
    double rate = dt > 0 ? (double)(done - ld->last_progress_done) / dt : 0;
    uint64_t unknown = 0, other = 0, refused = 0;
    for (int a = 0; a < LT_ANS_COUNT; a++) {
        if (lt_answer_is_unknown(a))
            unknown += st->all[a];
        else if (a == LT_ANS_SOLD_OUT || a == LT_ANS_LIMIT || a == LT_ANS_NOT_ACTIVE)
            refused += st->all[a];
        else if (!lt_answer_names_order(a) && a != LT_ANS_UNAVAILABLE && a != LT_ANS_RATE_LIMITED)
            other += st->all[a];
    }
    /* p99 so far (answers after the warm-up) */
    uint64_t p99 = 0;
    if (st->lat.count)
        p99 = lt_hist_percentile(&st->lat, 99.0);
    char q[32] = "";
    if (queue >= 0)
        snprintf(q, sizeof q, "  queue %" PRId64, queue);
    fprintf(stderr,
            "%s[%6.1fs] %9" PRIu64 " done %8.0f/s | 201 %" PRIu64 "  202 %" PRIu64
            "  409+id %" PRIu64 "  replayed %" PRIu64 "  409 %" PRIu64 "  429 %" PRIu64
            "  503 %" PRIu64 "  unknown %" PRIu64 "  other %" PRIu64
            " | p99 %.2f ms | in flight %d%s%s",
            ld->tty ? "\r\033[K" : "", (double)(now - ld->t0_us) / (double)US_PER_S, done, rate,
            st->all[LT_ANS_CONFIRMED], st->all[LT_ANS_ACCEPTED], st->all[LT_ANS_REJECTED],
            st->all[LT_ANS_REPLAYED], refused, st->all[LT_ANS_RATE_LIMITED],
            st->all[LT_ANS_UNAVAILABLE], unknown, other, (double)p99 / 1000.0, ld->inflight, q,
            ld->tty && !final ? "" : "\n");
    fflush(stderr);
    ld->last_progress_us = now;
    ld->last_progress_done = done;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct lt_load *ld = arg;
    uint64_t now = lt_now_us();
    if (!ld->stop_issuing && now >= ld->deadline_us) {
        ld->stop_issuing = 1; /* duration reached: let the in-flight ones finish */
        maybe_finish(ld);
    }
    int64_t q = queue_len(ld);
    if (q >= 0)
        lt_stats_queue(ld->st, now - ld->t0_us, q);
    if (ld->o->progress_ms > 0 &&
        now - ld->last_progress_us >= (uint64_t)ld->o->progress_ms * US_PER_MS)
        print_progress(ld, now, q, 0);
}

static void maybe_finish(struct lt_load *ld)
{
    int buyers_done = ld->inflight == 0 && ld->pausing == 0 &&
                      (ld->stop_issuing || ld->next_seq >= (uint64_t)ld->o->requests);
    if (buyers_done)
        ld->stop_issuing = 1; /* no more admin deltas either */
    if (buyers_done && !ld->admin.busy)
        event_base_loopbreak(ld->base);
}

static void on_end(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct lt_load *ld = arg;
    fprintf(stderr,
            "\nseckill-loadtest: %d requests still open at the hard end; counted as "
            "unknown\n",
            ld->inflight);
    event_base_loopbreak(ld->base);
}

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct lt_load *ld = arg;
    if (ld->stop_issuing) {
        event_base_loopbreak(ld->base);
        return;
    }
    fprintf(stderr,
            "\nseckill-loadtest: signal %d: finishing the requests in flight (again to "
            "stop now)\n",
            (int)fd);
    ld->stop_issuing = 1;
    ld->sum->interrupted = 1;
    maybe_finish(ld);
}

/* ---- set-up ---------------------------------------------------------------- */

static int setup(struct lt_load *ld, char *err, size_t errlen)
{
    const struct lt_opts *o = ld->o;
    ld->base = event_base_new();
    if (!ld->base) {
        snprintf(err, errlen, "cannot create an event loop");
        return -1;
    }
    ld->slots = calloc((size_t)o->concurrency, sizeof *ld->slots);
    if (!ld->slots) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    struct timeval to = rlock_ms_tv(o->timeout_ms);
    for (int i = 0; i < o->concurrency; i++) {
        struct lt_slot *s = &ld->slots[i];
        s->ld = ld;
        const struct lt_target *t = &o->targets[i % o->ntargets]; /* load split evenly */
        s->conn = evhttp_connection_base_new(ld->base, NULL, t->host, (ev_uint16_t)t->port);
        s->pause = evtimer_new(ld->base, on_pause_end, s);
        if (!s->conn || !s->pause) {
            snprintf(err, errlen, "cannot create connection %d", i);
            return -1;
        }
        if (o->source_addrs > 1) { /* a crowd comes from many addresses */
            char src[24];
            snprintf(src, sizeof src, "127.0.0.%d", 1 + i % o->source_addrs);
            evhttp_connection_set_local_address(s->conn, src);
        }
        evhttp_connection_set_timeout_tv(s->conn, &to);
        evhttp_connection_set_retries(s->conn, 0);
        evhttp_connection_set_max_body_size(s->conn, MAX_BODY_BYTES);
    }
    if (o->admin_deltas > 0) {
        ld->admin.conn =
            evhttp_connection_base_new(ld->base, NULL, o->admin.host, (ev_uint16_t)o->admin.port);
        ld->admin.timer = event_new(ld->base, -1, EV_PERSIST, fire_admin, ld);
        struct timeval every = rlock_ms_tv(o->admin_every_ms);
        if (!ld->admin.conn || !ld->admin.timer || event_add(ld->admin.timer, &every) != 0) {
            snprintf(err, errlen, "cannot set up the admin connection");
            return -1;
        }
        evhttp_connection_set_timeout_tv(ld->admin.conn, &to);
    }
    struct timeval tick = rlock_ms_tv(TICK_MS);
    struct timeval end = rlock_ms_tv((int)(o->duration_s * 1000.0) + o->timeout_ms + END_GRACE_MS);
    ld->tick = event_new(ld->base, -1, EV_PERSIST, on_tick, ld);
    ld->end_timer = evtimer_new(ld->base, on_end, ld);
    ld->sig_int = evsignal_new(ld->base, SIGINT, on_signal, ld);
    ld->sig_term = evsignal_new(ld->base, SIGTERM, on_signal, ld);
    if (!ld->tick || !ld->end_timer || !ld->sig_int || !ld->sig_term ||
        event_add(ld->tick, &tick) != 0 || event_add(ld->end_timer, &end) != 0 ||
        event_add(ld->sig_int, NULL) != 0 || event_add(ld->sig_term, NULL) != 0) {
        snprintf(err, errlen, "cannot set up timers");
        return -1;
    }
    if (o->mode != LT_MODE_RAW) {
        char rerr[160];
        ld->have_redis =
            lt_redis_init(&ld->redis, o->redis_url, REDIS_TIMEOUT_MS, rerr, sizeof rerr) == 0;
    }
    return 0;
}

static void teardown(struct lt_load *ld)
{
    if (ld->slots) {
        for (int i = 0; i < ld->o->concurrency; i++) {
            if (ld->slots[i].conn)
                evhttp_connection_free(ld->slots[i].conn);
            if (ld->slots[i].pause)
                event_free(ld->slots[i].pause);
        }
        free(ld->slots);
    }
    if (ld->admin.conn)
        evhttp_connection_free(ld->admin.conn);
    if (ld->admin.timer)
        event_free(ld->admin.timer);
    if (ld->tick)
        event_free(ld->tick);
    if (ld->end_timer)
        event_free(ld->end_timer);
    if (ld->sig_int)
        event_free(ld->sig_int);
    if (ld->sig_term)
        event_free(ld->sig_term);
    if (ld->have_redis)
        lt_redis_close(&ld->redis);
    lt_buyers_free(ld->buyers);
    if (ld->base)
        event_base_free(ld->base);
}

int lt_load_run(const struct lt_opts *o, const int64_t *skus, int nskus, const int64_t *streams,
                int nstreams, struct lt_stats *st, struct lt_answers *ans,
                struct lt_load_summary *sum, char *err, size_t errlen)
{
    struct lt_load ld;
    memset(&ld, 0, sizeof ld);
    memset(sum, 0, sizeof *sum);
    ld.o = o;
    ld.skus = skus;
    ld.nskus = nskus;
    ld.streams = streams ? streams : skus;
    ld.nstreams = streams ? nstreams : nskus;
    ld.st = st;
    ld.ans = ans;
    ld.sum = sum;
    ld.tty = isatty(STDERR_FILENO);
    lt_rand_seed(&ld.rng, o->seed);
    snprintf(ld.admin_path, sizeof ld.admin_path, "/admin/v1/skus/%" PRId64 "/stock-adjustments",
             skus[0]); /* admin deltas: one SKU only (lt_opts) */
    snprintf(ld.auth, sizeof ld.auth, "Bearer %s", o->token);
    ld.buyers = lt_buyers_new(o->buyer_secret, o->user_base, o->users, TOKEN_TTL_S);
    int rc = -1;
    if (setup(&ld, err, errlen) != 0)
        goto out;

    ld.t0_us = lt_now_us();
    ld.warmup_us = (uint64_t)(o->warmup_s * (double)US_PER_S);
    ld.deadline_us = ld.t0_us + (uint64_t)(o->duration_s * (double)US_PER_S);
    ld.last_progress_us = ld.t0_us;
    sum->wall_start_us = lt_wall_us();
    double cpu0 = cpu_seconds();
    /* Prime every connection with its first request (the budget permitting). */
    for (int i = 0; i < o->concurrency; i++)
        if (issue_next(&ld, &ld.slots[i]) == 0)
            break;
    maybe_finish(&ld);
    event_base_dispatch(ld.base);

    /* Anything still open after the hard end never got an answer. */
    for (int i = 0; i < o->concurrency; i++) {
        struct lt_slot *s = &ld.slots[i];
        if (s->pausing && s->want_retry && s->req.open && !s->req.resolved && ans)
            /* paused before a retry that will not be sent */
            lt_answers_unknown(&ans[s->req.sku], s->req.user);
        if (!s->busy)
            continue;
        lt_stats_record(st, lt_now_us() - ld.t0_us, LT_ANS_TIMEOUT, lt_now_us() - s->sent_us, 1);
        sum->answered++;
        if (ans && !s->req.resolved)
            lt_answers_unknown(&ans[s->req.sku], s->req.user);
        s->busy = 0;
    }
    if (ld.admin.busy && ans) {
        ans->admin_unknown++;
        ans->admin_unknown_abs += ld.admin.delta < 0 ? -ld.admin.delta : ld.admin.delta;
    }
    sum->cpu_s = cpu_seconds() - cpu0;
    uint64_t end = ld.last_answer_us ? ld.last_answer_us : lt_now_us();
    sum->wall_end_us = sum->wall_start_us + (int64_t)(end - ld.t0_us);
    sum->elapsed_s = (double)(end - ld.t0_us) / (double)US_PER_S;
    sum->measured_s = sum->elapsed_s - o->warmup_s;
    if (sum->measured_s < 0)
        sum->measured_s = 0;
    if (o->progress_ms > 0)
        print_progress(&ld, lt_now_us(), queue_len(&ld), 1);
    rc = 0;
out:
    teardown(&ld);
    return rc;
}
