/*
 * What a failover that loses writes, or a process stalled at a bad moment,
 * must not break: the Redis writes made after a COMMIT change only the
 * reservation they name (order id, buyer and stream entry), are fenced by the
 * lock's token, and never install an older state over a newer one.  On the
 * real Redis and PostgreSQL of the test stack, the modules called directly so
 * that the interleavings can be arranged; "a replica promoted without the
 * last writes" is the SKU's keys put back to a snapshot taken before them.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/embedded.h"
#include "core/keys.h"
#include "harness.h"
#include "order/order.h"
#include "order/order_life.h"
#include "order/order_lookup.h"
#include "order/order_pending.h"
#include "order/order_writer.h"
#include "sku/pending_settle.h"
#include "sku/sku.h"
#include "store/redis_conn.h"
#include "store/workers.h"
#include <rlock/fence.h>

static struct cfg cfg;

static void setup(void)
{
    th_cfg(&cfg);
    th_reset();
}

static void teardown(void)
{
    cfg_free(&cfg);
}

/* Every key of the SKU's hash tag, and its DUMP, as a replica held them. */
#define SNAP_MAX 64
struct snapshot {
    int64_t sku;
    size_t n;
    char *key[SNAP_MAX];
    redisReply *dump[SNAP_MAX];
};

/* The names of the SKU's keys now (SCAN of its hash tag); returns how many. */
static size_t sku_keys(redisContext *r, int64_t sku, char **out, size_t max)
{
    char match[64];
    snprintf(match, sizeof match, "seckill:{sku:%lld}:*", (long long)sku);
    size_t n = 0;
    char cursor[32] = "0";
    for (int rounds = 0; rounds < 1000; rounds++) {
        redisReply *rep = redisCommand(r, "SCAN %s MATCH %s COUNT 1000", cursor, match);
        ck_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        for (size_t i = 0; i < rep->element[1]->elements; i++) {
            ck_assert_uint_lt(n, max);
            out[n++] = strdup(rep->element[1]->element[i]->str);
        }
        freeReplyObject(rep);
        if (strcmp(cursor, "0") == 0)
            break;
    }
    return n;
}

static void snap_take(struct snapshot *s, int64_t sku)
{
    s->sku = sku;
    redisContext *r = th_redis_admin();
    s->n = sku_keys(r, sku, s->key, SNAP_MAX);
    for (size_t i = 0; i < s->n; i++) {
        s->dump[i] = redisCommand(r, "DUMP %s", s->key[i]);
        ck_assert(s->dump[i] && s->dump[i]->type == REDIS_REPLY_STRING);
    }
    redisFree(r);
}

/* The master died; its replica, promoted, never got the writes made since
 * the snapshot: keys written since are gone, the others as they were. */
static void snap_promote(struct snapshot *s)
{
    redisContext *r = th_redis_admin();
    char *now[SNAP_MAX];
    size_t n = sku_keys(r, s->sku, now, SNAP_MAX);
    for (size_t i = 0; i < n; i++) {
        freeReplyObject(redisCommand(r, "DEL %s", now[i]));
        free(now[i]);
    }
    for (size_t i = 0; i < s->n; i++) {
        redisReply *rep = redisCommand(r, "RESTORE %s 0 %b REPLACE", s->key[i], s->dump[i]->str,
                                       (size_t)s->dump[i]->len);
        ck_assert_msg(rep && rep->type != REDIS_REPLY_ERROR, "restore %s: %s", s->key[i],
                      rep ? rep->str : "no answer");
        freeReplyObject(rep);
        freeReplyObject(s->dump[i]);
        free(s->key[i]);
    }
    redisFree(r);
    /* A failover takes time: the new master's stream entries are later than
     * the lost ones (the same millisecond would give the same entry id: see
     * ARCHITECTURE.md on clocks). */
    th_sleep_ms(5);
}

static char *journal_of(int64_t sku, int64_t order_id, char *out, size_t cap)
{
    char key[KEYS_MAX];
    keys_sku(key, sku, KEY_JOURNAL);
    redisContext *r = th_redis();
    redisReply *rep = redisCommand(r, "HGET %s %lld", key, (long long)order_id);
    snprintf(out, cap, "%s", rep && rep->type == REDIS_REPLY_STRING ? rep->str : "(none)");
    freeReplyObject(rep);
    redisFree(r);
    return out;
}

/* Runs script s with argv (nkeys keys, then nargs arguments) on a connection
 * of the service's own; returns the reply (caller frees). */
