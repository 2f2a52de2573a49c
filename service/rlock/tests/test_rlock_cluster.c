/*
 * The cluster client (rlock/cluster.h): the slot function against the
 * values Redis itself computes, then a real three-master Redis Cluster
 * started by the test (th_redis_cluster_start: harness_redis.h servers with
 * cluster-enabled, slots assigned and nodes introduced with CLUSTER
 * ADDSLOTSRANGE and CLUSTER MEET): routing, MOVED after a slot changed
 * owner behind the client's back, ASK during a migration, scripts loaded
 * where they are missing, a dead master that fails fast instead of hanging,
 * a multi-key command waiting out the TRYAGAIN of a migration that split
 * its keys, and the lock calls (rlock_cluster_lock(),
 * rlock_cluster_release()) following MOVED and ASK.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness_redis.h"
#include "harness_rlock.h"
#include <rlock/cluster.h>
#include <rlock/script.h>
#include <rlock/url.h>
#include <rlock/watch.h>

#define MASTERS 3

static struct th_redis_cluster cl;
static redisContext *admin[MASTERS];

#define nodes cl.node
#define ids cl.id

static void cluster_start(void)
{
    th_redis_cluster_start(&cl, MASTERS);
    for (int i = 0; i < MASTERS; i++)
        admin[i] = th_redis_server_connect(&cl.node[i]);
}

static void cluster_stop(void)
{
    for (int i = 0; i < MASTERS; i++) {
        redisFree(admin[i]);
        admin[i] = NULL;
    }
    th_redis_cluster_stop(&cl);
}

/* A client with tryagain_ms as given. */
static struct rlock_cluster *client_pausing(int tryagain_ms)
{
    char url[128], err[320];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", nodes[1].port); /* one seed */
    struct rlock_url u;
    ck_assert_msg(rlock_url_parse(url, &u, err, sizeof err) == 0, "%s", err);
    struct rlock_cluster_opts o = {
        .connect_timeout_ms = 500, .io_timeout_ms = 1000, .tryagain_ms = tryagain_ms};
    struct rlock_cluster *c = rlock_cluster_new(&u, &o, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    return c;
}

static struct rlock_cluster *client(void)
{
    return client_pausing(20);
}

/* The master (0..2) whose range holds slot. */
static int owner_of(unsigned slot)
{
    return th_redis_cluster_owner(&cl, slot);
}

/* A key "k<n>" whose slot belongs to master m. */
static void key_on(int m, char *out, size_t cap)
{
    for (int n = 0;; n++) {
        snprintf(out, cap, "k%d", n);
        if (owner_of(rlock_cluster_slot(out, strlen(out))) == m)
            return;
    }
}

static redisReply *cmd(struct rlock_cluster *c, const char *a0, const char *a1, const char *a2)
{
    const char *argv[] = {a0, a1, a2};
    char err[320];
    redisReply *r = rlock_cluster_command(c, rlock_cluster_slot(a1, strlen(a1)), a2 ? 3 : 2, argv,
                                          NULL, err, sizeof err);
    ck_assert_msg(r != NULL, "%s %s: %s", a0, a1, err);
    return r;
}

START_TEST(test_slots_are_redis_cluster_slots)
{
    /* the CRC of the standard check string, and slots CLUSTER KEYSLOT gives */
    ck_assert_uint_eq(rlock_crc16("123456789", 9), 0x31c3);
    ck_assert_uint_eq(rlock_cluster_slot("foo", 3), 12182);
    ck_assert_uint_eq(rlock_cluster_slot("bar", 3), 5061);
    ck_assert_uint_eq(rlock_cluster_slot("", 0), 0);
    /* a hash tag: only what is between the first { and the next } counts */
    ck_assert_uint_eq(rlock_cluster_slot("{user1000}.following", 20),
                      rlock_cluster_slot("user1000", 8));
    ck_assert_uint_eq(rlock_cluster_slot("{user1000}.following", 20),
                      rlock_cluster_slot("{user1000}.followers", 20));
    ck_assert_uint_eq(rlock_cluster_slot("foo{}{bar}", 10), rlock_crc16("foo{}{bar}", 10) & 16383);
    ck_assert_uint_eq(rlock_cluster_slot("foo{{bar}}zap", 13), rlock_cluster_slot("{bar", 4));
    ck_assert_uint_eq(rlock_cluster_slot("foo{bar}{zap}", 13), rlock_cluster_slot("bar", 3));
    ck_assert_uint_eq(rlock_cluster_slot("{sku:7}:stock", 13),
                      rlock_cluster_slot("{sku:7}:orders", 14));
    /* against the server (a cluster node answers CLUSTER KEYSLOT alone) */
    struct th_redis_cluster one;
    th_redis_cluster_start(&one, 1);
    redisContext *c = th_redis_server_connect(&one.node[0]);
    for (int i = 0; i < 200; i++) {
        char key[32];
        snprintf(key, sizeof key, i % 2 ? "seckill:{sku:%d}:x" : "key-%d", i * 7919);
        redisReply *r = redisCommand(c, "CLUSTER KEYSLOT %s", key);
        ck_assert_msg(r && r->type == REDIS_REPLY_INTEGER, "%s", r ? r->str : c->errstr);
        ck_assert_uint_eq(rlock_cluster_slot(key, strlen(key)), (unsigned)r->integer);
        freeReplyObject(r);
    }
    redisFree(c);
    th_redis_cluster_stop(&one);
}
END_TEST

START_TEST(test_urls_of_a_cluster)
{
    struct rlock_url u;
    char err[320];
    ck_assert(rlock_url_parse("redis-cluster://app:pw@10.0.0.1:7000,10.0.0.2,node-3:7002", &u, err,
                              sizeof err) == 0);
    ck_assert_int_eq(u.nseeds, 3);
    ck_assert_str_eq(u.seed[0].host, "10.0.0.1");
    ck_assert_int_eq(u.seed[0].port, 7000);
    ck_assert_int_eq(u.seed[1].port, 6379);
    ck_assert_str_eq(u.user, "app");
    ck_assert_str_eq(u.host, "");
    ck_assert(rlock_url_parse("redis-cluster://h:1/0", &u, err, sizeof err) == 0);
    ck_assert(rlock_url_parse("redis-cluster://h:1/3", &u, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "database 0") != NULL, "%s", err);
    ck_assert(rlock_url_parse("redis-cluster://", &u, err, sizeof err) == -1);
    /* one connection cannot serve a cluster */
    ck_assert(rlock_url_parse("redis-cluster://127.0.0.1:1", &u, err, sizeof err) == 0);
    ck_assert_ptr_null(rlock_url_connect(&u, 100, 100, err, sizeof err));
    ck_assert_msg(strstr(err, "cluster") != NULL, "%s", err);
}
END_TEST

/* A reply's kind, as the library and the service read it: by its first
 * word whole, then a space or the end. */
static enum rlock_reply_kind kind_of(int type, const char *str)
{
    redisReply r = {.type = type, .str = (char *)str, .len = strlen(str)};
    return rlock_reply_kind(&r);
}

START_TEST(test_reply_words)
{
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "MOVED 3999 127.0.0.1:6381"), RLOCK_REPLY_MOVED);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "ASK 3999 127.0.0.1:6381"), RLOCK_REPLY_ASK);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "TRYAGAIN"), RLOCK_REPLY_TRYAGAIN);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "CLUSTERDOWN The cluster is down"),
                     RLOCK_REPLY_CLUSTERDOWN);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "ASKING is not a redirect"), RLOCK_REPLY_ERROR);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "MOVE"), RLOCK_REPLY_ERROR);
    ck_assert_int_eq(kind_of(REDIS_REPLY_STATUS, "MOVED 1 h:1"), RLOCK_REPLY_VALUE);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "ERR MOVED"), RLOCK_REPLY_ERROR);
    ck_assert_int_eq(rlock_reply_kind(NULL), RLOCK_REPLY_NONE);
    /* the others the library and the service act on */
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "NOSCRIPT No matching script."),
                     RLOCK_REPLY_NOSCRIPT);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "ERR Function not found"), RLOCK_REPLY_NO_FUNCTION);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "OOM command not allowed when used memory > "
                                                "'maxmemory'."),
                     RLOCK_REPLY_OOM);
    ck_assert_int_eq(kind_of(REDIS_REPLY_ERROR, "READONLY You can't write against a read only "
                                                "replica."),
                     RLOCK_REPLY_READONLY);
}
END_TEST

