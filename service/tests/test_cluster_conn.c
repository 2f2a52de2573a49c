/*
 * The service's blocking Redis client (store/redis_conn.c) and its SKU lock
 * (store/txlock.c) on a Redis Cluster: a real three-master cluster the test
 * starts (rlock's th_redis_cluster_start), a redis-cluster:// redis_url.
 * Every command, script and pipeline must reach the master of its keys'
 * slot without a redirect (the key found in each command's own place), and
 * a SKU's lock keys live on the SKU's master, and follow its slot when a
 * reshard moves it (taken, inspected by seckillctl, released where the slot
 * is now).  The event loops' client follows MOVED, and waits out the
 * TRYAGAIN of a migration that split a script's keys.  Last, a sale through
 * seckilld on the cluster: a SKU on each master, more buyers than units,
 * every unit sold once, PostgreSQL and each SKU's master agreeing; and one
 * SKU split into three buckets, one on each master, sold out through moves
 * between masters, while a bucket whose master died never lets the SKU be
 * called sold out.
 */
#include <check.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/embedded.h"
#include "core/keys.h"
#include "harness.h"
#include "rlock/tests/harness_redis.h"
#include "store/redis_async.h"
#include "store/redis_conn.h"
#include "store/redis_functions.h"
#include "store/txlock.h"
#include <rlock/cluster.h>

#define MASTERS 3

static struct th_redis_cluster cl;
static struct cfg cfg;
static struct redis_conn rc;

static void setup(void)
{
    th_redis_cluster_start(&cl, MASTERS);
    th_cfg(&cfg);
    char url[160], err[320];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", cl.node[2].port,
             cl.node[0].port);
    ck_assert(cfg_set(&cfg, "redis_url", url, err, sizeof err) == 0);
    ck_assert_msg(redis_conn_init(&rc, &cfg, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(redis_conn_check_credentials(&rc, err, sizeof err), 0);
    /* what seckilld migrate does: the library on every master */
    ck_assert_msg(redis_functions_load(&rc, err, sizeof err) == MASTERS, "%s", err);
}

static void teardown(void)
{
    redis_conn_close(&rc);
    cfg_free(&cfg);
    th_redis_cluster_stop(&cl);
}

/* The type of key on master m, asked directly (the key's own master: any
 * other answers MOVED): "" when there is none. */
static void on_master(int m, const char *key, char *out, size_t cap)
{
    redisContext *c = th_redis_server_connect(&cl.node[m]);
    redisReply *r = redisCommand(c, "TYPE %s", key);
    ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "TYPE %s on master %d: %s", key, m,
                  r ? r->str : c->errstr);
    snprintf(out, cap, "%s", strcmp(r->str, "none") == 0 ? "" : r->str);
    freeReplyObject(r);
    redisFree(c);
}

/* A SKU whose keys live on master m. */
static int64_t sku_on(int m)
{
    for (int64_t sku = 1;; sku++) {
        char k[KEYS_MAX];
        keys_sku(k, sku, KEY_STOCK);
        if (th_redis_cluster_owner(&cl, rlock_cluster_slot(k, strlen(k))) == m)
            return sku;
    }
}

static void no_redirects(void)
{
    ck_assert_ptr_nonnull(rc.cluster);
    ck_assert_uint_eq(rlock_cluster_redirects(rc.cluster), 0);
}

START_TEST(test_commands_reach_the_master_of_their_keys)
{
    setup();
    char type[32];
    for (int m = 0; m < MASTERS; m++) {
        int64_t sku = sku_on(m);
        char stock[KEYS_MAX], stream[KEYS_MAX];
        keys_sku(stock, sku, KEY_STOCK);
        keys_sku(stream, sku, KEY_STREAM);
        const char *set[] = {"SET", stock, "10"};
        redisReply *r = redis_conn_cmd(&rc, 3, set, NULL);
        ck_assert(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
        /* the key is the third argument of XGROUP, after STREAMS for XREADGROUP */
        const char *grp[] = {"XGROUP", "CREATE", stream, "writers", "$", "MKSTREAM"};
        r = redis_conn_cmd(&rc, 6, grp, NULL);
        ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "%s", r ? r->str : "no reply");
        freeReplyObject(r);
        const char *read[] = {"XREADGROUP", "GROUP",   "writers", "c1", "COUNT",
                              "10",         "STREAMS", stream,    ">"};
        r = redis_conn_cmd(&rc, 9, read, NULL);
        ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "%s", r ? r->str : "no reply");
        freeReplyObject(r);
        on_master(m, stock, type, sizeof type);
        ck_assert_str_eq(type, "string");
        on_master(m, stream, type, sizeof type);
        ck_assert_str_eq(type, "stream");
    }
    /* keyless commands go somewhere that answers */
    const char *ping[] = {"PING"};
    redisReply *r = redis_conn_cmd(&rc, 1, ping, NULL);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    no_redirects();
    teardown();
}
END_TEST

