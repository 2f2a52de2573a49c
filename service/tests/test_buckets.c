/*
 * A SKU split into buckets (sku/buckets.h): the levelling arithmetic alone
 * (pure), then the daemon against the real Redis and PostgreSQL: the create
 * splits the stock, a buyer's orders land in the bucket of their user id, a
 * bucket is never sold directly, an empty bucket is refilled from the others
 * so that "sold out" comes only when every bucket is empty, admin deltas on
 * the parent are split and replayed by their key, the parent's view is the
 * sum of its buckets, and a bucket Redis lost is rebuilt as a bucket.
 * Every bucket keeps I1-I3 on its own (th_assert_invariants), and the moves
 * between buckets sum to nothing.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/keys.h"
#include "harness.h"
#include "sku/buckets.h"
#include "sku/sku.h"
#include "sku/sku_store.h"

#define NB 3

/* ---- levelling, pure ----------------------------------------------------- */

static int64_t total(const int64_t *a, int n)
{
    int64_t s = 0;
    for (int i = 0; i < n; i++)
        s += a[i];
    return s;
}

START_TEST(test_take_levels_the_fullest_first)
{
    int64_t a[] = {10, 2, 7, 0}, take[4];
    ck_assert_int_eq(sku_level_take(a, 4, 5, take), 0);
    ck_assert_int_eq(total(take, 4), 5);
    /* 10 and 7 brought to 6: 4 + 1 */
    ck_assert_int_eq(take[0], 4);
    ck_assert_int_eq(take[2], 1);
    ck_assert_int_eq(take[1], 0);
    ck_assert_int_eq(take[3], 0);
    /* everything, and never more than there is */
    ck_assert_int_eq(sku_level_take(a, 4, 19, take), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(take[i], a[i]);
    ck_assert_int_eq(sku_level_take(a, 4, 20, take), -1);
    /* an odd remainder: one above the level for some, nobody below 0 */
    int64_t b[] = {5, 5, 5};
    ck_assert_int_eq(sku_level_take(b, 3, 4, take), 0);
    ck_assert_int_eq(total(take, 3), 4);
    for (int i = 0; i < 3; i++)
        ck_assert(take[i] >= 1 && take[i] <= 2);
}
END_TEST

START_TEST(test_give_fills_the_emptiest_then_evenly)
{
    int64_t a[] = {0, 6, 3}, give[3];
    sku_level_give(a, 3, 5, give);
    ck_assert_int_eq(total(give, 3), 5);
    ck_assert_int_eq(give[1], 0); /* the fullest gets nothing while others are below it */
    ck_assert(give[0] >= give[2]);
    sku_level_give(a, 3, 100, give);
    ck_assert_int_eq(total(give, 3), 100);
    int64_t after[3];
    for (int i = 0; i < 3; i++)
        after[i] = a[i] + give[i];
    for (int i = 0; i < 3; i++) /* level within one unit */
        ck_assert(after[i] - after[(i + 1) % 3] <= 1 && after[(i + 1) % 3] - after[i] <= 1);
}
END_TEST

START_TEST(test_take_many_random_sets_add_up)
{
    srand(7);
    for (int round = 0; round < 2000; round++) {
        int n = 1 + rand() % 8;
        int64_t a[8], take[8];
        for (int i = 0; i < n; i++)
            a[i] = rand() % 50;
        int64_t d = rand() % 200;
        int rc = sku_level_take(a, n, d, take);
        ck_assert_int_eq(rc, d > total(a, n) ? -1 : 0);
        if (rc)
            continue;
        ck_assert_int_eq(total(take, n), d);
        int64_t lo = INT64_MAX, hi = 0;
        for (int i = 0; i < n; i++) {
            ck_assert(take[i] >= 0 && take[i] <= a[i]);
            if (take[i] > 0) /* taken from: left at the level (or one above) */
                lo = a[i] - take[i] < lo ? a[i] - take[i] : lo;
            hi = a[i] - take[i] > hi ? a[i] - take[i] : hi;
        }
        ck_assert(lo == INT64_MAX || hi <= lo + 1); /* nobody left above the taken-from */
    }
}
END_TEST

/* ---- the daemon ------------------------------------------------------------ */

/* th_admin and th_http, answering the status (0: no answer). */
static int adm(int port, const char *method, const char *path, const char *body,
               struct th_response *r)
{
    return th_admin(port, method, path, body, r) == 0 ? r->status : 0;
}

static int http(int port, const char *method, const char *path, const char *headers,
                const char *body, struct th_response *r)
{
    return th_http(port, method, path, headers, body, r) == 0 ? r->status : 0;
}

/* Creates parent 'id' with NB buckets; their ids into b. */
static void create_parent(int port, int64_t id, int64_t stock, int limit, int64_t *b)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"id\": %lld, \"name\": \"hot\", \"stock\": %lld, \"per_user_limit\": %d, "
             "\"buckets\": %d}",
             (long long)id, (long long)stock, limit, NB);
    struct th_response r;
    ck_assert_int_eq(adm(port, "POST", "/admin/v1/skus", body, &r), 201);
    ck_assert_int_eq(th_json_int(r.body, "buckets", 0), NB);
    const char *list = strstr(r.body, "\"bucket_skus\"");
    ck_assert_msg(list, "%s", r.body);
    list = strchr(list, '[');
    for (int i = 0; i < NB; i++) {
        char *end;
        b[i] = strtoll(list + 1, &end, 10);
        ck_assert(b[i] > 0);
        list = end;
    }
}