START_TEST(test_redirect_names_slot_and_node)
{
    struct rlock_cluster_redirect to;
    ck_assert_int_eq(rlock_cluster_redirect_parse("MOVED 3999 127.0.0.1:6381", &to), 0);
    ck_assert_int_eq(to.kind, RLOCK_REPLY_MOVED);
    ck_assert_uint_eq(to.slot, 3999);
    ck_assert_str_eq(to.host, "127.0.0.1");
    ck_assert_int_eq(to.port, 6381);
    ck_assert_int_eq(rlock_cluster_redirect_parse("ASK 0 ::1:7000", &to), 0);
    ck_assert_int_eq(to.kind, RLOCK_REPLY_ASK);
    ck_assert_str_eq(to.host, "::1");
    ck_assert_int_eq(to.port, 7000);
    /* neither, or not a place to go */
    ck_assert_int_eq(rlock_cluster_redirect_parse("TRYAGAIN", &to), -1);
    ck_assert_int_eq(rlock_cluster_redirect_parse("MOVED 16384 h:1", &to), -1);
    ck_assert_int_eq(rlock_cluster_redirect_parse("MOVED 1 h:0", &to), -1);
    ck_assert_int_eq(rlock_cluster_redirect_parse("MOVED 1 :1", &to), -1);
    ck_assert_int_eq(rlock_cluster_redirect_parse("MOVED 1", &to), -1);
}
END_TEST

