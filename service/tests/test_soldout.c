/*
 * The sold-out flag (order/soldout.c): the table alone, with chosen times
 * (pure), then the daemon against the real Redis and PostgreSQL: a sold-out
 * storm answered without reserve scripts, stock that comes back sold again
 * on two instances within 100 ms, a buyer's own Idempotency-Key still
 * answered from Redis, a sold_out with units left setting nothing, and
 * sold_out_flag_ms = 0 turning it off.
 *
 * No assertion depends on speed: the re-open bound is counted in time slept
 * (real time is never less), and the default window (50 ms) is half of it.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "harness.h"
#include "order/soldout.h"

#define W 50 /* the window of the pure tests, ms */
#define CT_JSON "Content-Type: application/json\r\n"
#define REOPEN_SLEEP_MS 100 /* the bound, counted in sleep only */
#define POLL_MS 5
#define FLAG_WAIT_MS 10000 /* a storm shows flags on both instances within this */

/* ---- the table, pure ------------------------------------------------------ */

static enum soldout_check look(struct soldout *t, int64_t sku, int64_t now, int64_t *claim)
{
    int64_t unused;
    return soldout_check(t, sku, now, W, claim ? claim : &unused);
}

START_TEST(test_flag_holds_for_the_window_from_the_send_time)
{
    struct soldout *t = soldout_new();
    ck_assert_int_eq(look(t, 7, 1000, NULL), SOLDOUT_ASK); /* nothing known */
    soldout_note(t, 7, SOLDOUT_NEWS_EMPTY, 1000, W, 0);    /* sent at 1000, answered later */
    for (int64_t now = 1000; now < 1000 + W / 2; now++)
        ck_assert_int_eq(look(t, 7, now, NULL), SOLDOUT_FLAGGED);
    ck_assert_int_eq(look(t, 8, 1001, NULL), SOLDOUT_ASK); /* another SKU */
    /* never trusted at or past sent + window, probe or not */
    ck_assert_int_eq(look(t, 7, 1000 + W, NULL), SOLDOUT_ASK);
    ck_assert_int_eq(look(t, 7, 1000 + 10 * W, NULL), SOLDOUT_ASK);
    /* an earlier verdict arriving late does not shorten it, nor lengthen it */
    soldout_note(t, 7, SOLDOUT_NEWS_EMPTY, 990, W, 0);
    ck_assert_int_eq(look(t, 7, 1000 + W - 1, NULL) == SOLDOUT_ASK, 0);
    ck_assert_int_eq(look(t, 7, 1000 + W, NULL), SOLDOUT_ASK);
    soldout_free(t);
}
END_TEST

START_TEST(test_one_probe_per_half_window_rearms_or_clears)
{
    struct soldout *t = soldout_new();
    soldout_note(t, 7, SOLDOUT_NEWS_EMPTY, 1000, W, 0); /* trusted until 1050 */
    int64_t c1, c2;
    ck_assert_int_eq(look(t, 7, 1000 + W / 2, &c1), SOLDOUT_PROBE);
    ck_assert(c1 != 0);
    /* while it is in flight, everyone else is answered here */
    for (int64_t now = 1000 + W / 2; now < 1000 + W; now++) {
        ck_assert_int_eq(look(t, 7, now, &c2), SOLDOUT_FLAGGED);
        ck_assert(c2 == 0);
    }
    /* still sold out: re-armed from the probe's send time, until 1075 */
    soldout_note(t, 7, SOLDOUT_NEWS_EMPTY, 1000 + W / 2, W, c1);
    ck_assert_int_eq(look(t, 7, 1000 + W - 1, NULL), SOLDOUT_FLAGGED);
    ck_assert_int_eq(look(t, 7, 1000 + W + 10, &c1), SOLDOUT_PROBE); /* past the first 1050 */
    /* stock again: cleared, every request asks Redis */
    soldout_note(t, 7, SOLDOUT_NEWS_OPEN, 1000 + W + 10, W, c1);
    ck_assert_int_eq(look(t, 7, 1000 + W + 11, NULL), SOLDOUT_ASK);
    ck_assert_int_eq(look(t, 7, 1000 + W + 12, NULL), SOLDOUT_ASK);
    soldout_free(t);
}
END_TEST

