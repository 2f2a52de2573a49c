/*
 * reserve.lua with several orders in one call (order_desk's batches): each
 * order is decided on its own, in order, as if it had come in a call of its
 * own right after the one before; an error refuses the whole call before its
 * first write; and a lone order through the daemon goes out in its own turn.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/embedded.h"
#include "core/keys.h"
#include "harness.h"
#include "order/order.h"
#include "store/redis_conn.h"

#define SKU 1

/* One order of a test batch. */
struct test_order {
    int64_t user, qty;
    const char *idem; /* an Idempotency-Key, or NULL */
};

/* Runs one reserve.lua call for orders o[0..n) on SKU with the per-minute
 * and burst limits of the buyer's bucket (0: none); the key of order i is
 * one the service made up when bit i of 'made_up' is set, else the buyer's.
 * out[i] gets order i's outcome.  Returns the raw reply (caller frees). */
static redisReply *reserve_keys(const struct test_order *o, int n, int64_t per_min, int64_t burst,
                                unsigned made_up, struct order_reply *out)
{
    struct cfg c;
    th_cfg(&c);
    struct redis_conn rc;
    char err[160];
    ck_assert_msg(redis_conn_init(&rc, &c, err, sizeof err) == 0, "%s", err);
    embedded_init();
    struct order_reserve_call call = {0};
    order_reserve_begin(&call, SKU, 86400, 600, INT64_MAX); /* buyers' keys, made-up keys */
    order_reserve_limit(&call, per_min, burst);
    for (int i = 0; i < n; i++)
        order_reserve_add(&call, o[i].user, o[i].qty, o[i].idem, o[i].idem && !(made_up >> i & 1u),
                          0, 1);
    order_reserve_argv(&call);
    redisReply *r =
        redis_conn_script(&rc, &script_reserve, call.nkeys, call.nargs, call.argv, NULL);
    ck_assert_ptr_nonnull(r);
    for (int i = 0; i < n; i++)
        order_parse_reply(order_reserve_reply_at(r, n, i), &out[i]);
    order_reserve_free(&call);
    redis_conn_close(&rc);
    cfg_free(&c);
    return r;
}

static redisReply *reserve_batch(const struct test_order *o, int n, int64_t per_min, int64_t burst,
                                 struct order_reply *out)
{
    return reserve_keys(o, n, per_min, burst, 0, out);
}

/* A fresh SKU with 'stock' units and a per-user limit. */
static void fresh_sku(int64_t stock, int limit)
{
    th_reset();
    struct cfg c;
    th_cfg(&c);
    th_sku_create_direct(&c, SKU, stock, limit, 0);
    cfg_free(&c);
}

START_TEST(test_batch_orders_same_buyer_limit_counts_earlier_member)
{
    fresh_sku(100, 2);
    struct test_order o[] = {{7, 1, NULL}, {7, 1, NULL}, {7, 1, NULL}, {8, 2, NULL}};
    struct order_reply out[4];
    freeReplyObject(reserve_batch(o, 4, 0, 0, out));
    ck_assert_int_eq(out[0].result, ORDER_PENDING);
    ck_assert_int_eq(out[1].result, ORDER_PENDING);
    ck_assert_int_eq(out[2].result, ORDER_LIMIT_EXCEEDED); /* the first two hold 2 */
    ck_assert_int_eq(out[3].result, ORDER_PENDING);        /* another buyer's own limit */
    ck_assert_int_eq(th_sku_int(SKU, KEY_STOCK), 96);
    ck_assert_int_eq(th_stream_len(SKU), 3);
    /* a later call sees what the batch left */
    struct test_order again = {7, 1, NULL};
    freeReplyObject(reserve_batch(&again, 1, 0, 0, out));
    ck_assert_int_eq(out[0].result, ORDER_LIMIT_EXCEEDED);
}
END_TEST

START_TEST(test_batch_same_idempotency_key_second_is_replay)
{
    fresh_sku(100, 5);
    struct test_order o[] = {{7, 1, "k1"}, {7, 1, "k1"}, {7, 2, "k1"}, {8, 1, "k1"}};
    struct order_reply out[4];
    freeReplyObject(reserve_batch(o, 4, 0, 0, out));
    ck_assert_int_eq(out[0].result, ORDER_PENDING);
    ck_assert(!out[0].replayed);
    /* the second sees the first's key: the same order, its entry included */
    ck_assert_int_eq(out[1].result, ORDER_PENDING);
    ck_assert(out[1].replayed);
    ck_assert_int_eq(out[1].d.order_id, out[0].d.order_id);
    ck_assert_str_eq(out[1].d.entry, out[0].d.entry);
    ck_assert(out[0].d.entry[0] != '\0');
    ck_assert_int_eq(out[2].result, ORDER_IDEM_MISMATCH); /* same key, another request */
    ck_assert_int_eq(out[3].result, ORDER_PENDING);       /* keys are per buyer */
    ck_assert(!out[3].replayed);
    ck_assert_int_eq(th_sku_int(SKU, KEY_STOCK), 98); /* taken once per buyer */
    ck_assert_int_eq(th_stream_len(SKU), 2);
    /* and a call after the batch replays it the same way */
    freeReplyObject(reserve_batch(o, 1, 0, 0, out));
    ck_assert(out[0].replayed);
    ck_assert_int_eq(th_sku_int(SKU, KEY_STOCK), 98);
}
END_TEST