/* The one redirect rule: MOVED and ASK capped together, TRYAGAIN apart
 * (by count without a deadline, by the deadline with one), anything else
 * delivered. */
START_TEST(test_one_redirect_rule_caps_hops_and_tryagain)
{
    struct rlock_cluster_redirect to;
    struct rlock_cluster_redirects rd = {.tryagain_ms = 20};
    for (int i = 0; i < RLOCK_CLUSTER_MAX_REDIRECTS; i++) {
        int moved = i % 2 == 0;
        ck_assert_int_eq(rlock_cluster_follow(&rd, moved ? RLOCK_REPLY_MOVED : RLOCK_REPLY_ASK,
                                              moved ? "MOVED 7 h:6380" : "ASK 7 h:6381", 0, &to),
                         moved ? RLOCK_CLUSTER_MOVED : RLOCK_CLUSTER_ASK);
        ck_assert_int_eq(to.port, moved ? 6380 : 6381);
    }
    /* one more is the caller's to deliver; TRYAGAIN counts apart */
    ck_assert_int_eq(rlock_cluster_follow(&rd, RLOCK_REPLY_MOVED, "MOVED 7 h:6380", 0, &to),
                     RLOCK_CLUSTER_DELIVER);
    for (int i = 0; i < RLOCK_CLUSTER_MAX_REDIRECTS; i++)
        ck_assert_int_eq(rlock_cluster_follow(&rd, RLOCK_REPLY_TRYAGAIN, "TRYAGAIN x", 0, &to),
                         RLOCK_CLUSTER_TRYAGAIN);
    ck_assert_int_eq(rlock_cluster_follow(&rd, RLOCK_REPLY_TRYAGAIN, "TRYAGAIN x", 0, &to),
                     RLOCK_CLUSTER_DELIVER);
    /* with a deadline, TRYAGAIN while the pause ends before it */
    struct rlock_cluster_redirects dl = {.deadline_ms = 1000, .tryagain_ms = 20};
    for (int i = 0; i < 3 * RLOCK_CLUSTER_MAX_REDIRECTS; i++)
        ck_assert_int_eq(rlock_cluster_follow(&dl, RLOCK_REPLY_TRYAGAIN, "TRYAGAIN x", 500, &to),
                         RLOCK_CLUSTER_TRYAGAIN);
    ck_assert_int_eq(rlock_cluster_follow(&dl, RLOCK_REPLY_TRYAGAIN, "TRYAGAIN x", 980, &to),
                     RLOCK_CLUSTER_DELIVER);
    /* a redirect whose target cannot be read (or was cut), and any other answer */
    struct rlock_cluster_redirects fresh = {0};
    ck_assert_int_eq(rlock_cluster_follow(&fresh, RLOCK_REPLY_MOVED, "MOVED 1", 0, &to),
                     RLOCK_CLUSTER_DELIVER);
    ck_assert_int_eq(rlock_cluster_follow(&fresh, RLOCK_REPLY_ASK, NULL, 0, &to),
                     RLOCK_CLUSTER_DELIVER);
    ck_assert_int_eq(rlock_cluster_follow(&fresh, RLOCK_REPLY_VALUE, NULL, 0, &to),
                     RLOCK_CLUSTER_DELIVER);
    ck_assert_int_eq(rlock_cluster_follow(&fresh, RLOCK_REPLY_CLUSTERDOWN, "CLUSTERDOWN x", 0, &to),
                     RLOCK_CLUSTER_DELIVER);
    ck_assert_int_eq(fresh.hops + fresh.tries, 0);
}
END_TEST