/* Moves key's slot (and key) from master 'from' to master 'to', telling
 * every master, as redis-cli --cluster reshard does. */
static void move_slot(const char *key, int from, int to)
{
    unsigned slot = rlock_cluster_slot(key, strlen(key));
    redisContext *a[MASTERS];
    for (int m = 0; m < MASTERS; m++)
        a[m] = th_redis_server_connect(&cl.node[m]);
    redisReply *r = redisCommand(a[to], "CLUSTER SETSLOT %u IMPORTING %s", slot, cl.id[from]);
    freeReplyObject(r);
    r = redisCommand(a[from], "CLUSTER SETSLOT %u MIGRATING %s", slot, cl.id[to]);
    freeReplyObject(r);
    r = redisCommand(a[from], "MIGRATE 127.0.0.1 %d %s 0 5000", cl.node[to].port, key);
    ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "MIGRATE: %s", r ? r->str : "");
    freeReplyObject(r);
    for (int m = 0; m < MASTERS; m++) {
        r = redisCommand(a[m], "CLUSTER SETSLOT %u NODE %s", slot, cl.id[to]);
        ck_assert(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
        redisFree(a[m]);
    }
}

START_TEST(test_a_pipeline_across_slots_keeps_its_order)
{
    setup();
    /* one command per master and back, interleaved */
    char keys[2 * MASTERS][KEYS_MAX], vals[2 * MASTERS][16];
    int argcs[2 * MASTERS];
    const char *argv[2 * MASTERS][3];
    const char *const *argvs[2 * MASTERS];
    for (int i = 0; i < 2 * MASTERS; i++) {
        keys_sku(keys[i], sku_on(i % MASTERS) + 1000 * (i / MASTERS), KEY_STOCK);
        snprintf(vals[i], sizeof vals[i], "v%d", i);
        argv[i][0] = "SET";
        argv[i][1] = keys[i];
        argv[i][2] = vals[i];
        argcs[i] = 3;
        argvs[i] = argv[i];
    }
    redisReply *out[2 * MASTERS];
    ck_assert_int_eq(redis_conn_pipeline(&rc, 2 * MASTERS, argcs, argvs, out), 0);
    for (int i = 0; i < 2 * MASTERS; i++) {
        ck_assert(out[i] && out[i]->type == REDIS_REPLY_STATUS);
        freeReplyObject(out[i]);
        argv[i][0] = "GET";
        argcs[i] = 2;
    }
    ck_assert_int_eq(redis_conn_pipeline(&rc, 2 * MASTERS, argcs, argvs, out), 0);
    for (int i = 0; i < 2 * MASTERS; i++) {
        ck_assert(out[i] && out[i]->type == REDIS_REPLY_STRING);
        ck_assert_str_eq(out[i]->str, vals[i]);
        freeReplyObject(out[i]);
    }
    /* one key's slot moves behind the client's back: its command in the
     * pipeline meets MOVED and is run again on its own, in its place */
    move_slot(keys[0], th_redis_cluster_owner(&cl, rlock_cluster_slot(keys[0], strlen(keys[0]))),
              (th_redis_cluster_owner(&cl, rlock_cluster_slot(keys[0], strlen(keys[0]))) + 1) %
                  MASTERS);
    ck_assert_int_eq(redis_conn_pipeline(&rc, 2 * MASTERS, argcs, argvs, out), 0);
    for (int i = 0; i < 2 * MASTERS; i++) {
        ck_assert(out[i] && out[i]->type == REDIS_REPLY_STRING);
        ck_assert_str_eq(out[i]->str, vals[i]);
        freeReplyObject(out[i]);
    }
    ck_assert_uint_ge(rlock_cluster_redirects(rc.cluster), 1);
    teardown();
}
END_TEST