static redisReply *run_script(const struct rlock_script *s, int nkeys, int nargs, const char **argv)
{
    struct redis_conn rc;
    char err[160];
    ck_assert_msg(redis_conn_init(&rc, &cfg, err, sizeof err) == 0, "%s", err);
    redisReply *rep = redis_conn_script(&rc, s, nkeys, nargs, argv, NULL);
    redis_conn_close(&rc);
    ck_assert_ptr_nonnull(rep);
    return rep;
}

static void write_batch(struct writer *w, int64_t sku, struct writer_entry *e, size_t n)
{
    ck_assert_int_eq(writer_process_batch(w, sku, e, n), 0);
}

static long long pg_int(const char *sql)
{
    PGconn *c = th_pg();
    long long v = th_pg_int(c, sql);
    PQfinish(c);
    return v;
}

/* Bug 1: a reservation made before a rebuild, dead-lettered after it (its id
 * is another order's in the database), gives nothing back to the rebuilt
 * state, which never counted it, but its buyer must still be told it was
 * refused: its journal state leaves 'pending'. */
START_TEST(test_dead_letter_from_before_a_rebuild_is_refused_not_pending)
{
    th_sku_create_direct(&cfg, 1, 10, 5, 0);
    struct writer w;
    char err[160], state[128];
    ck_assert(writer_init(&w, &cfg, "w", err, sizeof err) == 0);
    int64_t first = th_reserve(&cfg, 1, 1, 1);
    struct writer_entry e[2];
    ck_assert_uint_eq(th_read_entries(1, "w", e, 2), 1);
    write_batch(&w, 1, e, 1);
    /* Redis went back in time: the same id again, for buyer 2. */
    char seq[KEYS_MAX];
    keys_sku(seq, 1, KEY_SEQ);
    redisContext *r = th_redis();
    freeReplyObject(redisCommand(r, "SET %s 0", seq));
    ck_assert_int_eq(th_reserve(&cfg, 1, 2, 1), first);
    /* A rebuild before any writer read it: the new state counts the database. */
    struct worker_ctx wc;
    ck_assert(worker_ctx_init(&wc, &cfg, err, sizeof err) == 0);
    json_t *out = NULL;
    ck_assert_int_eq(sku_reload(&wc, 1, &out), SKU_OK);
    json_decref(out);
    char stock[KEYS_MAX];
    keys_sku(stock, 1, KEY_STOCK);
    long long rebuilt = th_redis_int(r, stock);
    ck_assert_uint_eq(th_read_entries(1, "w", e, 2), 1);
    write_batch(&w, 1, e, 1);
    writer_close(&w);
    ck_assert_msg(strncmp(journal_of(1, first, state, sizeof state), "returned:", 9) == 0,
                  "the dead-lettered order's journal says %s", state);
    ck_assert_int_ge(th_redis_int(r, stock), rebuilt); /* nothing taken twice */
    redisFree(r);
    worker_ctx_close(&wc);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = 1"), 1);
    th_assert_invariants(1);
}
END_TEST

/* Bug 2: writer W read buyer A's order X from a master and stalled; the
 * master died and its replica never got X; buyer B reserved there and got
 * the id X again.  W resumes and commits A's X: its acknowledgement must not
 * take B's journal state with it (B would be told "201 confirmed" with A's
 * order), and B's entry, refused as an id conflict, tells B so. */
START_TEST(test_acknowledgement_leaves_another_reservation_of_the_same_id)
{
    th_sku_create_direct(&cfg, 2, 10, 5, 0);
    struct snapshot before;
    snap_take(&before, 2);
    int64_t x = th_reserve(&cfg, 2, 1, 1); /* buyer A */
    struct writer_entry a, b;
    ck_assert_uint_eq(th_read_entries(2, "w", &a, 1), 1); /* W holds it, stalled */
    snap_promote(&before);
    ck_assert_int_eq(th_reserve(&cfg, 2, 2, 1), x); /* buyer B, the same id */
    char state[128], want[128];
    snprintf(want, sizeof want, "%s", journal_of(2, x, state, sizeof state));
    ck_assert_msg(strncmp(want, "pending:2", 9) == 0, "B's reservation: %s", want);

    struct writer w;
    char err[160];
    ck_assert(writer_init(&w, &cfg, "w", err, sizeof err) == 0);
    write_batch(&w, 2, &a, 1); /* W resumes: A's X is committed */
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = 2 AND user_id = 1 AND "
                            "status = 'confirmed'"),
                     1);
    ck_assert_str_eq(journal_of(2, x, state, sizeof state), want);

    ck_assert_uint_eq(th_read_entries(2, "w", &b, 1), 1);
    write_batch(&w, 2, &b, 1); /* B's X: another order's id, a dead letter */
    writer_close(&w);
    ck_assert_msg(strncmp(journal_of(2, x, state, sizeof state), "returned:", 9) == 0,
                  "B's refused order's journal says %s (absent reads as confirmed)", state);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = 2"), 1);
    th_assert_invariants(2);
}
END_TEST