START_TEST(test_a_probe_that_learns_nothing_or_never_answers_gives_way)
{
    struct soldout *t = soldout_new();
    const int64_t w = 100; /* half: 50 */
    int64_t c;
    soldout_note(t, 7, SOLDOUT_NEWS_EMPTY, 1000, w, 0); /* until 1100, probes from 1050 */
    ck_assert_int_eq(soldout_check(t, 7, 1050, w, &c), SOLDOUT_PROBE);
    soldout_note(t, 7, SOLDOUT_NEWS_NONE, 1050, w, c);                 /* the buyer's limit, say */
    ck_assert_int_eq(soldout_check(t, 7, 1051, w, &c), SOLDOUT_PROBE); /* the next one asks */
    /* this one never answers; another request's verdict re-arms until 1140 */
    soldout_note(t, 7, SOLDOUT_NEWS_EMPTY, 1040, w, 0);
    ck_assert_int_eq(soldout_check(t, 7, 1095, w, &c), SOLDOUT_FLAGGED); /* claim in flight */
    ck_assert_int_eq(soldout_check(t, 7, 1101, w, &c), SOLDOUT_PROBE);   /* claim lost */
    soldout_free(t);
}
END_TEST

START_TEST(test_zero_window_turns_it_off_and_clear_clears)
{
    struct soldout *t = soldout_new();
    int64_t c;
    soldout_note(t, 7, SOLDOUT_NEWS_EMPTY, 1000, 0, 0);
    ck_assert_int_eq(soldout_check(t, 7, 1000, 0, &c), SOLDOUT_ASK);
    ck_assert_int_eq(look(t, 7, 1000, NULL), SOLDOUT_ASK); /* nothing was recorded */
    soldout_note(t, 7, SOLDOUT_NEWS_EMPTY, 1000, W, 0);
    ck_assert_int_eq(soldout_check(t, 7, 1001, 0, &c), SOLDOUT_ASK);
    ck_assert_int_eq(look(t, 7, 1001, NULL), SOLDOUT_FLAGGED);
    soldout_clear(t, 8); /* another SKU's clear leaves it */
    ck_assert_int_eq(look(t, 7, 1001, NULL), SOLDOUT_FLAGGED);
    soldout_clear(t, 7);
    ck_assert_int_eq(look(t, 7, 1001, NULL), SOLDOUT_ASK);
    soldout_free(t);
}
END_TEST

/* Two SKUs on one slot: found by trying, since the hash is the module's. */
static int64_t colliding_with(struct soldout *t, int64_t a)
{
    for (int64_t b = a + 1; b < a + 1000000; b++) {
        soldout_note(t, a, SOLDOUT_NEWS_EMPTY, 1000, W, 0);
        soldout_note(t, b, SOLDOUT_NEWS_EMPTY, 1000, W, 0);
        if (look(t, a, 1001, NULL) == SOLDOUT_ASK)
            return b;
        soldout_clear(t, b);
    }
    ck_abort_msg("no SKU shares a slot with %lld", (long long)a);
    return 0;
}

START_TEST(test_a_collision_costs_a_flag_never_a_false_one)
{
    struct soldout *t = soldout_new();
    int64_t b = colliding_with(t, 1);
    ck_assert_int_eq(look(t, b, 1001, NULL), SOLDOUT_FLAGGED);
    ck_assert_int_eq(look(t, 1, 1001, NULL), SOLDOUT_ASK);
    /* clearing the evicted SKU leaves the other one's flag */
    soldout_clear(t, 1);
    ck_assert_int_eq(look(t, b, 1001, NULL), SOLDOUT_FLAGGED);
    /* SKUs never flagged are never answered here */
    for (int64_t s = 1000000000; s < 1000000000 + 20000; s++)
        ck_assert_int_eq(look(t, s, 1001, NULL), SOLDOUT_ASK);
    soldout_free(t);
}
END_TEST

static void collect(int64_t sku, void *arg)
{
    int64_t *sum = arg;
    *sum += sku;
}