START_TEST(test_a_sku_lock_lives_on_the_sku_master)
{
    setup();
    for (int m = 0; m < MASTERS; m++) {
        int64_t sku = sku_on(m);
        char lock[KEYS_MAX], type[32];
        keys_sku(lock, sku, KEY_SKU_LOCK);
        struct txlock t;
        const char *keys[] = {lock};
        ck_assert_int_eq(txlock_acquire(&t, &rc, &cfg, sku, keys, 1), RLOCK_OK);
        ck_assert_int_gt(t.fence, 0);
        on_master(m, lock, type, sizeof type);
        ck_assert_str_eq(type, "string");
        txlock_release(&t);
        on_master(m, lock, type, sizeof type);
        ck_assert_str_eq(type, "");
    }
    no_redirects();
    teardown();
}
END_TEST

/* A reshard of slot from master 'from' to master 'to', as redis-cli
 * --cluster reshard does it: begun (IMPORTING, MIGRATING, every key of the
 * slot moved), then ended (every master told the new owner). */
static void migration_begin(unsigned slot, int from, int to)
{
    redisContext *a = th_redis_server_connect(&cl.node[to]);
    redisReply *r = redisCommand(a, "CLUSTER SETSLOT %u IMPORTING %s", slot, cl.id[from]);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(a);
    a = th_redis_server_connect(&cl.node[from]);
    r = redisCommand(a, "CLUSTER SETSLOT %u MIGRATING %s", slot, cl.id[to]);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    for (size_t n = 1; n > 0;) {
        r = redisCommand(a, "CLUSTER GETKEYSINSLOT %u 100", slot);
        ck_assert(r && r->type == REDIS_REPLY_ARRAY);
        n = r->elements;
        for (size_t i = 0; i < n; i++) {
            redisReply *m = redisCommand(a, "MIGRATE 127.0.0.1 %d %s 0 5000", cl.node[to].port,
                                         r->element[i]->str);
            ck_assert_msg(m && m->type == REDIS_REPLY_STATUS, "MIGRATE: %s", m ? m->str : "");
            freeReplyObject(m);
        }
        freeReplyObject(r);
    }
    redisFree(a);
}