/* Bug 2's other half: A's X was rejected by the database.  Giving its unit
 * back must not credit the promoted replica, which never took it (B's X
 * holds the unit there). */
START_TEST(test_rejection_gives_back_only_the_reservation_it_names)
{
    th_sku_create_direct(&cfg, 3, 10, 1, 0);
    struct writer w;
    char err[160];
    ck_assert(writer_init(&w, &cfg, "w", err, sizeof err) == 0);
    /* Buyer A (limit 1) already holds a confirmed unit the replica lost. */
    struct writer_entry a, b;
    th_reserve(&cfg, 3, 1, 1);
    ck_assert_uint_eq(th_read_entries(3, "w", &a, 1), 1);
    write_batch(&w, 3, &a, 1);
    char bought[KEYS_MAX], stock[KEYS_MAX];
    keys_sku(bought, 3, KEY_BOUGHT);
    keys_sku(stock, 3, KEY_STOCK);
    redisContext *r = th_redis();
    freeReplyObject(redisCommand(r, "HDEL %s 1", bought)); /* lost */
    struct snapshot before;
    snap_take(&before, 3);
    int64_t x = th_reserve(&cfg, 3, 1, 1); /* over A's limit: the database refuses it */
    ck_assert_int_gt(x, 0);
    ck_assert_uint_eq(th_read_entries(3, "w", &a, 1), 1);
    snap_promote(&before);
    ck_assert_int_eq(th_reserve(&cfg, 3, 2, 1), x); /* B on the promoted replica */
    long long stock_now = th_redis_int(r, stock);
    write_batch(&w, 3, &a, 1); /* A's X rejected: limit_exceeded */
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = 3 AND user_id = 1 AND "
                            "status = 'rejected'"),
                     1);
    ck_assert_int_eq(th_redis_int(r, stock), stock_now); /* no unit it never took */
    char state[128];
    ck_assert_msg(strncmp(journal_of(3, x, state, sizeof state), "pending:2", 9) == 0,
                  "B's reservation: %s", state);
    freeReplyObject(redisCommand(r, "HSET %s 1 1", bought)); /* the reconciler's repair */
    redisFree(r);
    ck_assert_uint_eq(th_read_entries(3, "w", &b, 1), 1);
    write_batch(&w, 3, &b, 1);
    writer_close(&w);
    th_assert_invariants(3);
}
END_TEST

/* Runs sku_load.lua for SKU sku as a rebuild of epoch 'epoch' with stock
 * 'stock', fenced by 'fence' ('<token>:<owner>', '' unfenced), writing back
 * the key 'restore_key' of buyer 'user''s recorded order 'order' (entry
 * 'entry') when restore_key is not NULL; returns its answer (caller frees). */
static redisReply *load_rebuild_full(int64_t sku, long long epoch, long long stock,
                                     const char *fence, const char *restore_key, const char *order,
                                     const char *entry, const char *user)
{
    char keys[10][KEYS_MAX + 8], ep[24], st[24];
    static const enum keys_kind kinds[] = {KEY_META,   KEY_STOCK,  KEY_SEQ,
                                           KEY_STREAM, KEY_BOUGHT, KEY_DEBTS};
    for (int i = 0; i < 6; i++)
        keys_sku(keys[i], sku, kinds[i]);
    keys_sku(keys[6], sku, KEY_SKU_LOCK);
    ck_assert(rlock_fence_key(keys[7], sizeof keys[7], keys[6]) == 0);
    keys_sku(keys[8], sku, KEY_JOURNAL);
    int nkeys = 9;
    if (restore_key)
        snprintf(keys[nkeys++], sizeof keys[9], "%s", restore_key);
    snprintf(ep, sizeof ep, "%lld", epoch);
    snprintf(st, sizeof st, "%lld", stock);
    const char *argv[32];
    int argc = 0;
    for (int i = 0; i < nkeys; i++)
        argv[argc++] = keys[i];
    const char *args[] = {ep, st, "5", "", "",    "writers", "rebuild",
                          "", "", "",  "", fence, "0",       "60"};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        argv[argc++] = args[i];
    if (restore_key) {
        argv[argc++] = order;
        argv[argc++] = entry;
        argv[argc++] = user;
        argv[argc++] = "1";
    }
    return run_script(&script_sku_load, nkeys, argc - nkeys, argv);
}