START_TEST(test_every_key_goes_to_the_master_of_its_slot)
{
    cluster_start();
    struct rlock_cluster *c = client();
    for (int m = 0; m < MASTERS; m++) {
        char key[32];
        key_on(m, key, sizeof key);
        redisReply *r = cmd(c, "SET", key, "v");
        ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
        /* it is on that master: a plain GET there answers, no MOVED */
        r = redisCommand(admin[m], "GET %s", key);
        ck_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "v") == 0);
        freeReplyObject(r);
    }
    ck_assert_uint_eq(rlock_cluster_redirects(c), 0);
    char err[320];
    ck_assert_int_eq(rlock_cluster_nmasters(c, err, sizeof err), MASTERS);
    /* keys of different slots in one command: the server's CROSSSLOT */
    char k0[32], k2[32];
    key_on(0, k0, sizeof k0);
    key_on(2, k2, sizeof k2);
    const char *mget[] = {"MGET", k0, k2};
    redisReply *r = rlock_cluster_command(c, rlock_cluster_slot(k0, strlen(k0)), 3, mget, NULL, err,
                                          sizeof err);
    ck_assert(r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "CROSSSLOT", 9) == 0);
    freeReplyObject(r);
    rlock_cluster_free(c);
    cluster_stop();
}
END_TEST

/* Moves slot (and its keys) from master 'from' to master 'to', as redis-cli
 * --cluster reshard does; with 'half' it stops midway: the slot MIGRATING
 * on 'from' and IMPORTING on 'to', key 'moved' already on 'to'. */