static void migration_end(unsigned slot, int to)
{
    for (int m = 0; m < MASTERS; m++) {
        redisContext *a = th_redis_server_connect(&cl.node[m]);
        redisReply *r = redisCommand(a, "CLUSTER SETSLOT %u NODE %s", slot, cl.id[to]);
        ck_assert(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
        redisFree(a);
    }
}

/* Runs "seckillctl ARGS" with the cluster's redis_url; its output into out
 * (stdout and stderr), its exit status returned. */
static int ctl(const char *args, char *out, size_t cap);

/* A SKU lock follows its slot when a reshard moves it behind the client's
 * back (its map still names the old owner): the acquire meets MOVED and
 * takes the lock on the new owner, with a larger fencing token (the counter
 * moved along); while the slot moves on under the held lock seckillctl
 * inspects it through ASK; and the release meets MOVED and deletes the lock
 * on its owner now, instead of leaving it to its lease. */
START_TEST(test_a_sku_lock_follows_its_slot)
{
    setup();
    int64_t sku = sku_on(0);
    char lock[KEYS_MAX], type[32], out[4096], args[KEYS_MAX + 32];
    keys_sku(lock, sku, KEY_SKU_LOCK);
    unsigned slot = rlock_cluster_slot(lock, strlen(lock));
    const char *keys[] = {lock};
    struct txlock t;
    ck_assert_int_eq(txlock_acquire(&t, &rc, &cfg, sku, keys, 1), RLOCK_OK); /* the map read */
    int64_t first = t.fence;
    txlock_release(&t);
    no_redirects();

    migration_begin(slot, 0, 1);
    migration_end(slot, 1);
    ck_assert_msg(txlock_acquire(&t, &rc, &cfg, sku, keys, 1) == RLOCK_OK, "%s", t.lock.err);
    ck_assert_int_gt(t.fence, first);
    on_master(1, lock, type, sizeof type);
    ck_assert_str_eq(type, "string");
    unsigned long acquired = rlock_cluster_redirects(rc.cluster);
    ck_assert_uint_ge(acquired, 1);

    /* mid-migration to master 2, its keys moved already: ASK */
    migration_begin(slot, 1, 2);
    snprintf(args, sizeof args, "lock inspect '%s'", lock);
    ck_assert_msg(ctl(args, out, sizeof out) == 0, "%s", out);
    ck_assert_msg(strstr(out, t.lock.token) != NULL, "%s", out);
    migration_end(slot, 2);
    txlock_release(&t);
    on_master(2, lock, type, sizeof type);
    ck_assert_msg(strcmp(type, "") == 0, "the lock is left to its lease");
    ck_assert_uint_gt(rlock_cluster_redirects(rc.cluster), acquired);
    teardown();
}
END_TEST

/* The integer at key on master m (-1 when absent). */
static long long int_on(int m, const char *key)
{
    redisContext *c = th_redis_server_connect(&cl.node[m]);
    long long v = th_redis_int(c, key);
    redisFree(c);
    return v;
}

/* The watchdog on a cluster: SKU locks on every master, with a lease far
 * shorter than the test's sleep, are all still held (renewed, each on its
 * own master) until released. */
START_TEST(test_the_watchdog_renews_locks_on_every_master)
{
    setup();
    char err[320];
    ck_assert(cfg_set(&cfg, "lock_ttl_ms", "300", err, sizeof err) == 0);
    struct rlock_watchdog_opts wo = {.lease_ms = 300, .op_timeout_ms = 200};
    struct rlock_watchdog *wd = redis_conn_watchdog(&rc, &wo, err, sizeof err);
    ck_assert_msg(wd != NULL, "%s", err);
    txlock_set_watchdog(wd);
    struct txlock t[MASTERS];
    char lock[MASTERS][KEYS_MAX], type[32];
    for (int m = 0; m < MASTERS; m++) {
        int64_t sku = sku_on(m);
        keys_sku(lock[m], sku, KEY_SKU_LOCK);
        const char *keys[] = {lock[m]};
        ck_assert_int_eq(txlock_acquire(&t[m], &rc, &cfg, sku, keys, 1), RLOCK_OK);
    }
    th_sleep_ms(1200); /* four leases */
    for (int m = 0; m < MASTERS; m++) {
        on_master(m, lock[m], type, sizeof type);
        ck_assert_msg(strcmp(type, "string") == 0, "the lock on master %d expired", m);
        ck_assert_int_eq(atomic_load(&t[m].lost), 0);
        txlock_release(&t[m]);
        on_master(m, lock[m], type, sizeof type);
        ck_assert_str_eq(type, "");
    }
    txlock_set_watchdog(NULL);
    rlock_watchdog_free(wd);
    teardown();
}
END_TEST

/* A fresh database, the cluster, and seckilld on it. */
static void start_on_cluster(struct th_daemon *d)
{
    th_reset();
    setup();
    char env[200];
    snprintf(env, sizeof env, "SECKILL_REDIS_URL=%s", cfg.redis_url);
    const char *extra[] = {env, NULL};
    th_daemon_start(d, extra);
}

START_TEST(test_a_sale_on_a_cluster)
{
    enum { STOCK = 8, BUYERS = 20 };
    struct th_daemon d;
    start_on_cluster(&d);
    int64_t skus[MASTERS];
    for (int m = 0; m < MASTERS; m++) {
        skus[m] = sku_on(m);
        th_create_sku(d.port, skus[m], STOCK, 1);
    }
    struct th_response res;
    int ok[MASTERS] = {0}, sold_out[MASTERS] = {0};
    for (int u = 1; u <= BUYERS; u++)
        for (int m = 0; m < MASTERS; m++) {
            int st = th_order(d.port, skus[m], u, 1, NULL, &res);
            if (st == 201 || st == 202)
                ok[m]++;
            else if (st == 409)
                sold_out[m]++;
            else
                ck_abort_msg("sku %lld, buyer %d: %d %s", (long long)skus[m], u, st, res.body);
        }
    PGconn *pg = th_pg();
    for (int m = 0; m < MASTERS; m++) {
        ck_assert_int_eq(ok[m], STOCK);
        ck_assert_int_eq(sold_out[m], BUYERS - STOCK);
        char sql[160];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM orders WHERE sku_id = %lld AND status = 'confirmed'",
                 (long long)skus[m]);
        long long confirmed = 0;
        for (int i = 0; i < 100 && (confirmed = th_pg_int(pg, sql)) < STOCK; i++)
            th_sleep_ms(100); /* the writer reads each SKU's stream on its master */
        ck_assert_int_eq(confirmed, STOCK);
        snprintf(sql, sizeof sql, "SELECT stock FROM skus WHERE id = %lld", (long long)skus[m]);
        ck_assert_int_eq(th_pg_int(pg, sql), 0);
        char stock[KEYS_MAX];
        keys_sku(stock, skus[m], KEY_STOCK);
        ck_assert_int_eq(int_on(m, stock), 0);
    }
    PQfinish(pg);
    /* /healthz: every master answers; then one is gone (no replica here):
     * still 200, degraded, for the SKUs of the others still sell */
    ck_assert_int_eq(th_http(d.port, "GET", "/healthz", NULL, NULL, &res), 0);
    ck_assert_int_eq(res.status, 200);
    ck_assert_ptr_nonnull(strstr(res.body, "\"redis\":\"ok\""));
    th_redis_server_kill(&cl.node[2]);
    /* the probes see it within health_probe_interval_ms (250) + health_timeout_ms
     * (1000); a check answers from their latest result at once: asked until it shows */
    for (int i = 0; i < 125; i++) { /* 125 x 50 ms: five times that bound */
        ck_assert_int_eq(th_http(d.port, "GET", "/healthz", NULL, NULL, &res), 0);
        if (strstr(res.body, "\"redis\":\"degraded\""))
            break;
        th_sleep_ms(50);
    }
    ck_assert_int_eq(res.status, 200);
    ck_assert_msg(strstr(res.body, "\"redis\":\"degraded\"") &&
                      strstr(res.body, "\"redis_masters_down\":1"),
                  "%s", res.body);
    ck_assert_int_eq(th_order(d.port, skus[0], BUYERS + 1, 1, NULL, &res), 409); /* sold out */
    ck_assert_int_eq(th_daemon_stop(&d), 0);
    teardown();
}
END_TEST