static redisReply *load_rebuild_fenced(int64_t sku, long long epoch, long long stock,
                                       const char *fence)
{
    return load_rebuild_full(sku, epoch, stock, fence, NULL, NULL, NULL, NULL);
}

static long long load_rebuild(int64_t sku, long long epoch, long long stock)
{
    redisReply *rep = load_rebuild_fenced(sku, epoch, stock, "");
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    long long v = rep->integer;
    freeReplyObject(rep);
    return v;
}

/* Bug 3: rebuild A committed its epoch and stalled past its lease before its
 * load; rebuild B committed a newer epoch and loaded it, and sales went on.
 * A's load, when it resumes, must not install its older snapshot. */
START_TEST(test_late_rebuild_cannot_install_an_older_epoch)
{
    th_sku_create_direct(&cfg, 4, 10, 5, 0);
    long long ea = pg_int("INSERT INTO sku_epochs (epoch, sku_id) "
                          "VALUES (nextval('redis_epoch_seq'), 4) RETURNING epoch");
    long long eb = pg_int("INSERT INTO sku_epochs (epoch, sku_id) "
                          "VALUES (nextval('redis_epoch_seq'), 4) RETURNING epoch");
    ck_assert_int_eq(load_rebuild(4, eb, 10), 1); /* B */
    int64_t id = th_reserve(&cfg, 4, 1, 2);
    ck_assert_int_eq(order_id_epoch(id), eb);
    ck_assert_int_eq(load_rebuild(4, ea, 10), -1); /* A, late: refused */
    ck_assert_int_eq(load_rebuild(4, eb, 10), -1); /* nor the same one twice */
    char stock[KEYS_MAX], meta[KEYS_MAX];
    keys_sku(stock, 4, KEY_STOCK);
    keys_sku(meta, 4, KEY_META);
    redisContext *r = th_redis();
    ck_assert_int_eq(th_redis_int(r, stock), 8); /* B's state, with the sale since */
    redisReply *rep = redisCommand(r, "HGET %s loaded", meta);
    ck_assert_int_eq(atoll(rep->str), eb);
    freeReplyObject(rep);
    redisFree(r);
}
END_TEST

/* A rebuild committed its epoch and paused past its lease; an admin delta
 * took the SKU's lock (a newer token) and moved the stock in both stores.
 * The rebuild's load, newer in epoch than what Redis holds, must still not
 * install its snapshot over the delta: it is fenced by the SKU's lock. */