static void migrate_slot(unsigned slot, int from, int to, const char *moved, int half)
{
    redisReply *r = redisCommand(admin[to], "CLUSTER SETSLOT %u IMPORTING %s", slot, ids[from]);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(admin[from], "CLUSTER SETSLOT %u MIGRATING %s", slot, ids[to]);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(admin[from], "MIGRATE 127.0.0.1 %d %s 0 5000", nodes[to].port, moved);
    ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "MIGRATE: %s", r ? r->str : "");
    freeReplyObject(r);
    if (half)
        return;
    for (int i = 0; i < MASTERS; i++) {
        r = redisCommand(admin[i], "CLUSTER SETSLOT %u NODE %s", slot, ids[to]);
        ck_assert(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
}

START_TEST(test_moved_and_ask_are_followed)
{
    cluster_start();
    struct rlock_cluster *c = client();
    char key[32];
    key_on(0, key, sizeof key);
    unsigned slot = rlock_cluster_slot(key, strlen(key));
    redisReply *r = cmd(c, "SET", key, "one");
    freeReplyObject(r);
    ck_assert_uint_eq(rlock_cluster_redirects(c), 0);

    /* ASK: mid-migration, the key is on the importing node already */
    migrate_slot(slot, 0, 1, key, 1);
    r = cmd(c, "GET", key, NULL);
    ck_assert(r->type == REDIS_REPLY_STRING && strcmp(r->str, "one") == 0);
    freeReplyObject(r);
    ck_assert_uint_eq(rlock_cluster_redirects(c), 1);
    /* a key of the slot not migrated yet: still on the old owner */
    char other[48];
    for (int n = 0;; n++) {
        snprintf(other, sizeof other, "o%d", n);
        if (rlock_cluster_slot(other, strlen(other)) == slot)
            break;
    }
    r = cmd(c, "SET", other, "x");
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);

    /* MOVED: the migration ends; the client's map still names master 0 */
    r = redisCommand(admin[0], "MIGRATE 127.0.0.1 %d %s 0 5000", nodes[1].port, other);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    for (int i = 0; i < MASTERS; i++) {
        r = redisCommand(admin[i], "CLUSTER SETSLOT %u NODE %s", slot, ids[1]);
        ck_assert(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    unsigned long before = rlock_cluster_redirects(c);
    r = cmd(c, "SET", key, "two");
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    ck_assert_uint_eq(rlock_cluster_redirects(c), before + 1);
    r = redisCommand(admin[1], "GET %s", key);
    ck_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "two") == 0);
    freeReplyObject(r);
    /* the map was read again: no more redirects for that slot */
    r = cmd(c, "GET", other, NULL);
    ck_assert(r->type == REDIS_REPLY_STRING && strcmp(r->str, "x") == 0);
    freeReplyObject(r);
    ck_assert_uint_eq(rlock_cluster_redirects(c), before + 1);
    rlock_cluster_free(c);
    cluster_stop();
}
END_TEST

/* A multi-key command while a migration splits its keys: the node answers
 * TRYAGAIN until the migration ends, and the client pauses and sends it
 * again meanwhile (a thread ends the migration once the node has said
 * TRYAGAIN), then follows the MOVED that comes after. */
struct finish_arg {
    unsigned slot;
    int from, to;
    const char *rest; /* the key still on 'from' */
    int saw_tryagain;
};

static void *finish_migration(void *arg)
{
    struct finish_arg *f = arg;
    redisContext *a[MASTERS];
    for (int i = 0; i < MASTERS; i++)
        a[i] = th_redis_server_connect(&nodes[i]);
    for (int waited = 0; waited < 20000 && !f->saw_tryagain; waited += 5) {
        f->saw_tryagain = th_redis_error_count(a[f->from], "TRYAGAIN") > 0;
        if (!f->saw_tryagain)
            th_sleep_ms(5);
    }
    redisReply *r =
        redisCommand(a[f->from], "MIGRATE 127.0.0.1 %d %s 0 5000", nodes[f->to].port, f->rest);
    freeReplyObject(r);
    for (int i = 0; i < MASTERS; i++) {
        r = redisCommand(a[i], "CLUSTER SETSLOT %u NODE %s", f->slot, ids[f->to]);
        freeReplyObject(r);
        redisFree(a[i]);
    }
    return NULL;
}