START_TEST(test_each_lists_the_skus_flagged_now)
{
    struct soldout *t = soldout_new();
    soldout_note(t, 3, SOLDOUT_NEWS_EMPTY, 1000, W, 0);
    soldout_note(t, 40, SOLDOUT_NEWS_EMPTY, 1000, W, 0);
    soldout_note(t, 500, SOLDOUT_NEWS_EMPTY, 1010, W, 0);
    int64_t sum = 0;
    ck_assert_int_eq(soldout_each(t, 1020, collect, &sum), 3);
    ck_assert_int_eq(sum, 543);
    sum = 0;
    ck_assert_int_eq(soldout_each(t, 1000 + W, collect, &sum), 1); /* 3 and 40 have expired */
    ck_assert_int_eq(sum, 500);
    soldout_free(t);
}
END_TEST

static const redisReply *fake_int(redisReply *arr, redisReply **el, redisReply *word,
                                  redisReply *num, const char *w, long long n)
{
    *word = (redisReply){.type = REDIS_REPLY_STRING, .str = (char *)w, .len = strlen(w)};
    *num = (redisReply){.type = REDIS_REPLY_INTEGER, .integer = n};
    el[0] = word;
    el[1] = num;
    *arr = (redisReply){.type = REDIS_REPLY_ARRAY, .elements = 2, .element = el};
    return arr;
}

START_TEST(test_only_none_left_sets_the_flag)
{
    redisReply arr, word, num, *el[2];
    struct order_reply rep;
    order_parse_reply(fake_int(&arr, el, &word, &num, "sold_out", 0), &rep);
    ck_assert_int_eq(soldout_news_of(&rep), SOLDOUT_NEWS_EMPTY);
    order_parse_reply(fake_int(&arr, el, &word, &num, "sold_out", 2), &rep); /* qty 3, 2 left */
    ck_assert_int_eq(soldout_news_of(&rep), SOLDOUT_NEWS_OPEN);
    order_parse_reply(fake_int(&arr, el, &word, &num, "limit_exceeded", 1), &rep);
    ck_assert_int_eq(soldout_news_of(&rep), SOLDOUT_NEWS_NONE);
    order_parse_reply(fake_int(&arr, el, &word, &num, "rate_limited", 100), &rep);
    ck_assert_int_eq(soldout_news_of(&rep), SOLDOUT_NEWS_NONE);
    ck_assert_int_eq(soldout_news_of(NULL), SOLDOUT_NEWS_NONE);
    rep = (struct order_reply){.result = ORDER_SOLD_OUT, .replayed = 1, .remaining = -1};
    ck_assert_int_eq(soldout_news_of(&rep), SOLDOUT_NEWS_NONE); /* an earlier answer */
    rep = (struct order_reply){.result = ORDER_PENDING, .remaining = -1};
    ck_assert_int_eq(soldout_news_of(&rep), SOLDOUT_NEWS_OPEN);
    rep = (struct order_reply){.result = ORDER_SALE_NOT_ACTIVE, .remaining = -1};
    ck_assert_int_eq(soldout_news_of(&rep), SOLDOUT_NEWS_OPEN);
    rep = (struct order_reply){.result = ORDER_SKU_NOT_LOADED, .remaining = -1};
    ck_assert_int_eq(soldout_news_of(&rep), SOLDOUT_NEWS_OPEN);
}
END_TEST

/* Writers flip one slot between two SKUs: A trusted far ahead, B already
 * expired.  A reader mixing A's expiry with B's id would answer B here. */
struct race {
    struct soldout *t;
    int64_t a, b;
    atomic_int stop;
    atomic_long false_flags, checks;
};

static void *race_writer(void *arg)
{
    struct race *r = arg;
    for (long i = 0; !atomic_load(&r->stop); i++) {
        soldout_note(r->t, r->a, SOLDOUT_NEWS_EMPTY, 1000000000, W, 0);
        soldout_note(r->t, r->b, SOLDOUT_NEWS_EMPTY, 10, W, 0);
        if (i % 7 == 0)
            soldout_clear(r->t, r->a);
    }
    return NULL;
}

static void *race_reader(void *arg)
{
    struct race *r = arg;
    for (int i = 0; i < 500000; i++) {
        int64_t c;
        if (soldout_check(r->t, r->b, 5000, W, &c) != SOLDOUT_ASK)
            atomic_fetch_add(&r->false_flags, 1);
        atomic_fetch_add(&r->checks, 1);
    }
    return NULL;
}