/* The ids in the "bucket_skus" list of a create answer. */
static void bucket_ids(const char *body, int64_t *ids, int n)
{
    const char *p = strstr(body, "\"bucket_skus\"");
    ck_assert_msg(p && (p = strchr(p, '[')), "%s", body);
    for (int i = 0; i < n; i++) {
        char *end;
        ids[i] = strtoll(p + 1, &end, 10);
        ck_assert(ids[i] > 0);
        p = end;
    }
}

START_TEST(test_a_sku_in_buckets_on_every_master)
{
    enum { STOCK = 9 };
    struct th_daemon d;
    start_on_cluster(&d);
    struct th_response res;
    ck_assert_int_eq(th_admin(d.port, "POST", "/admin/v1/skus",
                              "{\"id\": 900, \"name\": \"hot\", \"stock\": 9, "
                              "\"per_user_limit\": 1, \"buckets\": 3}",
                              &res),
                     0);
    ck_assert_msg(res.status == 201, "%d %s", res.status, res.body);
    int64_t b[MASTERS];
    bucket_ids(res.body, b, MASTERS);
    /* each bucket's keys on a master of its own */
    int seen[MASTERS] = {0};
    for (int i = 0; i < MASTERS; i++) {
        char k[KEYS_MAX];
        keys_sku(k, b[i], KEY_STOCK);
        int m = th_redis_cluster_owner(&cl, rlock_cluster_slot(k, strlen(k)));
        ck_assert(m >= 0 && m < MASTERS);
        seen[m]++;
        ck_assert_int_eq(int_on(m, k), STOCK / MASTERS);
    }
    for (int m = 0; m < MASTERS; m++)
        ck_assert_int_eq(seen[m], 1);
    /* buyers of bucket 0 only (user ids divisible by 3): its 3 units, then
     * the 6 of the other masters moved over; the 10th is sold out */
    for (int i = 1; i <= STOCK; i++) {
        int st = th_order(d.port, 900, 3 * i, 1, NULL, &res);
        ck_assert_msg(st == 201 || st == 202, "order %d: %d %s", i, st, res.body);
    }
    ck_assert_int_eq(th_order(d.port, 900, 3 * (STOCK + 1), 1, NULL, &res), 409);
    ck_assert_msg(strstr(res.body, "sold_out"), "%s", res.body);
    /* every bucket's rows written, its stock the same on its master as in
     * PostgreSQL (0), I1 per bucket */
    PGconn *pg = th_pg();
    for (int i = 0; i < MASTERS; i++) {
        char sql[200], k[KEYS_MAX];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM orders WHERE sku_id IN (%lld, %lld, %lld) AND status = "
                 "'confirmed'",
                 (long long)b[0], (long long)b[1], (long long)b[2]);
        for (int t = 0; t < 100 && th_pg_int(pg, sql) < STOCK; t++)
            th_sleep_ms(100);
        ck_assert_int_eq(th_pg_int(pg, sql), STOCK);
        snprintf(sql, sizeof sql, "SELECT stock FROM skus WHERE id = %lld", (long long)b[i]);
        ck_assert_int_eq(th_pg_int(pg, sql), 0);
        keys_sku(k, b[i], KEY_STOCK);
        ck_assert_int_eq(int_on(th_redis_cluster_owner(&cl, rlock_cluster_slot(k, strlen(k))), k),
                         0);
    }
    /* sql/invariant_check.sql over every SKU (NULL): none violates I1 */
    const char *every[] = {NULL};
    PGresult *bad = PQexecParams(pg, sql_text("invariant_check"), 1, NULL, every, NULL, NULL, 0);
    ck_assert_int_eq(PQresultStatus(bad), PGRES_TUPLES_OK);
    ck_assert_int_eq(PQntuples(bad), 0);
    PQclear(bad);
    PQfinish(pg);
    /* a restock, then the master of a bucket is gone (no replica here): the
     * buckets that answer still sell, and the SKU is never called sold out
     * while a bucket cannot be read */
    ck_assert_int_eq(th_admin(d.port, "POST", "/admin/v1/skus/900/stock-adjustments",
                              "{\"delta\": 3, \"reason\": \"restock\"}", &res),
                     0);
    ck_assert_int_eq(res.status, 200);
    char k[KEYS_MAX];
    keys_sku(k, b[2], KEY_STOCK);
    th_redis_server_kill(&cl.node[th_redis_cluster_owner(&cl, rlock_cluster_slot(k, strlen(k)))]);
    int st = th_order(d.port, 900, 3 * 20, 1, NULL, &res); /* bucket 0: its own unit */
    ck_assert_msg(st == 201 || st == 202, "%d %s", st, res.body);
    st = th_order(d.port, 900, 3 * 21, 1, NULL, &res); /* bucket 0 again: bucket 1 gives */
    ck_assert_msg(st == 201 || st == 202, "%d %s", st, res.body);
    st = th_order(d.port, 900, 3 * 22, 1, NULL, &res); /* only the dead bucket has one */
    ck_assert_msg(st == 503, "%d %s", st, res.body);
    ck_assert_int_eq(th_daemon_stop(&d), 0);
    teardown();
}
END_TEST