START_TEST(test_tryagain_is_waited_out)
{
    cluster_start();
    /* long pauses: the thread has several of them to end the migration in */
    struct rlock_cluster *c = client_pausing(400);
    const char *ka = "{split}a", *kb = "{split}b";
    unsigned slot = rlock_cluster_slot(ka, strlen(ka));
    int from = owner_of(slot), to = (from + 1) % MASTERS;
    redisReply *r = cmd(c, "SET", ka, "va");
    freeReplyObject(r);
    r = cmd(c, "SET", kb, "vb");
    freeReplyObject(r);
    migrate_slot(slot, from, to, ka, 1); /* {split}a moved, {split}b not yet */
    struct finish_arg f = {.slot = slot, .from = from, .to = to, .rest = kb};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, finish_migration, &f), 0);
    const char *argv[] = {"MGET", ka, kb};
    char err[320];
    r = rlock_cluster_command(c, slot, 3, argv, NULL, err, sizeof err);
    pthread_join(th, NULL);
    ck_assert_msg(f.saw_tryagain, "the node never said TRYAGAIN");
    ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "%s",
                  r ? (r->str ? r->str : "not an array") : err);
    ck_assert(r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "va") == 0);
    ck_assert(r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, "vb") == 0);
    freeReplyObject(r);
    rlock_cluster_free(c);
    cluster_stop();
}
END_TEST

/* A lock call through rlock_cluster_lock(): rlock_acquire() on the node. */
struct acquire_call {
    struct rlock *l;
    const char *key;
    const struct rlock_opts *o;
};

static enum rlock_status acquire_on(redisContext *node, void *arg, const char **why)
{
    struct acquire_call *a = arg;
    enum rlock_status st = rlock_acquire(node, a->l, a->key, a->o);
    *why = a->l->err;
    return st;
}

/* key's value on master m, after ASKING (so an importing node answers);
 * NULL when it has none.  The caller frees the reply. */
static redisReply *asking_get(int m, const char *key)
{
    redisReply *r = redisCommand(admin[m], "ASKING");
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(admin[m], "GET %s", key);
    ck_assert_msg(r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL), "%s",
                  r ? r->str : "no reply");
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* The lock calls, which take a node's connection, follow the cluster too:
 * ASK while the lock's slot migrates (the lock taken and released on the
 * importing node, whose scripts are loaded first), MOVED once it moved
 * (taken on the new owner with the client's map still naming the old one,
 * released after the slot moved again under the held lock). */
START_TEST(test_lock_calls_follow_moved_and_ask)
{
    cluster_start();
    struct rlock_cluster *c = client();
    char key[32], err[320] = "";
    key_on(0, key, sizeof key);
    unsigned slot = rlock_cluster_slot(key, strlen(key));
    redisReply *r = cmd(c, "GET", key, NULL); /* the client has its map */
    freeReplyObject(r);
    struct rlock l = {0};
    struct rlock_opts o = {.ttl_ms = 30000};
    struct acquire_call a = {.l = &l, .key = key, .o = &o};

    /* ASK: the slot migrates from master 0 to 1; a free lock is on neither */
    migrate_slot(slot, 0, 1, key, 1);
    ck_assert_msg(rlock_cluster_lock(c, key, 0, acquire_on, &a, err, sizeof err) == RLOCK_OK,
                  "%s / %s", l.err, err);
    r = asking_get(1, key);
    ck_assert_msg(r && strcmp(r->str, l.token) == 0, "not taken on the importing node");
    freeReplyObject(r);
    ck_assert_uint_eq(rlock_cluster_redirects(c), 1);
    ck_assert_int_eq(rlock_cluster_release(c, &l), RLOCK_OK); /* EVALSHA there, after ASKING */
    ck_assert_ptr_null(asking_get(1, key));
    ck_assert_uint_eq(rlock_cluster_redirects(c), 2);

    /* MOVED: the migration ends; the client's map still names master 0 */
    for (int i = 0; i < MASTERS; i++) {
        r = redisCommand(admin[i], "CLUSTER SETSLOT %u NODE %s", slot, ids[1]);
        ck_assert(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    ck_assert_msg(rlock_cluster_lock(c, key, 0, acquire_on, &a, err, sizeof err) == RLOCK_OK,
                  "%s / %s", l.err, err);
    ck_assert_uint_eq(rlock_cluster_redirects(c), 3);
    r = redisCommand(admin[1], "GET %s", key);
    ck_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, l.token) == 0);
    freeReplyObject(r);
    /* the held lock's slot moves on to master 2: the release follows it */
    migrate_slot(slot, 1, 2, key, 0);
    ck_assert_msg(rlock_cluster_release(c, &l) == RLOCK_OK, "%s", l.err);
    ck_assert_uint_eq(rlock_cluster_redirects(c), 4);
    ck_assert_int_eq(l.nkeys, 0);
    r = redisCommand(admin[2], "EXISTS %s", key);
    ck_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0);
    freeReplyObject(r);
    /* a lock never held: refused without a round trip */
    ck_assert_int_eq(rlock_cluster_release(c, &l), RLOCK_NOT_OWNER);
    rlock_cluster_free(c);
    cluster_stop();
}
END_TEST