START_TEST(test_threads_never_see_a_torn_slot)
{
    struct race r = {.t = soldout_new(), .a = 1};
    r.b = colliding_with(r.t, r.a);
    pthread_t w[2], rd[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&w[i], NULL, race_writer, &r), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&rd[i], NULL, race_reader, &r), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(rd[i], NULL);
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i], NULL);
    ck_assert_int_eq(atomic_load(&r.checks), 1000000);
    ck_assert_int_eq(atomic_load(&r.false_flags), 0);
    soldout_free(r.t);
}
END_TEST

/* ---- the daemon ----------------------------------------------------------- */

/* POST an order; returns the status, or -1 on a connection error (no
 * assertion: the storm thread uses it too). */
static int try_order(int port, long long sku, long long user, long long qty, const char *idem,
                     struct th_response *r)
{
    char path[64], body[64], auth[TH_BUYER_AUTH_MAX], headers[TH_BUYER_AUTH_MAX + 256];
    snprintf(path, sizeof path, "/api/v1/skus/%lld/orders", sku);
    snprintf(body, sizeof body, "{\"qty\":%lld}", qty);
    snprintf(headers, sizeof headers, CT_JSON "%s%s%s%s", th_buyer_auth(user, auth, sizeof auth),
             idem ? "Idempotency-Key: " : "", idem ? idem : "", idem ? "\r\n" : "");
    if (th_http(port, "POST", path, headers, body, r) != 0)
        return -1;
    return r->status;
}

static int order(int port, long long sku, long long user, long long qty, const char *idem,
                 struct th_response *r)
{
    int st = try_order(port, sku, user, qty, idem, r);
    ck_assert_msg(st > 0, "no answer to an order on port %d", port);
    return st;
}

static void assert_sold_out(const struct th_response *r)
{
    char code[32];
    th_json_str(r->body, "error", code, sizeof code);
    ck_assert_msg(r->status == 409 && strcmp(code, "sold_out") == 0 &&
                      th_json_int(r->body, "order_id", -1) == -1,
                  "expected a plain 409 sold_out, got %d %s", r->status, r->body);
}

#define LOCAL "seckill_orders_sold_out_local_total"

/* Scripts Redis has run (functions, and EVALSHA/EVAL of plain scripts), all
 * clients. */
static long long scripts_run(void)
{
    redisContext *a = th_redis_admin();
    redisReply *rep = redisCommand(a, "INFO commandstats");
    ck_assert(rep && rep->type == REDIS_REPLY_STRING);
    long long n = 0;
    const char *names[] = {"cmdstat_fcall:calls=", "cmdstat_fcall_ro:calls=",
                           "cmdstat_evalsha:calls=", "cmdstat_eval:calls="};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *p = strstr(rep->str, names[i]);
        if (p)
            n += atoll(p + strlen(names[i]));
    }
    freeReplyObject(rep);
    redisFree(a);
    return n;
}

static void adjust(int port, long long sku, long long delta)
{
    char path[80], body[80];
    snprintf(path, sizeof path, "/admin/v1/skus/%lld/stock-adjustments", sku);
    snprintf(body, sizeof body, "{\"delta\":%lld,\"reason\":\"restock\"}", delta);
    struct th_response r;
    ck_assert_int_eq(th_admin(port, "POST", path, body, &r), 0);
    ck_assert_msg(r.status == 200, "adjust: %d %s", r.status, r.body);
}

/* Sells sku out on port: 'stock' orders of one unit, then one refused. */
static void sell_out(int port, long long sku, int stock)
{
    struct th_response r;
    for (int i = 0; i < stock; i++)
        ck_assert_int_eq(order(port, sku, 1 + i, 1, NULL, &r), 201);
    order(port, sku, 100000, 1, NULL, &r);
    assert_sold_out(&r);
}