/* Runs "seckillctl ARGS" with the cluster's redis_url; its output into out
 * (stdout and stderr), its exit status returned. */
static int ctl(const char *args, char *out, size_t cap)
{
    char path[512], cmd[1024];
    snprintf(path, sizeof path, "%s", th_env("SECKILL_TEST_DAEMON"));
    char *slash = strrchr(path, '/');
    ck_assert_ptr_nonnull(slash);
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "seckillctl");
    snprintf(cmd, sizeof cmd, "SECKILL_REDIS_URL='%s' '%s' %s 2>&1", cfg.redis_url, path, args);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* seckillctl's lock commands on a cluster: the list reads every master,
 * inspect and force-release go to the key's own. */
START_TEST(test_seckillctl_sees_locks_on_every_master)
{
    setup();
    char keys[MASTERS][KEYS_MAX], out[8192], args[KEYS_MAX + 64];
    struct rlock locks[MASTERS];
    memset(locks, 0, sizeof locks); /* the lock API starts from an empty struct */
    struct rlock_opts o = {.ttl_ms = 60000};
    for (int m = 0; m < MASTERS; m++) {
        keys_sku(keys[m], sku_on(m), KEY_SKU_LOCK);
        redisContext *c = redis_conn_get_for(&rc, keys[m]);
        ck_assert_ptr_nonnull(c);
        ck_assert_int_eq(rlock_acquire(c, &locks[m], keys[m], &o), RLOCK_OK);
    }
    ck_assert_int_eq(ctl("lock list", out, sizeof out), 0);
    for (int m = 0; m < MASTERS; m++) {
        ck_assert_msg(strstr(out, keys[m]) != NULL, "%s missing from:\n%s", keys[m], out);
        ck_assert_msg(strstr(out, locks[m].token) != NULL, "%s", out);
    }
    snprintf(args, sizeof args, "lock inspect '%s'", keys[2]);
    ck_assert_int_eq(ctl(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, locks[2].token) != NULL, "%s", out);
    snprintf(args, sizeof args, "lock force-release '%s' --yes", keys[1]);
    ck_assert_int_eq(ctl(args, out, sizeof out), 0);
    char type[32];
    on_master(1, keys[1], type, sizeof type);
    ck_assert_str_eq(type, "");
    for (int m = 0; m < MASTERS; m++)
        rlock_clear(&locks[m]);
    teardown();
}
END_TEST

/* Runs the loop until *flag is set or ms passed. */
static void loop_until(struct event_base *base, const int *flag, int ms)
{
    for (int waited = 0; waited < ms && !*flag; waited += 10) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
}