START_TEST(test_late_rebuild_load_after_a_newer_lock_holder_is_refused)
{
    th_sku_create_direct(&cfg, 10, 10, 5, 0);
    long long epoch = pg_int("INSERT INTO sku_epochs (epoch, sku_id) "
                             "VALUES (nextval('redis_epoch_seq'), 10) RETURNING epoch");
    char lock[KEYS_MAX], counter[KEYS_MAX + 8], stock[KEYS_MAX];
    keys_sku(lock, 10, KEY_SKU_LOCK);
    keys_sku(stock, 10, KEY_STOCK);
    ck_assert(rlock_fence_key(counter, sizeof counter, lock) == 0);
    redisContext *r = th_redis();
    /* the delta's holder: token 200 under owner bbbb...; the rebuild's was 100 */
    freeReplyObject(redisCommand(r, "SET %s 200", counter));
    freeReplyObject(redisCommand(r, "SET %s bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb PX 10000", lock));
    freeReplyObject(redisCommand(r, "INCRBY %s 1", stock)); /* the delta, +1 */
    redisReply *rep = load_rebuild_fenced(10, epoch, 10, "100:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    ck_assert_msg(rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "fenced"),
                  "the late load was answered type %d", rep->type);
    freeReplyObject(rep);
    ck_assert_int_eq(th_redis_int(r, stock), 11); /* the delta stands */
    /* the lock's holder itself loads */
    rep = load_rebuild_fenced(10, epoch, 11, "200:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    ck_assert_int_eq(rep->integer, 1);
    freeReplyObject(rep);
    redisFree(r);
}
END_TEST

/* A rebuild writes a recorded 202's key back in the step that installs its
 * epoch, and only while no other reservation holds the id in the journal:
 * once that epoch is loaded Redis issues none of the old ids again, so the
 * key can never come to name another buyer's order. */
START_TEST(test_rebuild_writes_a_recorded_keys_back_only_for_its_own_reservation)
{
    th_sku_create_direct(&cfg, 11, 10, 5, 0);
    long long e1 = pg_int("INSERT INTO sku_epochs (epoch, sku_id) "
                          "VALUES (nextval('redis_epoch_seq'), 11) RETURNING epoch");
    long long e2 = pg_int("INSERT INTO sku_epochs (epoch, sku_id) "
                          "VALUES (nextval('redis_epoch_seq'), 11) RETURNING epoch");
    char key_a[KEYS_MAX], key_c[KEYS_MAX], journal[KEYS_MAX];
    keys_idem(key_a, 11, 1, "key-of-a");
    keys_idem(key_c, 11, 3, "key-of-c");
    keys_sku(journal, 11, KEY_JOURNAL);
    redisContext *r = th_redis();
    /* order 77: another buyer's reservation holds the id in the journal */
    freeReplyObject(redisCommand(r, "HSET %s 77 pending:2:1700000000002-0", journal));
    redisReply *rep = load_rebuild_full(11, e1, 10, "", key_a, "77", "1700000000001-0", "1");
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    freeReplyObject(rep);
    rep = redisCommand(r, "EXISTS %s", key_a);
    ck_assert_int_eq(rep->integer, 0);
    freeReplyObject(rep);
    /* order 78: nobody else's: its key and pending state come back */
    rep = load_rebuild_full(11, e2, 10, "", key_c, "78", "1700000000003-0", "3");
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    freeReplyObject(rep);
    rep = redisCommand(r, "GET %s", key_c);
    ck_assert_str_eq(rep->str, "3:1|78@1700000000003-0");
    freeReplyObject(rep);
    char state[128];
    ck_assert_str_eq(journal_of(11, 78, state, sizeof state), "pending:3:1700000000003-0");
    redisFree(r);
}
END_TEST

/* Runs order_release.lua (unfenced) for one returned order. */
static long long release(int64_t sku, int64_t order_id, int64_t user, int64_t qty, long long epoch)
{
    char keys[5][KEYS_MAX], lock[KEYS_MAX], counter[KEYS_MAX + 8], oid[24], uid[24], q[24], ep[24];
    static const enum keys_kind kinds[] = {KEY_RELEASED, KEY_STOCK, KEY_BOUGHT, KEY_META,
                                           KEY_DEBTS};
    for (int i = 0; i < 5; i++)
        keys_sku(keys[i], sku, kinds[i]);
    keys_sku(lock, sku, KEY_SKU_LOCK);
    ck_assert(rlock_fence_key(counter, sizeof counter, lock) == 0);
    snprintf(oid, sizeof oid, "%lld", (long long)order_id);
    snprintf(uid, sizeof uid, "%lld", (long long)user);
    snprintf(q, sizeof q, "%lld", (long long)qty);
    snprintf(ep, sizeof ep, "%lld", epoch);
    const char *argv[] = {keys[0], keys[1], keys[2], keys[3], keys[4], lock,       counter,
                          "",      oid,     uid,     q,       ep,      "cancelled"};
    redisReply *rep = run_script(&script_order_release, 7, 6, argv);
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    long long v = rep->integer;
    freeReplyObject(rep);
    return v;
}

/* Bug 4: a return that takes a buyer's units held below zero (Redis lost the
 * take it undoes) keeps the negative balance: dropped, the debt a later load
 * or reapply adds would leave the buyer holding too much and refused. */
START_TEST(test_negative_units_held_are_kept)
{
    th_sku_create_direct(&cfg, 5, 10, 5, 0);
    char meta[KEYS_MAX], bought[KEYS_MAX];
    keys_sku(meta, 5, KEY_META);
    keys_sku(bought, 5, KEY_BOUGHT);
    redisContext *r = th_redis();
    redisReply *rep = redisCommand(r, "HGET %s loaded", meta);
    long long epoch = atoll(rep->str);
    freeReplyObject(rep);
    freeReplyObject(redisCommand(r, "HSET %s 7 1", bought));
    ck_assert_int_eq(release(5, epoch * ORDER_IDS_PER_EPOCH + 900, 7, 3, epoch), 1);
    rep = redisCommand(r, "HGET %s 7", bought);
    ck_assert_msg(rep->type == REDIS_REPLY_STRING && strcmp(rep->str, "-2") == 0,
                  "units held after the return: %s",
                  rep->type == REDIS_REPLY_STRING ? rep->str : "(none)");
    freeReplyObject(rep);
    redisFree(r);
    /* A negative balance gives no extra room: the limit is 5, and what is
     * held is written on top of the debt. */
    ck_assert_int_gt(th_reserve(&cfg, 5, 7, 5), 0);
    r = th_redis();
    rep = redisCommand(r, "HGET %s 7", bought);
    ck_assert_str_eq(rep->str, "3");
    freeReplyObject(rep);
    redisFree(r);
}
END_TEST

/* Bug 5: buyer 1 cancels its pending order X; the master dies before any
 * writer wrote X, and the promoted replica issues X again, to buyer 1 again.
 * That second order was never asked to be cancelled. */
START_TEST(test_cancel_request_names_the_reservation)
{
    th_sku_create_direct(&cfg, 6, 10, 5, 0);
    struct snapshot before;
    snap_take(&before, 6);
    int64_t x = th_reserve(&cfg, 6, 1, 1);
    struct worker_ctx wc;
    char err[160];
    ck_assert(worker_ctx_init(&wc, &cfg, err, sizeof err) == 0);
    json_t *out = NULL;
    ck_assert_int_eq(order_cancel(&wc, x, 1, &out), LIFE_OK);
    json_decref(out);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM order_cancel_requests"), 1);
    snap_promote(&before);
    ck_assert_int_eq(th_reserve(&cfg, 6, 1, 1), x);
    struct writer_entry e;
    ck_assert_uint_eq(th_read_entries(6, "w", &e, 1), 1);
    struct writer w;
    ck_assert(writer_init(&w, &cfg, "w", err, sizeof err) == 0);
    write_batch(&w, 6, &e, 1);
    writer_close(&w);
    PGconn *c = th_pg();
    PGresult *res = PQexec(c, "SELECT status FROM orders WHERE sku_id = 6");
    ck_assert_int_eq(PQntuples(res), 1);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "confirmed");
    PQclear(res);
    PQfinish(c);
    worker_ctx_close(&wc);
    th_assert_invariants(6);
}
END_TEST