/* A fresh database and a daemon with env (NULL: the default settings). */
static void start_with(struct th_daemon *d, const char *const *env)
{
    th_reset();
    th_daemon_start(d, env);
}

static long long pg(const char *fmt, long long a)
{
    char q[512];
    snprintf(q, sizeof q, fmt, a);
    PGconn *c = th_pg();
    long long v = th_pg_int(c, q);
    PQfinish(c);
    return v;
}

static void assert_buckets_hold(const int64_t *b)
{
    for (int i = 0; i < NB; i++) {
        th_wait_drained(b[i], 15000);
        th_assert_invariants(b[i]);
    }
}

START_TEST(test_create_splits_and_routes_by_user)
{
    struct th_daemon d;
    int64_t b[NB];
    start_with(&d, NULL);
    create_parent(d.port, 500, 11, 5, b);
    /* 11 over 3: 4, 4, 3; the parent holds nothing and Redis never has it */
    ck_assert_int_eq(pg("SELECT stock FROM skus WHERE id = %lld", 500), 0);
    ck_assert_int_eq(pg("SELECT buckets FROM skus WHERE id = %lld", 500), NB);
    for (int i = 0; i < NB; i++) {
        ck_assert_int_eq(pg("SELECT stock FROM skus WHERE id = %lld", b[i]), i < 2 ? 4 : 3);
        ck_assert_int_eq(th_sku_int(b[i], KEY_STOCK), i < 2 ? 4 : 3);
        ck_assert_int_eq(pg("SELECT bucket FROM skus WHERE id = %lld", b[i]), i);
    }
    ck_assert_int_eq(th_sku_int(500, KEY_STOCK), -1);
    /* users 1..6: each order in the bucket of user mod 3 */
    struct th_response r;
    for (int u = 1; u <= 6; u++) {
        ck_assert_int_eq(th_order(d.port, 500, u, 1, NULL, &r), 201);
        long long id = th_json_int(r.body, "order_id", 0);
        ck_assert_int_eq(pg("SELECT sku_id FROM orders WHERE id = %lld", id), b[u % NB]);
    }
    /* a user id past 2^53 (exact in C, not in Lua's doubles) lands in its bucket */
    ck_assert_int_eq(th_order(d.port, 500, INT64_C(9007199254740993), 1, NULL, &r), 201);
    ck_assert_int_eq(
        pg("SELECT sku_id FROM orders WHERE id = %lld", th_json_int(r.body, "order_id", 0)),
        b[INT64_C(9007199254740993) % NB]);
    /* a bucket is not for sale by itself */
    ck_assert_int_eq(th_order(d.port, b[1], 1, 1, NULL, &r), 404);
    /* the buyer's limit holds across the parent: user 1 has 1 of 5 */
    ck_assert_int_eq(th_order(d.port, 500, 1, 4, NULL, &r), 201);
    ck_assert_int_eq(th_order(d.port, 500, 1, 1, NULL, &r), 409);
    ck_assert_msg(strstr(r.body, "limit"), "%s", r.body);
    /* the parent's view: its buckets' sum */
    ck_assert_int_eq(http(d.port, "GET", "/api/v1/skus/500", NULL, NULL, &r), 200);
    ck_assert_int_eq(th_json_int(r.body, "available", -1), 11 - 7 - 4);
    ck_assert_int_eq(th_json_int(r.body, "buckets", 0), NB);
    assert_buckets_hold(b);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_an_empty_bucket_is_refilled_until_all_are_empty)
{
    /* one round: each order gets one move and one more try, enough here */
    const char *env[] = {"SECKILL_BUCKET_REFILL_ROUNDS=1", NULL};
    struct th_daemon d;
    int64_t b[NB];
    start_with(&d, env);
    create_parent(d.port, 510, 12, 1, b);
    /* every buyer in bucket 0 (user ids divisible by 3): its 4 units, then
     * the other buckets' 8 moved over to it; the 13th is sold out */
    struct th_response r;
    for (int i = 1; i <= 12; i++)
        ck_assert_msg(th_order(d.port, 510, 3 * i, 1, NULL, &r) == 201, "order %d: %d %s", i,
                      r.status, r.body);
    ck_assert_int_eq(th_order(d.port, 510, 3 * 13, 1, NULL, &r), 409);
    ck_assert_msg(strstr(r.body, "sold_out"), "%s", r.body);
    /* every order in bucket 0, every bucket empty, the moves summing to 0 */
    ck_assert_int_eq(
        pg("SELECT count(*) FROM orders WHERE sku_id = %lld AND status = 'confirmed'", b[0]), 12);
    for (int i = 0; i < NB; i++)
        ck_assert_int_eq(th_sku_int(b[i], KEY_STOCK), 0);
    ck_assert_int_eq(pg("SELECT coalesce(sum(delta), 0) FROM stock_ledger WHERE kind = 'admin' AND "
                        "reason = 'bucket transfer' AND sku_id IN (SELECT id FROM skus WHERE "
                        "parent_id = %lld)",
                        510),
                     0);
    ck_assert(pg("SELECT count(*) FROM stock_ledger WHERE reason = 'bucket transfer' AND sku_id = "
                 "%lld",
                 b[0]) >= 1);
    assert_buckets_hold(b);
    /* a restock on the parent sells again, in any bucket */
    ck_assert_int_eq(adm(d.port, "POST", "/admin/v1/skus/510/stock-adjustments",
                         "{\"delta\": 3, \"reason\": \"restock\"}", &r),
                     200);
    ck_assert_int_eq(th_json_int(r.body, "stock", -1), 3);
    ck_assert_int_eq(th_order(d.port, 510, 3 * 14 + 1, 1, NULL, &r), 201);
    assert_buckets_hold(b);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_parent_deltas_split_and_replay_by_key)
{
    struct th_daemon d;
    int64_t b[NB];
    start_with(&d, NULL);
    create_parent(d.port, 520, 9, 10, b);
    struct th_response r;
    const char *path = "/admin/v1/skus/520/stock-adjustments";
    ck_assert_int_eq(adm(d.port, "POST", path, "{\"delta\": 4, \"reason\": \"more\"}", &r), 200);
    ck_assert_int_eq(th_json_int(r.body, "stock", -1), 13);
    ck_assert_int_eq(th_json_int(r.body, "available", -1), 13);
    /* a negative delta with a key: taken from the fullest; its retry is replayed */
    char hdr[256], auth[128];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", TH_ADMIN_TOKEN);
    snprintf(hdr, sizeof hdr, "%sContent-Type: application/json\r\nIdempotency-Key: cut-1\r\n",
             auth);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(
            http(d.port, "POST", path, hdr, "{\"delta\": -5, \"reason\": \"cut\"}", &r), 200);
        ck_assert_int_eq(th_json_int(r.body, "stock", -1), 8);
        ck_assert_int_eq(strstr(r.body, "replayed") != NULL, i == 1);
    }
    /* the key with another delta: refused as for any SKU */
    ck_assert_int_eq(http(d.port, "POST", path, hdr, "{\"delta\": -4, \"reason\": \"cut\"}", &r),
                     422);
    ck_assert_int_eq(pg("SELECT sum(stock) FROM skus WHERE parent_id = %lld", 520), 8);
    /* more than all buckets hold: refused, nothing taken */
    ck_assert_int_eq(adm(d.port, "POST", path, "{\"delta\": -9, \"reason\": \"x\"}", &r), 409);
    ck_assert_int_eq(th_json_int(r.body, "available", -1), 8);
    ck_assert_int_eq(pg("SELECT sum(stock) FROM skus WHERE parent_id = %lld", 520), 8);
    long long most = 0, least = 100;
    for (int i = 0; i < NB; i++) {
        long long s = th_sku_int(b[i], KEY_STOCK);
        most = s > most ? s : most;
        least = s < least ? s : least;
    }
    ck_assert_msg(most - least <= 1, "deltas keep the buckets level: %lld..%lld", least, most);
    /* the admin view: sums, and each bucket */
    ck_assert_int_eq(adm(d.port, "GET", "/admin/v1/skus/520", NULL, &r), 200);
    ck_assert_int_eq(th_json_int(r.body, "db_stock", -1), 8);
    ck_assert_int_eq(th_json_int(r.body, "initial_stock", -1), 9);
    ck_assert_msg(strstr(r.body, "\"bucket_skus\""), "%s", r.body);
    /* the payment window: the parent's is every bucket's; a bucket alone is no SKU for it */
    ck_assert_int_eq(adm(d.port, "PATCH", "/admin/v1/skus/520", "{\"payment_window_s\": 60}", &r),
                     200);
    for (int i = 0; i < NB; i++)
        ck_assert_int_eq(pg("SELECT payment_window_s FROM skus WHERE id = %lld", b[i]), 60);
    char bpath[64];
    snprintf(bpath, sizeof bpath, "/admin/v1/skus/%lld", (long long)b[1]);
    ck_assert_int_eq(adm(d.port, "PATCH", bpath, "{\"payment_window_s\": 5}", &r), 404);
    ck_assert_int_eq(pg("SELECT payment_window_s FROM skus WHERE id = %lld", b[1]), 60);
    assert_buckets_hold(b);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_a_bucket_redis_lost_comes_back_as_a_bucket)
{
    const char *env[] = {"SECKILL_RECONCILE_INTERVAL_MS=200", NULL};
    struct th_daemon d;
    start_with(&d, env);
    int64_t b[NB];
    create_parent(d.port, 530, 6, 5, b);
    struct th_response r;
    ck_assert_int_eq(th_order(d.port, 530, 4, 1, NULL, &r), 201); /* bucket 1 */
    th_wait_drained(b[1], 15000);
    /* bucket 1's keys gone, as after a master restarted without its data */
    redisContext *rc = th_redis_admin();
    for (int k = 0; k < KEY_COUNT; k++) {
        char key[KEYS_MAX];
        keys_sku(key, b[1], (enum keys_kind)k);
        redisReply *x = redisCommand(rc, "DEL %s", key);
        freeReplyObject(x);
    }
    redisFree(rc);
    /* restored from PostgreSQL by itself, still sold only through the parent */
    int code = 0;
    for (int i = 0; i < 100 && code != 201; i++) {
        code = th_order(d.port, 530, 7, 1, NULL, &r);
        if (code != 201)
            th_sleep_ms(100);
    }
    ck_assert_int_eq(code, 201);
    ck_assert_int_eq(th_order(d.port, b[1], 7, 1, NULL, &r), 404);
    ck_assert_int_eq(pg("SELECT count(*) FROM orders WHERE sku_id = %lld AND user_id = 4", b[1]),
                     1);
    assert_buckets_hold(b);
    th_daemon_stop(&d);
}
END_TEST