static const char incr_body[] = "return redis.call('INCRBY', KEYS[1], ARGV[1])";

START_TEST(test_scripts_are_loaded_where_they_are_missing)
{
    cluster_start();
    struct rlock_cluster *c = client();
    struct rlock_script s;
    rlock_script_init(&s, "incr", incr_body, sizeof incr_body - 1);
    char err[320];
    for (int m = 0; m < MASTERS; m++) {
        char key[32];
        key_on(m, key, sizeof key);
        for (int round = 1; round <= 2; round++) { /* NOSCRIPT, then EVALSHA alone */
            const char *argv[] = {key, "5"};
            redisReply *r = rlock_cluster_script(c, &s, 1, 1, argv, NULL, err, sizeof err);
            ck_assert_msg(r && r->type == REDIS_REPLY_INTEGER, "%s", r ? r->str : err);
            ck_assert_int_eq(r->integer, 5 * round);
            freeReplyObject(r);
        }
        redisReply *r = redisCommand(admin[m], "SCRIPT EXISTS %s", s.sha);
        ck_assert(r && r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 1);
        freeReplyObject(r);
    }
    /* mid-migration the importing node gets it too, after ASKING */
    char key[32];
    key_on(2, key, sizeof key);
    migrate_slot(rlock_cluster_slot(key, strlen(key)), 2, 0, key, 1);
    redisReply *r = redisCommand(admin[0], "SCRIPT FLUSH");
    freeReplyObject(r);
    const char *argv[] = {key, "1"};
    r = rlock_cluster_script(c, &s, 1, 1, argv, NULL, err, sizeof err);
    ck_assert_msg(r && r->type == REDIS_REPLY_INTEGER, "%s", r ? r->str : err);
    ck_assert_int_eq(r->integer, 11);
    freeReplyObject(r);
    rlock_cluster_free(c);
    cluster_stop();
}
END_TEST

START_TEST(test_a_dead_master_fails_fast)
{
    cluster_start();
    struct rlock_cluster *c = client();
    char key[32], err[320];
    key_on(2, key, sizeof key);
    redisReply *r = cmd(c, "SET", key, "v");
    freeReplyObject(r);
    th_redis_server_kill(&nodes[2]);
    const char *argv[] = {"GET", key};
    r = rlock_cluster_command(c, rlock_cluster_slot(key, strlen(key)), 2, argv, NULL, err,
                              sizeof err);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(err, "cluster") != NULL, "%s", err);
    /* again: the map says it is master 2's, whom nobody can reach */
    r = rlock_cluster_command(c, rlock_cluster_slot(key, strlen(key)), 2, argv, NULL, err,
                              sizeof err);
    ck_assert_ptr_null(r); /* within the timeouts: the test's own would end a hang */
    /* the other masters still serve their slots */
    char k0[32];
    key_on(0, k0, sizeof k0);
    r = cmd(c, "SET", k0, "v");
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    rlock_cluster_free(c);
    cluster_stop();
}
END_TEST

/* A master dies while the client's connection to it is idle, after its
 * (empty) slot went to another master: the closed connection is noticed
 * before anything is sent, so the command finds the slot's new owner
 * instead of failing once. */