/* Runs orders_ack.lua for one entry with fence 'fence'; returns the reply
 * (caller frees). */
static redisReply *ack(int64_t sku, const char *fence, const char *entry)
{
    char keys[5][KEYS_MAX], lock[KEYS_MAX], counter[KEYS_MAX + 8], sku_lock[KEYS_MAX];
    static const enum keys_kind kinds[] = {KEY_STREAM, KEY_JOURNAL, KEY_STOCK, KEY_BOUGHT,
                                           KEY_META};
    for (int i = 0; i < 5; i++)
        keys_sku(keys[i], sku, kinds[i]);
    keys_sku(lock, sku, KEY_WRITER_LOCK);
    keys_sku(sku_lock, sku, KEY_SKU_LOCK);
    ck_assert(rlock_fence_key(counter, sizeof counter, sku_lock) == 0);
    char per_epoch[24];
    snprintf(per_epoch, sizeof per_epoch, "%lld", (long long)ORDER_IDS_PER_EPOCH);
    const char *argv[] = {keys[0], keys[1],           keys[2], keys[3], keys[4],   lock, counter,
                          fence,   KEYS_WRITER_GROUP, "1",     "0",     per_epoch, "ch", "",
                          entry};
    return run_script(&script_orders_ack, 7, 8, argv);
}

/* The Redis writes after a COMMIT carry the lock's token: a holder whose
 * lock a newer one took over (its key holds another owner, the counter a
 * newer token) writes nothing; the holder itself does. */