/* A buyer allowed one order a minute whose bucket is empty: the move and
 * the second try are the same order, not a second one (no 429). */
START_TEST(test_a_move_costs_the_buyer_no_second_order)
{
    const char *env[] = {"SECKILL_RATE_BUYER_ORDERS_PER_MIN=1", "SECKILL_RATE_BUYER_ORDERS_BURST=1",
                         NULL};
    struct th_daemon d;
    start_with(&d, env);
    int64_t b[NB];
    create_parent(d.port, 550, NB, 1, b); /* one unit per bucket */
    struct th_response r;
    ck_assert_int_eq(th_order(d.port, 550, 3, 1, NULL, &r), 201); /* bucket 0 now empty */
    ck_assert_msg(th_order(d.port, 550, 6, 1, NULL, &r) == 201, "%d %s", r.status, r.body);
    ck_assert_int_eq(th_order(d.port, 550, 6, 1, NULL, &r), 429); /* its second order is one */
    assert_buckets_hold(b);
    th_daemon_stop(&d);
}
END_TEST

/* The order's life on a bucketed SKU: a cancelled order gives its unit back
 * to its own bucket, once, and its buyer may buy again (the limit of 1 is
 * theirs again); its lookup names the bucket. */
START_TEST(test_a_cancel_returns_the_unit_to_its_bucket)
{
    struct th_daemon d;
    int64_t b[NB];
    start_with(&d, NULL);
    create_parent(d.port, 570, NB, 1, b); /* one unit per bucket, one per buyer */
    struct th_response r;
    /* a payment step, so that a confirmed order may still be cancelled */
    ck_assert_int_eq(adm(d.port, "PATCH", "/admin/v1/skus/570", "{\"payment_window_s\": 600}", &r),
                     200);
    ck_assert_int_eq(th_order(d.port, 570, 4, 1, NULL, &r), 201); /* bucket 1 */
    long long id = th_json_int(r.body, "order_id", 0);
    ck_assert_int_eq(th_order(d.port, 570, 4, 1, NULL, &r), 409); /* their limit */
    char path[64], auth[TH_BUYER_AUTH_MAX];
    snprintf(path, sizeof path, "/api/v1/orders/%lld", id);
    th_buyer_auth(4, auth, sizeof auth);
    ck_assert_int_eq(http(d.port, "GET", path, auth, NULL, &r), 200);
    ck_assert_int_eq(th_json_int(r.body, "sku_id", 0), b[1]);
    snprintf(path, sizeof path, "/api/v1/orders/%lld/cancel", id);
    ck_assert_int_eq(http(d.port, "POST", path, auth, NULL, &r), 200);
    /* again: the same answer (idempotent), and no second return */
    ck_assert_int_eq(http(d.port, "POST", path, auth, NULL, &r), 200);
    ck_assert_msg(strstr(r.body, "cancelled"), "%s", r.body);
    ck_assert_int_eq(th_sku_int(b[1], KEY_STOCK), 1);
    ck_assert_int_eq(pg("SELECT stock FROM skus WHERE id = %lld", b[1]), 1);
    ck_assert_int_eq(
        pg("SELECT count(*) FROM stock_ledger WHERE kind = 'return' AND sku_id = %lld", b[1]), 1);
    ck_assert_int_eq(th_order(d.port, 570, 4, 1, NULL, &r), 201); /* theirs again */
    assert_buckets_hold(b);
    th_daemon_stop(&d);
}
END_TEST