START_TEST(test_batch_remembered_refusal_is_replayed_to_the_same_key)
{
    fresh_sku(1, 5);
    struct test_order o[] = {{7, 1, NULL}, {8, 1, "k"}, {8, 1, "k"}};
    struct order_reply out[3];
    freeReplyObject(reserve_batch(o, 3, 0, 0, out));
    ck_assert_int_eq(out[0].result, ORDER_PENDING);
    ck_assert_int_eq(out[1].result, ORDER_SOLD_OUT);
    ck_assert(!out[1].replayed);
    ck_assert_int_eq(out[2].result, ORDER_SOLD_OUT);
    ck_assert(out[2].replayed); /* the first's refusal, remembered under the key */
}
END_TEST

START_TEST(test_batch_stock_first_come_first_served)
{
    fresh_sku(3, 5);
    struct test_order o[] = {{1, 2, NULL}, {2, 2, NULL}, {3, 1, NULL}, {4, 1, NULL}};
    struct order_reply out[4];
    redisReply *r = reserve_batch(o, 4, 0, 0, out);
    ck_assert_int_eq(out[0].result, ORDER_PENDING);
    ck_assert_int_eq(out[1].result, ORDER_SOLD_OUT); /* 1 left: not enough for 2 */
    ck_assert_int_eq(out[1].remaining, 1);
    ck_assert_int_eq(out[2].result, ORDER_PENDING); /* a smaller order behind it fits */
    ck_assert_int_eq(out[3].result, ORDER_SOLD_OUT);
    ck_assert_int_eq(out[3].remaining, 0);
    ck_assert_int_eq(r->element[0]->element[2]->integer, 1); /* remaining after order 0 */
    ck_assert_int_eq(r->element[2]->element[2]->integer, 0);
    freeReplyObject(r);
    /* stream order is batch order, and ids follow it */
    ck_assert_int_lt(out[0].d.order_id, out[2].d.order_id);
    char key[KEYS_MAX];
    keys_sku(key, SKU, KEY_STREAM);
    redisContext *rc = th_redis();
    redisReply *x = redisCommand(rc, "XRANGE %s - +", key);
    ck_assert(x && x->type == REDIS_REPLY_ARRAY && x->elements == 2);
    ck_assert_str_eq(x->element[0]->element[0]->str, out[0].d.entry);
    ck_assert_str_eq(x->element[1]->element[0]->str, out[2].d.entry);
    freeReplyObject(x);
    redisFree(rc);
    ck_assert_int_eq(th_sku_int(SKU, KEY_STOCK), 0);
}
END_TEST

START_TEST(test_batch_rate_bucket_counts_earlier_member)
{
    fresh_sku(100, 10);
    struct test_order o[] = {{7, 1, NULL}, {7, 1, NULL}, {7, 1, NULL}};
    struct order_reply out[3];
    freeReplyObject(reserve_batch(o, 3, 1, 2, out)); /* 2 at once, then one a minute */
    ck_assert_int_eq(out[0].result, ORDER_PENDING);
    ck_assert_int_eq(out[1].result, ORDER_PENDING);
    ck_assert_int_eq(out[2].result, ORDER_RATE_LIMITED);
    ck_assert_int_gt(out[2].retry_after_ms, 0);
    /* the bucket the batch left holds for the next call too */
    freeReplyObject(reserve_batch(o, 1, 1, 2, out));
    ck_assert_int_eq(out[0].result, ORDER_RATE_LIMITED);
    ck_assert_int_eq(th_sku_int(SKU, KEY_STOCK), 98);
}
END_TEST

START_TEST(test_batch_script_error_refuses_every_order_before_any_write)
{
    fresh_sku(100, 1);
    struct test_order first = {7, 1, NULL};
    struct order_reply out[3];
    freeReplyObject(reserve_batch(&first, 1, 0, 0, out));
    ck_assert_int_eq(out[0].result, ORDER_PENDING);
    /* a loaded SKU that lost its sequence: the second order needs one */
    char seq[KEYS_MAX];
    keys_sku(seq, SKU, KEY_SEQ);
    redisContext *rc = th_redis_admin();
    freeReplyObject(redisCommand(rc, "DEL %s", seq));
    /* the first takes a token from its bucket and would be refused and
     * remembered under its key: neither may be written */
    struct test_order o[] = {{7, 1, "k"}, {8, 1, NULL}, {9, 1, NULL}};
    redisReply *r = reserve_batch(o, 3, 60, 5, out);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(out[i].result, ORDER_UNAVAILABLE);
    char key[KEYS_MAX];
    keys_idem(key, SKU, 7, "k");
    redisReply *e = redisCommand(rc, "EXISTS %s", key);
    ck_assert_int_eq(e->integer, 0);
    freeReplyObject(e);
    keys_buyer_rate(key, SKU, 7);
    e = redisCommand(rc, "EXISTS %s", key);
    ck_assert_int_eq(e->integer, 0);
    freeReplyObject(e);
    redisFree(rc);
    ck_assert_int_eq(th_sku_int(SKU, KEY_STOCK), 99);
    ck_assert_int_eq(th_stream_len(SKU), 1);
}
END_TEST