START_TEST(test_settle_of_a_superseded_writer_is_refused)
{
    th_sku_create_direct(&cfg, 7, 10, 5, 0);
    th_reserve(&cfg, 7, 1, 1);
    struct writer_entry e;
    ck_assert_uint_eq(th_read_entries(7, "w", &e, 1), 1);
    char lock[KEYS_MAX], sku_lock[KEYS_MAX], counter[KEYS_MAX + 8];
    keys_sku(lock, 7, KEY_WRITER_LOCK);
    keys_sku(sku_lock, 7, KEY_SKU_LOCK);
    ck_assert(rlock_fence_key(counter, sizeof counter, sku_lock) == 0);
    redisContext *r = th_redis();
    /* a newer holder: token 200 under owner bbbb..., ours was 100 */
    freeReplyObject(redisCommand(r, "SET %s 200", counter));
    freeReplyObject(redisCommand(r, "SET %s bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb PX 10000", lock));
    redisReply *rep = ack(7, "100:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", e.stream_id);
    ck_assert_msg(rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "fenced"), "got type %d",
                  rep->type);
    freeReplyObject(rep);
    ck_assert_int_eq(th_stream_len(7), 1); /* nothing acknowledged */
    /* the newer holder itself may write */
    rep = ack(7, "200:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", e.stream_id);
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    ck_assert_int_eq(rep->integer, 1);
    freeReplyObject(rep);
    ck_assert_int_eq(th_stream_len(7), 0);
    /* and so may a holder with no newer token drawn since (the lock key
     * lost in a failover) */
    freeReplyObject(redisCommand(r, "DEL %s", lock));
    rep = ack(7, "200:cccccccccccccccccccccccccccccccc", e.stream_id);
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    freeReplyObject(rep);
    redisFree(r);
}
END_TEST

/* reserve.lua for one order of qty 1 with the buyer's own Idempotency-Key;
 * returns its reply's verdict, order id and stream entry. */
static void reserve_keyed(int64_t sku, int64_t user, const char *key, char *word, size_t cap,
                          int64_t *id, char entry[ORDER_ENTRY_MAX])
{
    struct redis_conn rc;
    char err[160];
    ck_assert(redis_conn_init(&rc, &cfg, err, sizeof err) == 0);
    struct order_reserve_call call = {0};
    order_reserve_begin(&call, sku, 60, 60, INT64_MAX);
    order_reserve_add(&call, user, 1, key, 1, 0, 1);
    order_reserve_argv(&call);
    redisReply *r =
        redis_conn_script(&rc, &script_reserve, call.nkeys, call.nargs, call.argv, NULL);
    const redisReply *one = order_reserve_reply_at(r, 1, 0);
    ck_assert(one && one->type == REDIS_REPLY_ARRAY && one->elements >= 2);
    snprintf(word, cap, "%s", one->element[0]->str);
    *id = atoll(one->element[1]->str);
    entry[0] = '\0';
    if (one->elements >= 4 && one->element[3]->type == REDIS_REPLY_STRING)
        snprintf(entry, ORDER_ENTRY_MAX, "%s", one->element[3]->str);
    freeReplyObject(r);
    order_reserve_free(&call);
    redis_conn_close(&rc);
}

/* A durable order answered 202 (recorded in PostgreSQL) whose reservation a
 * failover lost; the promoted replica gives its id to buyer B, whose order a
 * writer confirms.  Buyer A's retry with its key must never be told about
 * B's order, and A's record ends refused (id_conflict), never pending. */
START_TEST(test_recorded_202_of_a_reissued_id_is_never_answered_with_another_order)
{
    th_sku_create_direct(&cfg, 8, 10, 5, 0);
    struct snapshot before;
    snap_take(&before, 8);
    char word[32], entry[ORDER_ENTRY_MAX], err[160];
    int64_t x;
    reserve_keyed(8, 1, "key-of-a", word, sizeof word, &x, entry); /* buyer A */
    ck_assert_str_eq(word, "ok");
    snap_promote(&before); /* the master died; its replica never got X */
    struct worker_ctx wc;
    ck_assert(worker_ctx_init(&wc, &cfg, err, sizeof err) == 0);
    struct order_pending_rec rec = {
        .order_id = x, .sku = 8, .user = 1, .qty = 1, .idem = "key-of-a"};
    snprintf(rec.entry, sizeof rec.entry, "%s", entry);
    ck_assert_int_eq(order_pending_record(&wc, &rec), 0); /* A is answered 202 */
    ck_assert_int_eq(th_reserve(&cfg, 8, 2, 1), x);       /* buyer B, the same id */
    struct writer_entry e;
    ck_assert_uint_eq(th_read_entries(8, "w", &e, 1), 1);
    struct writer w;
    ck_assert(writer_init(&w, &cfg, "w", err, sizeof err) == 0);
    write_batch(&w, 8, &e, 1); /* B's X confirmed and acknowledged */

    int64_t again;
    reserve_keyed(8, 1, "key-of-a", word, sizeof word, &again, entry); /* A retries */
    ck_assert_msg(strcmp(word, "dup") != 0 || again != x,
                  "A's retry was answered with order %lld, which is B's", (long long)x);

    /* The reconciler rebuilds the SKU and settles the record. */
    json_t *out = NULL;
    ck_assert_int_eq(sku_reload(&wc, 8, &out), SKU_OK);
    json_decref(out);
    ck_assert_int_eq(pending_settle_sku(&wc, 8, 0, NULL), 0);
    out = NULL;
    ck_assert_int_eq(order_lookup(&wc, x, 1, &out), ORDER_FOUND);
    ck_assert_str_eq(json_string_value(json_object_get(out, "status")), "rejected");
    json_decref(out);
    char state[128];
    ck_assert_msg(strncmp(journal_of(8, x, state, sizeof state), "pending:1", 9) != 0,
                  "A's order is pending for ever: %s", state);
    /* A's retry, if it reserved anew, is written like any order. */
    size_t n = th_read_entries(8, "w", &e, 1);
    if (n)
        write_batch(&w, 8, &e, n);
    writer_close(&w);
    worker_ctx_close(&wc);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM orders WHERE sku_id = 8 AND id = "
                            "(SELECT min(id) FROM orders WHERE sku_id = 8) AND user_id = 2"),
                     1);
    th_assert_invariants(8);
}
END_TEST