START_TEST(test_a_dead_idle_connection_is_found_before_sending)
{
    cluster_start();
    struct rlock_cluster *c = client();
    char key[32], held[32];
    key_on(2, key, sizeof key);
    for (int n = 0;; n++) { /* another key of master 2, in another slot */
        snprintf(held, sizeof held, "h%d", n);
        unsigned s = rlock_cluster_slot(held, strlen(held));
        if (owner_of(s) == 2 && s != rlock_cluster_slot(key, strlen(key)))
            break;
    }
    redisReply *r = cmd(c, "SET", held, "v"); /* the client now holds a connection to master 2 */
    freeReplyObject(r);
    unsigned slot = rlock_cluster_slot(key, strlen(key));
    for (int i = 0; i < MASTERS; i++) {
        r = redisCommand(admin[i], "CLUSTER SETSLOT %u NODE %s", slot, ids[0]);
        ck_assert(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    th_redis_server_kill(&nodes[2]); /* reaped: its sockets are closed */
    r = cmd(c, "SET", key, "after"); /* asserts a reply */
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(admin[0], "GET %s", key);
    ck_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "after") == 0);
    freeReplyObject(r);
    rlock_cluster_free(c);
    cluster_stop();
}
END_TEST

/* rlock_watchdog_new_cluster(): locks on two masters, a lease of 300 ms,
 * a second of sleep: both held, each renewed on its own master. */
START_TEST(test_the_cluster_watchdog_renews_on_every_master)
{
    cluster_start();
    struct rlock_cluster *c = client();
    char url[128], err[320];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", nodes[0].port);
    struct rlock_url u;
    ck_assert_msg(rlock_url_parse(url, &u, err, sizeof err) == 0, "%s", err);
    struct rlock_watchdog_opts wo = {.lease_ms = 300, .op_timeout_ms = 200};
    struct rlock_watchdog *wd = rlock_watchdog_new_cluster(&u, NULL, &wo, err, sizeof err);
    ck_assert_msg(wd != NULL, "%s", err);
    struct rlock l[2] = {{0}, {0}};
    char key[2][32];
    struct rlock_opts o = {.ttl_ms = 0, .watchdog = wd};
    for (int i = 0; i < 2; i++) {
        key_on(i + 1, key[i], sizeof key[i]);
        redisContext *n =
            rlock_cluster_node(c, rlock_cluster_slot(key[i], strlen(key[i])), err, sizeof err);
        ck_assert_msg(n != NULL, "%s", err);
        ck_assert_int_eq(rlock_acquire(n, &l[i], key[i], &o), RLOCK_OK);
    }
    struct timespec pause = {1, 0};
    nanosleep(&pause, NULL); /* three leases */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rlock_lost(&l[i]), 0);
        redisReply *r = redisCommand(admin[i + 1], "PTTL %s", key[i]);
        ck_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
        freeReplyObject(r);
        redisContext *n =
            rlock_cluster_node(c, rlock_cluster_slot(key[i], strlen(key[i])), err, sizeof err);
        ck_assert_int_eq(rlock_release(n, &l[i]), RLOCK_OK);
    }
    rlock_watchdog_free(wd);
    rlock_cluster_free(c);
    cluster_stop();
}
END_TEST

static Suite *cluster_suite(void)
{
    Suite *s = suite_create("rlock_cluster");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_slots_are_redis_cluster_slots);
    tcase_add_test(tc, test_urls_of_a_cluster);
    tcase_add_test(tc, test_reply_words);
    tcase_add_test(tc, test_redirect_names_slot_and_node);
    tcase_add_test(tc, test_one_redirect_rule_caps_hops_and_tryagain);
    tcase_add_test(tc, test_every_key_goes_to_the_master_of_its_slot);
    tcase_add_test(tc, test_moved_and_ask_are_followed);
    tcase_add_test(tc, test_tryagain_is_waited_out);
    tcase_add_test(tc, test_lock_calls_follow_moved_and_ask);
    tcase_add_test(tc, test_scripts_are_loaded_where_they_are_missing);
    tcase_add_test(tc, test_a_dead_master_fails_fast);
    tcase_add_test(tc, test_a_dead_idle_connection_is_found_before_sending);
    tcase_add_test(tc, test_the_cluster_watchdog_renews_on_every_master);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cluster_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