struct async_result {
    int done;
    long long value;
    char err[160];
};

static void on_script(redisReply *r, enum redis_async_status st, void *arg)
{
    struct async_result *res = arg;
    res->done = 1;
    if (r && r->type == REDIS_REPLY_INTEGER)
        res->value = r->integer;
    else
        snprintf(res->err, sizeof res->err, "status %d: %s", (int)st, r && r->str ? r->str : "");
}

struct sub_result {
    int subscribed, got;
    char payload[64];
};

static void on_message(const char *payload, size_t len, void *arg)
{
    struct sub_result *res = arg;
    if (!payload) {
        res->subscribed++;
        return;
    }
    snprintf(res->payload, sizeof res->payload, "%.*s", (int)len, payload);
    res->got = 1;
}

static const char incr_body[] = "return redis.call('INCR', KEYS[1])";

/* The event loops' client on a cluster: a script follows its slot to its
 * new master (MOVED), and a subscription moves off a master that dies. */
START_TEST(test_async_scripts_and_subscriptions_follow_the_cluster)
{
    setup();
    struct event_base *base = event_base_new();
    char err[320];
    struct redis_async *ra = redis_async_new(base, &cfg, err, sizeof err);
    ck_assert_msg(ra != NULL, "%s", err);
    struct rlock_script s;
    rlock_script_init(&s, "incr", incr_body, sizeof incr_body - 1);
    char key[KEYS_MAX];
    keys_sku(key, sku_on(2), KEY_STOCK);
    const char *argv[] = {key};
    struct async_result res = {0};
    for (int i = 0; i < 100 && res.value != 1; i++) { /* until the node clients are up */
        memset(&res, 0, sizeof res);
        redis_async_script(ra, &s, 1, 0, argv, NULL, on_script, &res);
        loop_until(base, &res.done, 2000);
        if (res.value != 1)
            loop_until(base, &(int){0}, 20);
    }
    ck_assert_msg(res.value == 1, "%s", res.err);

    /* the key's slot moves from master 2 to master 0 */
    move_slot(key, 2, 0);
    redisContext *a[MASTERS];
    for (int m = 0; m < MASTERS; m++)
        a[m] = th_redis_server_connect(&cl.node[m]);
    redisReply *r;
    memset(&res, 0, sizeof res);
    redis_async_script(ra, &s, 1, 0, argv, NULL, on_script, &res);
    loop_until(base, &res.done, 5000);
    ck_assert_msg(res.value == 2, "after MOVED: %s", res.err);
    r = redisCommand(a[0], "GET %s", key);
    ck_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "2") == 0);
    freeReplyObject(r);
    redis_async_free(ra);

    /* a subscriber: its node dies, the subscription moves to another */
    struct redis_async *sub = redis_async_new(base, &cfg, err, sizeof err);
    ck_assert_msg(sub != NULL, "%s", err);
    struct sub_result got = {0};
    redis_async_subscribe(sub, "seckill:test-channel", on_message, &got);
    loop_until(base, &got.subscribed, 5000);
    ck_assert_int_eq(got.subscribed, 1);
    th_redis_server_kill(&cl.node[th_redis_cluster_owner(&cl, 0)]); /* slot 0's: the one asked */
    for (int i = 0; i < 100 && got.subscribed < 2; i++)
        loop_until(base, &(int){0}, 50);
    ck_assert_msg(got.subscribed == 2, "the subscription did not move");
    int live = th_redis_cluster_owner(&cl, 0) == 1 ? 2 : 1;
    for (int i = 0; i < 50 && !got.got; i++) {
        r = redisCommand(a[live], "PUBLISH seckill:test-channel hello");
        freeReplyObject(r);
        loop_until(base, &got.got, 100);
    }
    ck_assert_str_eq(got.payload, "hello");
    redis_async_free(sub);
    for (int m = 0; m < MASTERS; m++)
        redisFree(a[m]);
    event_base_free(base);
    teardown();
}
END_TEST

static const char mget_body[] = "return redis.call('MGET', KEYS[1], KEYS[2])";

struct mget_result {
    int done;
    char got[160];
};

static void on_mget(redisReply *r, enum redis_async_status st, void *arg)
{
    struct mget_result *res = arg;
    res->done = 1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(res->got, sizeof res->got, "%s,%s", r->element[0]->str, r->element[1]->str);
    else
        snprintf(res->got, sizeof res->got, "status %d: %s", (int)st, r && r->str ? r->str : "");
}