/* A sold-out storm on a parent: once every bucket together is empty, the
 * parent's local flag answers, without a reserve script or a refill each;
 * a restock opens it again within the flag's window. */
START_TEST(test_a_sold_out_parent_is_answered_from_its_flag)
{
    const char *env[] = {"SECKILL_SOLD_OUT_FLAG_MS=10000", NULL};
    struct th_daemon d;
    start_with(&d, env);
    int64_t b[NB];
    create_parent(d.port, 560, NB, 1, b);
    struct th_response r;
    for (int u = 1; u <= NB; u++)
        ck_assert_int_eq(th_order(d.port, 560, 3 * u, 1, NULL, &r), 201); /* all via bucket 0 */
    ck_assert_int_eq(th_order(d.port, 560, 3 * 10, 1, NULL, &r), 409);    /* the SKU is empty */
    long long moves = th_metric(d.port, "seckill_bucket_transfers_total");
    for (int u = 0; u < 100; u++) {
        ck_assert_int_eq(th_order(d.port, 560, 1000 + u, 1, NULL, &r), 409);
        ck_assert_msg(strstr(r.body, "sold_out"), "%s", r.body);
    }
    ck_assert_int_eq(th_metric(d.port, "seckill_orders_sold_out_local_total"), 100);
    ck_assert_int_eq(th_metric(d.port, "seckill_bucket_transfers_total"), moves);
    /* a restock on this instance opens it at once */
    ck_assert_int_eq(adm(d.port, "POST", "/admin/v1/skus/560/stock-adjustments",
                         "{\"delta\": 1, \"reason\": \"more\"}", &r),
                     200);
    ck_assert_int_eq(th_order(d.port, 560, 3 * 11, 1, NULL, &r), 201);
    assert_buckets_hold(b);
    th_daemon_stop(&d);
}
END_TEST