/* Calls of each command since the last CONFIG RESETSTAT, summed over 'names'. */
static long long calls_of(redisContext *rc, const char *const *names, int n)
{
    redisReply *r = redisCommand(rc, "INFO commandstats");
    ck_assert(r && r->type == REDIS_REPLY_STRING);
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "cmdstat_%s:calls=", names[i]);
        const char *p = strstr(r->str, pat);
        if (p)
            sum += atoll(p + strlen(pat));
    }
    freeReplyObject(r);
    return sum;
}

START_TEST(test_lone_order_makes_at_most_five_writes)
{
    static const char *const writes[] = {"set", "mset",   "hset", "hincrby", "xadd",  "hmset",
                                         "del", "expire", "incr", "incrby",  "decrby"};
    fresh_sku(100, 5);
    redisContext *rc = th_redis_admin();
    freeReplyObject(redisCommand(rc, "CONFIG RESETSTAT"));
    struct test_order o = {7, 1, "k"};
    struct order_reply out[1];
    freeReplyObject(reserve_batch(&o, 1, 60, 5, out)); /* with the buyer's bucket on */
    ck_assert_int_eq(out[0].result, ORDER_PENDING);
    int nw = (int)(sizeof writes / sizeof writes[0]);
    ck_assert_int_le(calls_of(rc, writes, nw), 5);
    /* eight orders of eight buyers: the shared writes once */
    fresh_sku(100, 5);
    freeReplyObject(redisCommand(rc, "CONFIG RESETSTAT"));
    struct test_order eight[8];
    for (int i = 0; i < 8; i++)
        eight[i] = (struct test_order){10 + i, 1, NULL};
    struct order_reply out8[8];
    freeReplyObject(reserve_batch(eight, 8, 60, 5, out8));
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(out8[i].result, ORDER_PENDING);
    ck_assert_int_le(calls_of(rc, writes, nw), 3 + 2 * 8);
    redisFree(rc);
}
END_TEST

START_TEST(test_made_up_key_lives_shorter_than_the_buyers)
{
    fresh_sku(100, 5);
    struct order_reply out[2];
    freeReplyObject(reserve_keys((const struct test_order[]){{7, 1, "auto-1"}, {8, 1, "mine"}}, 2,
                                 0, 0, 1u, out));
    char key[KEYS_MAX];
    redisContext *r = th_redis_admin(); /* TTL is no command of the service */
    keys_idem(key, SKU, 7, "auto-1");
    redisReply *t = redisCommand(r, "TTL %s", key);
    ck_assert_int_gt(t->integer, 0);
    ck_assert_int_le(t->integer, 600);
    freeReplyObject(t);
    keys_idem(key, SKU, 8, "mine");
    t = redisCommand(r, "TTL %s", key);
    ck_assert_int_gt(t->integer, 600);
    freeReplyObject(t);
    redisFree(r);
}
END_TEST

START_TEST(test_lone_order_not_delayed)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, SKU, 10, 1);
    long long calls = th_metric(d.port, "seckill_reserve_calls_total");
    long long orders = th_metric(d.port, "seckill_reserve_call_orders_total");
    struct th_response r;
    int st = th_order(d.port, SKU, 7, 1, NULL, &r);
    ck_assert_msg(st == 201 || st == 202, "got %d: %s", st, r.body);
    /* it went out in the turn it came in, alone: one call of one order */
    ck_assert_int_eq(th_metric(d.port, "seckill_reserve_calls_total"), calls + 1);
    ck_assert_int_eq(th_metric(d.port, "seckill_reserve_call_orders_total"), orders + 1);
    th_wait_drained(SKU, 30000);
    th_assert_invariants(SKU);
    th_daemon_stop(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("batch");
    TCase *tc = tcase_create("batch");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_batch_orders_same_buyer_limit_counts_earlier_member);
    tcase_add_test(tc, test_batch_same_idempotency_key_second_is_replay);
    tcase_add_test(tc, test_batch_remembered_refusal_is_replayed_to_the_same_key);
    tcase_add_test(tc, test_batch_stock_first_come_first_served);
    tcase_add_test(tc, test_batch_rate_bucket_counts_earlier_member);
    tcase_add_test(tc, test_batch_script_error_refuses_every_order_before_any_write);
    tcase_add_test(tc, test_lone_order_makes_at_most_five_writes);
    tcase_add_test(tc, test_made_up_key_lives_shorter_than_the_buyers);
    tcase_add_test(tc, test_lone_order_not_delayed);
    suite_add_tcase(s, tc);
    return th_run(s);
}