START_TEST(test_a_sold_out_storm_runs_no_scripts)
{
    th_reset();
    const char *env[] = {"SECKILL_SOLD_OUT_FLAG_MS=10000", "SECKILL_RECONCILE_INTERVAL_MS=600000",
                         NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 1, 2, 100);
    struct th_response fresh, r;
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(order(d.port, 1, 1 + i, 1, NULL, &r), 201);
    order(d.port, 1, 3, 1, NULL, &fresh); /* Redis says: none left */
    assert_sold_out(&fresh);
    th_wait_drained(1, 15000);
    long long before = scripts_run(), sold = th_metric(d.port, "seckill_orders_sold_out_total");
    for (int i = 0; i < 200; i++) {
        order(d.port, 1, 1000 + i, 1, NULL, &r);
        assert_sold_out(&r);
        ck_assert_str_eq(r.body, fresh.body); /* clients see no difference */
    }
    long long ran = scripts_run() - before;
    /* the writer's and reconciler's own scripts may run meanwhile: a few */
    ck_assert_msg(ran < 20, "200 sold-out answers ran %lld scripts", ran);
    ck_assert_int_eq(th_metric(d.port, LOCAL), 200);
    ck_assert_int_eq(th_metric(d.port, "seckill_orders_sold_out_total") - sold, 200);
    /* answers the flag never stands for are unchanged */
    ck_assert_int_eq(order(d.port, 999, 1, 1, NULL, &r), 404);
    th_assert_invariants(1);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_off_every_request_reaches_redis)
{
    th_reset();
    const char *env[] = {"SECKILL_SOLD_OUT_FLAG_MS=0", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 6, 1, 100);
    sell_out(d.port, 6, 1);
    long long before = scripts_run();
    struct th_response r;
    for (int i = 0; i < 50; i++) {
        order(d.port, 6, 1000 + i, 1, NULL, &r);
        assert_sold_out(&r);
    }
    ck_assert_int_ge(scripts_run() - before, 50);
    ck_assert_int_eq(th_metric(d.port, LOCAL), 0);
    th_daemon_stop(&d);
}
END_TEST

/* A storm of orders too big for what comes back (10 units against a restock
 * of 5) keeps both instances' flags armed until the restock, and takes none
 * of it. */
struct storm {
    int ports[2];
    long long sku;
    atomic_int stop;
    atomic_long sent;
};

static void *storm_run(void *arg)
{
    struct storm *s = arg;
    struct th_response r;
    for (long i = 0; !atomic_load(&s->stop); i++) {
        try_order(s->ports[i % 2], s->sku, 50000 + i % 1000, 10, NULL, &r);
        atomic_fetch_add(&s->sent, 1);
    }
    return NULL;
}

/* Orders one unit on port until one is accepted, sleeping at most
 * REOPEN_SLEEP_MS in all; returns the ms slept. */
static int reopened_within(int port, long long sku, long long user)
{
    int slept = 0;
    for (;;) {
        struct th_response r;
        int st = order(port, sku, user, 1, NULL, &r);
        if (st == 201 || st == 202)
            return slept;
        assert_sold_out(&r);
        ck_assert_msg(slept < REOPEN_SLEEP_MS,
                      "port %d: still sold out after %d ms of sleep since the restock", port,
                      slept);
        th_sleep_ms(POLL_MS);
        slept += POLL_MS;
    }
}

START_TEST(test_a_restock_reopens_on_every_instance_within_100ms)
{
    th_reset();
    struct th_daemon a, b; /* the default window */
    th_daemon_start(&a, NULL);
    th_daemon_start(&b, NULL);
    th_create_sku(a.port, 2, 1, 100);
    sell_out(a.port, 2, 1);
    struct storm s = {.ports = {a.port, b.port}, .sku = 2};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, storm_run, &s), 0);
    /* both instances answer from their flag before the restock */
    long long t0 = clock_mono_ms();
    while (th_metric(a.port, LOCAL) == 0 || th_metric(b.port, LOCAL) == 0) {
        ck_assert_msg(clock_mono_ms() - t0 < FLAG_WAIT_MS, "no flag on both instances");
        th_sleep_ms(POLL_MS);
    }
    adjust(a.port, 2, 5);
    int slept_b = reopened_within(b.port, 2, 7001); /* b was told nothing */
    int slept_a = reopened_within(a.port, 2, 7002);
    atomic_store(&s.stop, 1);
    pthread_join(th, NULL);
    ck_assert_int_gt(atomic_load(&s.sent), 0);
    fprintf(stderr, "restock: reopened after %d ms (b) and %d ms (a) of sleep\n", slept_b, slept_a);
    th_wait_drained(2, 15000);
    th_assert_invariants(2);
    th_daemon_stop(&b);
    th_daemon_stop(&a);
}
END_TEST