/* The event loops' client on a cluster: a script whose two keys a
 * migration split is answered TRYAGAIN, pauses and goes again (within its
 * redis_timeout_ms) until the migration ends, then follows the MOVED: the
 * caller gets both values, not the TRYAGAIN. */
START_TEST(test_async_scripts_wait_out_tryagain)
{
    setup();
    char err[320];
    ck_assert(cfg_set(&cfg, "redis_timeout_ms", "5000", err, sizeof err) == 0);
    struct event_base *base = event_base_new();
    struct redis_async *ra = redis_async_new(base, &cfg, err, sizeof err);
    ck_assert_msg(ra != NULL, "%s", err);
    struct rlock_script s;
    rlock_script_init(&s, "mget", mget_body, sizeof mget_body - 1);
    const char *argv[] = {"{split}a", "{split}b"};
    unsigned slot = rlock_cluster_slot(argv[0], strlen(argv[0]));
    int from = th_redis_cluster_owner(&cl, slot), to = (from + 1) % MASTERS;
    redisContext *a[MASTERS];
    for (int m = 0; m < MASTERS; m++)
        a[m] = th_redis_server_connect(&cl.node[m]);
    redisReply *r = redisCommand(a[from], "MSET {split}a va {split}b vb");
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    struct mget_result res = {0};
    for (int i = 0; i < 100 && strcmp(res.got, "va,vb") != 0; i++) { /* the node clients up */
        memset(&res, 0, sizeof res);
        redis_async_script(ra, &s, 2, 0, argv, NULL, on_mget, &res);
        loop_until(base, &res.done, 2000);
        if (strcmp(res.got, "va,vb") != 0)
            loop_until(base, &(int){0}, 20);
    }
    ck_assert_str_eq(res.got, "va,vb");

    /* {split}a moves to master 'to', {split}b not yet */
    r = redisCommand(a[to], "CLUSTER SETSLOT %u IMPORTING %s", slot, cl.id[from]);
    freeReplyObject(r);
    r = redisCommand(a[from], "CLUSTER SETSLOT %u MIGRATING %s", slot, cl.id[to]);
    freeReplyObject(r);
    r = redisCommand(a[from], "MIGRATE 127.0.0.1 %d {split}a 0 5000", cl.node[to].port);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    long long before = th_redis_error_count(a[from], "TRYAGAIN");
    memset(&res, 0, sizeof res);
    redis_async_script(ra, &s, 2, 0, argv, NULL, on_mget, &res);
    int ended = 0;
    for (int waited = 0; waited < 10000 && !res.done; waited += 10) {
        loop_until(base, &res.done, 10);
        if (ended || th_redis_error_count(a[from], "TRYAGAIN") == before)
            continue;
        /* it said TRYAGAIN: the migration ends while the script waits */
        r = redisCommand(a[from], "MIGRATE 127.0.0.1 %d {split}b 0 5000", cl.node[to].port);
        ck_assert(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
        for (int m = 0; m < MASTERS; m++) {
            r = redisCommand(a[m], "CLUSTER SETSLOT %u NODE %s", slot, cl.id[to]);
            ck_assert(r && r->type == REDIS_REPLY_STATUS);
            freeReplyObject(r);
        }
        ended = 1;
    }
    ck_assert_msg(ended, "the node never said TRYAGAIN (%s)", res.got);
    ck_assert_str_eq(res.got, "va,vb");
    ck_assert_int_eq(redis_async_pending(ra), 0);
    redis_async_free(ra);
    for (int m = 0; m < MASTERS; m++)
        redisFree(a[m]);
    event_base_free(base);
    teardown();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cluster_conn");
    TCase *tc = tcase_create("cluster_conn");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_commands_reach_the_master_of_their_keys);
    tcase_add_test(tc, test_a_pipeline_across_slots_keeps_its_order);
    tcase_add_test(tc, test_a_sku_lock_lives_on_the_sku_master);
    tcase_add_test(tc, test_a_sku_lock_follows_its_slot);
    tcase_add_test(tc, test_the_watchdog_renews_locks_on_every_master);
    tcase_add_test(tc, test_seckillctl_sees_locks_on_every_master);
    tcase_add_test(tc, test_async_scripts_and_subscriptions_follow_the_cluster);
    tcase_add_test(tc, test_async_scripts_wait_out_tryagain);
    tcase_add_test(tc, test_a_sale_on_a_cluster);
    tcase_add_test(tc, test_a_sku_in_buckets_on_every_master);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run(suite());
}