/* A 202 recorded in PostgreSQL whose reservation a failover lost: its
 * lookup says pending, so its buyer may cancel it, and the settler writes it
 * cancelled. */
START_TEST(test_recorded_202_whose_reservation_redis_lost_can_be_cancelled)
{
    th_sku_create_direct(&cfg, 9, 10, 5, 0);
    struct snapshot before;
    snap_take(&before, 9);
    char word[32], entry[ORDER_ENTRY_MAX], err[160];
    int64_t x;
    reserve_keyed(9, 1, "key-of-a", word, sizeof word, &x, entry);
    ck_assert_str_eq(word, "ok");
    struct worker_ctx wc;
    ck_assert(worker_ctx_init(&wc, &cfg, err, sizeof err) == 0);
    struct order_pending_rec rec = {
        .order_id = x, .sku = 9, .user = 1, .qty = 1, .idem = "key-of-a"};
    snprintf(rec.entry, sizeof rec.entry, "%s", entry);
    ck_assert_int_eq(order_pending_record(&wc, &rec), 0);
    snap_promote(&before);
    json_t *out = NULL;
    ck_assert_int_eq(order_lookup(&wc, x, 1, &out), ORDER_FOUND);
    ck_assert_str_eq(json_string_value(json_object_get(out, "status")), "pending");
    json_decref(out);
    out = NULL;
    ck_assert_int_eq(order_cancel(&wc, x, 2, &out), LIFE_NOT_FOUND); /* not buyer 2's */
    json_decref(out);
    out = NULL;
    ck_assert_int_eq(order_cancel(&wc, x, 1, &out), LIFE_OK);
    json_decref(out);
    ck_assert_int_eq(pending_settle_sku(&wc, 9, 0, NULL), 0);
    out = NULL;
    ck_assert_int_eq(order_lookup(&wc, x, 1, &out), ORDER_FOUND);
    ck_assert_str_eq(json_string_value(json_object_get(out, "status")), "cancelled");
    json_decref(out);
    worker_ctx_close(&wc);
    th_assert_invariants(9);
}
END_TEST

static Suite *fencing_suite(void)
{
    Suite *s = suite_create("fencing");
    TCase *tc = tcase_create("failover");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_dead_letter_from_before_a_rebuild_is_refused_not_pending);
    tcase_add_test(tc, test_acknowledgement_leaves_another_reservation_of_the_same_id);
    tcase_add_test(tc, test_rejection_gives_back_only_the_reservation_it_names);
    tcase_add_test(tc, test_late_rebuild_cannot_install_an_older_epoch);
    tcase_add_test(tc, test_late_rebuild_load_after_a_newer_lock_holder_is_refused);
    tcase_add_test(tc, test_rebuild_writes_a_recorded_keys_back_only_for_its_own_reservation);
    tcase_add_test(tc, test_negative_units_held_are_kept);
    tcase_add_test(tc, test_cancel_request_names_the_reservation);
    tcase_add_test(tc, test_settle_of_a_superseded_writer_is_refused);
    tcase_add_test(tc, test_recorded_202_of_a_reissued_id_is_never_answered_with_another_order);
    tcase_add_test(tc, test_recorded_202_whose_reservation_redis_lost_can_be_cancelled);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return th_run(fencing_suite());
}