/* A unit given back on this instance (here an admin +1; a rejected order's
 * return clears the same way) is sold at once, with no wait at all. */
START_TEST(test_a_unit_given_back_here_is_sold_at_once)
{
    th_reset();
    const char *env[] = {"SECKILL_SOLD_OUT_FLAG_MS=10000", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 3, 1, 100);
    sell_out(d.port, 3, 1);
    struct th_response r;
    order(d.port, 3, 5000, 1, NULL, &r);
    assert_sold_out(&r);
    ck_assert_int_eq(th_metric(d.port, LOCAL), 1);
    adjust(d.port, 3, 1);
    ck_assert_int_eq(order(d.port, 3, 5001, 1, NULL, &r), 201);
    th_wait_drained(3, 15000);
    th_assert_invariants(3);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_a_retry_with_its_key_gets_its_order_not_sold_out)
{
    th_reset();
    const char *env[] = {"SECKILL_SOLD_OUT_FLAG_MS=10000", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 4, 1, 100);
    struct th_response first, r;
    ck_assert_int_eq(order(d.port, 4, 1, 1, "buy-4-1", &first), 201);
    order(d.port, 4, 2, 1, NULL, &r);
    assert_sold_out(&r);
    order(d.port, 4, 3, 1, NULL, &r);
    assert_sold_out(&r);
    ck_assert_int_eq(th_metric(d.port, LOCAL), 1); /* flagged */
    ck_assert_int_eq(order(d.port, 4, 1, 1, "buy-4-1", &r), 201);
    ck_assert_int_eq(th_json_int(r.body, "order_id", -1), th_json_int(first.body, "order_id", -2));
    ck_assert_msg(strstr(r.body, "\"replayed\":true"), "not a replay: %s", r.body);
    ck_assert_int_eq(th_metric(d.port, LOCAL), 1);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_sold_out_with_units_left_sets_no_flag)
{
    th_reset();
    const char *env[] = {"SECKILL_SOLD_OUT_FLAG_MS=10000", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 5, 3, 100);
    struct th_response r;
    order(d.port, 5, 1, 5, NULL, &r); /* 5 wanted, 3 left */
    assert_sold_out(&r);
    ck_assert_int_eq(order(d.port, 5, 2, 1, NULL, &r), 201);
    ck_assert_int_eq(th_metric(d.port, LOCAL), 0);
    th_wait_drained(5, 15000);
    th_assert_invariants(5);
    th_daemon_stop(&d);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("soldout");
    TCase *pure = tcase_create("table");
    tcase_add_test(pure, test_flag_holds_for_the_window_from_the_send_time);
    tcase_add_test(pure, test_one_probe_per_half_window_rearms_or_clears);
    tcase_add_test(pure, test_a_probe_that_learns_nothing_or_never_answers_gives_way);
    tcase_add_test(pure, test_zero_window_turns_it_off_and_clear_clears);
    tcase_add_test(pure, test_a_collision_costs_a_flag_never_a_false_one);
    tcase_add_test(pure, test_each_lists_the_skus_flagged_now);
    tcase_add_test(pure, test_only_none_left_sets_the_flag);
    tcase_add_test(pure, test_threads_never_see_a_torn_slot);
    suite_add_tcase(s, pure);
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_a_sold_out_storm_runs_no_scripts);
    tcase_add_test(tc, test_off_every_request_reaches_redis);
    tcase_add_test(tc, test_a_restock_reopens_on_every_instance_within_100ms);
    tcase_add_test(tc, test_a_unit_given_back_here_is_sold_at_once);
    tcase_add_test(tc, test_a_retry_with_its_key_gets_its_order_not_sold_out);
    tcase_add_test(tc, test_sold_out_with_units_left_sets_no_flag);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run(suite());
}