/* sku_bucket_refill() itself, on a worker's connections: a bucket that
 * holds enough is left alone, a short one gets units from the fullest
 * first (towards an even share), the buckets together short of the order
 * is sold out, and the answers never move a unit twice. */
START_TEST(test_refill_moves_only_what_is_missing)
{
    th_reset();
    struct cfg c;
    th_cfg(&c);
    struct worker_ctx w;
    char err[160];
    ck_assert_msg(worker_ctx_init(&w, &c, err, sizeof err) == 0, "%s", err);
    struct validate_sku spec = {
        .has_id = 1, .id = 540, .stock = 9, .per_user_limit = 5, .buckets = NB};
    snprintf(spec.name, sizeof spec.name, "hot");
    json_t *out = NULL;
    ck_assert_int_eq(sku_create(&w, &spec, &out), SKU_OK);
    json_decref(out);
    int64_t b[NB];
    ck_assert_int_eq(sku_buckets_of(&w, 540, b, NB), NB);
    ck_assert_int_eq(sku_buckets_of(&w, b[0], b, NB), 0); /* a bucket is no parent */
    ck_assert_int_eq(sku_buckets_of(&w, 540, b, NB), NB);
    int64_t left;
    /* 3 each: bucket 0 can serve 3, nothing moves */
    ck_assert_int_eq(sku_bucket_refill(&w, 540, b, NB, 0, 3, &left), SKU_OK);
    ck_assert_int_eq(th_sku_int(b[0], KEY_STOCK), 3);
    ck_assert_int_eq(pg("SELECT count(*) FROM stock_ledger WHERE reason = 'bucket transfer' AND "
                        "sku_id IN (SELECT id FROM skus WHERE parent_id = %lld)",
                        540),
                     0);
    /* 4 wanted: the 9 together allow it; bucket 0 gets what it lacks */
    ck_assert_int_eq(sku_bucket_refill(&w, 540, b, NB, 0, 4, &left), SKU_OK);
    ck_assert_int_eq(th_sku_int(b[0], KEY_STOCK), 4);
    ck_assert_int_eq(th_sku_int(b[1], KEY_STOCK) + th_sku_int(b[2], KEY_STOCK), 5);
    /* again: it holds 4 now, nothing moves twice */
    ck_assert_int_eq(sku_bucket_refill(&w, 540, b, NB, 0, 4, &left), SKU_OK);
    ck_assert_int_eq(th_sku_int(b[0], KEY_STOCK), 4);
    /* a move whose bucket another move filled first (it held the locks
     * before): under the locks it finds nothing to do */
    struct sku_move m[2] = {{.sku = b[0], .delta = 1}, {.sku = b[1], .delta = -1}};
    struct sku_adjust_req rq = {.reason = "bucket transfer", .short_sku = b[0], .short_of = 4};
    struct sku_replay rp;
    int refused;
    ck_assert_int_eq(sku_adjust_moves(&w, m, 2, &rq, &rp, &refused), SKU_OK);
    ck_assert_int_eq(rp.skipped, 1);
    ck_assert_int_eq(th_sku_int(b[0], KEY_STOCK), 4);
    rq.short_of = 5; /* still short: it moves */
    m[0] = (struct sku_move){.sku = b[0], .delta = 1};
    m[1] = (struct sku_move){.sku = b[1], .delta = -1};
    ck_assert_int_eq(sku_adjust_moves(&w, m, 2, &rq, &rp, &refused), SKU_OK);
    ck_assert_int_eq(rp.skipped, 0);
    ck_assert_int_eq(th_sku_int(b[0], KEY_STOCK), 5);
    /* 10 wanted: the buckets hold 9 together, sold out, nothing moved */
    ck_assert_int_eq(sku_bucket_refill(&w, 540, b, NB, 0, 10, &left), SKU_INSUFFICIENT);
    ck_assert_int_eq(left, 9);
    ck_assert_int_eq(th_sku_int(b[0], KEY_STOCK), 5);
    for (int i = 0; i < NB; i++)
        th_assert_invariants(b[i]);
    ck_assert_int_eq(pg("SELECT sum(stock) FROM skus WHERE parent_id = %lld", 540), 9);
    /* a bucket Redis does not hold: never sold out on its account */
    redisContext *rc = th_redis_admin();
    char key[KEYS_MAX];
    keys_sku(key, b[2], KEY_META);
    redisReply *x = redisCommand(rc, "DEL %s", key);
    freeReplyObject(x);
    keys_sku(key, b[2], KEY_STOCK);
    x = redisCommand(rc, "DEL %s", key);
    freeReplyObject(x);
    redisFree(rc);
    ck_assert_int_eq(sku_bucket_refill(&w, 540, b, NB, 0, 9, &left), SKU_UNAVAILABLE);
    worker_ctx_close(&w);
    cfg_free(&c);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("buckets");
    TCase *pure = tcase_create("levelling");
    tcase_add_test(pure, test_take_levels_the_fullest_first);
    tcase_add_test(pure, test_give_fills_the_emptiest_then_evenly);
    tcase_add_test(pure, test_take_many_random_sets_add_up);
    suite_add_tcase(s, pure);
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_create_splits_and_routes_by_user);
    tcase_add_test(tc, test_an_empty_bucket_is_refilled_until_all_are_empty);
    tcase_add_test(tc, test_parent_deltas_split_and_replay_by_key);
    tcase_add_test(tc, test_a_bucket_redis_lost_comes_back_as_a_bucket);
    tcase_add_test(tc, test_refill_moves_only_what_is_missing);
    tcase_add_test(tc, test_a_move_costs_the_buyer_no_second_order);
    tcase_add_test(tc, test_a_sold_out_parent_is_answered_from_its_flag);
    tcase_add_test(tc, test_a_cancel_returns_the_unit_to_its_bucket);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run(suite());
}
