/*
 * writer_settle: what a committed batch owes Redis (see writer_batch.h).
 * Everything here runs in the transaction's completion hook while the SKU's
 * writer lock is still held, and every script is idempotent by the journal
 * or the stream entry, so a replay after a crash repeats it harmlessly.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/embedded.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "order/order.h"
#include "order/order_writer.h"
#include "order/soldout.h"
#include "order/writer_batch.h"
#include "store/redis_conn.h"
#include <rlock/resp.h>

static int is_rejected(const struct batch *b, size_t i)
{
    return b->dec[i] == DEC_REJECTED;
}

/* Logs a script's refusal; one refused by its fence (a newer holder took
 * the lock over) is counted too. */
static void script_refused(const char *name, const redisReply *r)
{
    const char *why = r && r->type == REDIS_REPLY_ERROR ? r->str : "bad reply";
    if (strncmp(why, "SECKILL fenced", 14) == 0)
        metrics_add(M_SETTLES_FENCED, 1);
    log_warn("%s: %s", name, why);
}

/* Runs a script over the SKU's journal, stock, bought and meta keys (and,
 * for the reapply of load 'epoch', its debts), then the fence's two keys,
 * with ARGV the fence, then per selected entry the order, user, qty and
 * stream entry, then 'tail' (may be NULL).  Returns the script's integer
 * answer, or -1 when Redis failed or the fence refused. */
static long long run_for(struct batch *b, const struct rlock_script *s, const char *tail,
                         int (*want)(const struct batch *, size_t), int32_t epoch)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        n += want(b, i) && (!epoch || b->reapply[i] == epoch);
    if (n == 0)
        return 0;
    char keys[5][KEYS_MAX], lock[KEYS_MAX], counter[KEYS_MAX + 8], fence[TXLOCK_FENCE_ARG_MAX];
    if (txlock_redis_fence(&b->lock, b->sku, lock, counter, fence) != 0)
        return -1;
    static const enum keys_kind kinds[] = {KEY_JOURNAL, KEY_STOCK, KEY_BOUGHT, KEY_META, KEY_DEBTS};
    int nkeys = epoch ? 5 : 4;
    const char **argv = xcalloc(10 + 5 * n, sizeof *argv);
    char(*nums)[3][24] = xcalloc(n, sizeof *nums);
    size_t argc = 0, k = 0;
    for (int i = 0; i < nkeys; i++) {
        keys_sku(keys[i], b->sku, kinds[i]);
        argv[argc++] = keys[i];
    }
    argv[argc++] = lock;
    argv[argc++] = counter;
    argv[argc++] = fence;
    for (size_t i = 0; i < b->n; i++) {
        if (!want(b, i) || (epoch && b->reapply[i] != epoch))
            continue;
        snprintf(nums[k][0], sizeof nums[k][0], "%" PRId64, b->e[i].order_id);
        snprintf(nums[k][1], sizeof nums[k][1], "%" PRId64, b->e[i].user_id);
        snprintf(nums[k][2], sizeof nums[k][2], "%" PRId64, b->e[i].qty);
        for (int j = 0; j < 3; j++)
            argv[argc++] = nums[k][j];
        argv[argc++] = b->e[i].stream_id;
        k++;
    }
    if (tail)
        argv[argc++] = tail;
    redisReply *r =
        redis_conn_script(&b->w->ctx.redis, s, nkeys + 2, (int)argc - nkeys - 2, argv, NULL);
    long long rc = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r && rc < 0)
        script_refused(s->name, r);
    if (r)
        freeReplyObject(r);
    free(argv);
    free(nums);
    return rc;
}

static int wants_reapply(const struct batch *b, size_t i)
{
    return b->dec[i] == DEC_CONFIRMED && b->reapply[i] > 0;
}

/* Takes every confirmed order that a rebuild of Redis did not count from the
 * rebuilt state (once each, orders_reapply.lua), one call per load epoch.
 * The duty is in the orders' rows, so a replay repeats it harmlessly. */
static int reapply_orders(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (!wants_reapply(b, i))
            continue;
        int32_t epoch = b->reapply[i];
        int seen = 0; /* handled with an earlier entry of the same epoch */
        for (size_t j = 0; j < i && !seen; j++)
            seen = wants_reapply(b, j) && b->reapply[j] == epoch;
        if (seen)
            continue;
        char ep[24];
        snprintf(ep, sizeof ep, "%" PRId32, epoch);
        long long n = run_for(b, &script_orders_reapply, ep, wants_reapply, epoch);
        if (n < 0)
            return -1;
        if (n > 0) {
            log_warn("sku %" PRId64 ": %lld orders written after a rebuild taken from Redis",
                     b->sku, n);
            metrics_add(M_WRITER_REAPPLIED, n);
        }
    }
    return 0;
}

/* Moves the dead entries to the dead-letter stream, giving their units back
 * (orders_dead_letter.lua, exactly once by the entry's presence), fenced by
 * lock when not NULL.  Returns 0 or -1. */
int writer_dead_letter(struct writer *w, int64_t sku, const struct txlock *lock,
                       const char *const *entry_ids, const char *const *reasons, int give_back,
                       size_t n)
{
    if (n == 0)
        return 0;
    char keys[6][KEYS_MAX], max[24], per_epoch[24];
    char lk[KEYS_MAX], counter[KEYS_MAX + 8], fence[TXLOCK_FENCE_ARG_MAX] = "";
    static const enum keys_kind kinds[] = {KEY_STREAM, KEY_DEAD,   KEY_JOURNAL,
                                           KEY_STOCK,  KEY_BOUGHT, KEY_META};
    if (txlock_redis_fence(lock, sku, lk, counter, fence) != 0)
        return -1;
    const char **argv = xcalloc(16 + 3 * n, sizeof *argv);
    size_t argc = 0;
    for (int i = 0; i < 6; i++) {
        keys_sku(keys[i], sku, kinds[i]);
        argv[argc++] = keys[i];
    }
    argv[argc++] = lk;
    argv[argc++] = counter;
    snprintf(max, sizeof max, "%" PRId64, w->ctx.cfg->dead_letter_max);
    snprintf(per_epoch, sizeof per_epoch, "%" PRId64, ORDER_IDS_PER_EPOCH);
    argv[argc++] = fence;
    argv[argc++] = KEYS_WRITER_GROUP;
    argv[argc++] = max;
    argv[argc++] = per_epoch;
    argv[argc++] = order_fields[ORDER_FIELD_ID];
    argv[argc++] = order_fields[ORDER_FIELD_USER];
    argv[argc++] = order_fields[ORDER_FIELD_QTY];
    for (size_t i = 0; i < n; i++) {
        argv[argc++] = entry_ids[i];
        argv[argc++] = reasons[i];
        argv[argc++] = give_back ? "1" : "0";
    }
    redisReply *r =
        redis_conn_script(&w->ctx.redis, &script_orders_dead_letter, 8, (int)argc - 8, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (ok && r->integer > 0) {
        for (size_t i = 0; i < n; i++)
            log_error("sku %" PRId64 ": stream entry %s moved to the dead letters (%s)", sku,
                      entry_ids[i], reasons[i]);
        metrics_add(M_WRITER_DEAD_LETTERS, (long)r->integer);
    } else if (r && !ok) {
        script_refused("orders_dead_letter", r);
    }
    if (r)
        freeReplyObject(r);
    free(argv);
    return ok ? 0 : -1;
}

/* Appends the decisions of b (see order.h) to the messages of msgs, a new
 * message once the current one would pass WRITER_DECISIONS_MAX_BYTES. */
#define WRITER_DECISIONS_MAX_BYTES 65536
#define DECISION_MAX (24 + 1 + ORDER_ENTRY_MAX + 4 + ORDER_REASON_MAX)
struct messages {
    char **m;
    size_t n, len; /* len: of the last one */
};

static void add_decisions(struct messages *msgs, const struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (msgs->n == 0 || msgs->len + DECISION_MAX + 1 > WRITER_DECISIONS_MAX_BYTES) {
            char **m = xrealloc(msgs->m, (msgs->n + 1) * sizeof *m);
            msgs->m = m;
            msgs->m[msgs->n] = xmalloc(WRITER_DECISIONS_MAX_BYTES);
            msgs->m[msgs->n++][0] = '\0';
            msgs->len = 0;
        }
        struct order_decision d = {.order_id = b->e[i].order_id,
                                   .status = b->dec[i] == DEC_CONFIRMED ? ORDER_CONFIRMED
                                                                        : ORDER_REJECTED};
        snprintf(d.entry, sizeof d.entry, "%s", b->e[i].stream_id);
        if (d.status == ORDER_REJECTED)
            snprintf(d.reason, sizeof d.reason, "%s", b->reason[i]);
        if (order_decision_append(msgs->m[msgs->n - 1], WRITER_DECISIONS_MAX_BYTES, &msgs->len,
                                  &d) != 0)
            abort(); /* room for the longest decision was made above */
    }
}

/* Takes reapplied orders and moves dead entries: what a batch owes Redis
 * before its acknowledgement (which gives back the units of rejected orders
 * in the same script that drops their entries).  Returns 0, or -1 on Redis
 * failure. */
static int settle_returns(struct batch *b)
{
    if (reapply_orders(b) != 0)
        return -1;
    for (size_t i = 0; i < b->n; i++)
        if (is_rejected(b, i)) { /* units came back: this process sells them at once */
            soldout_clear(soldout_shared(), b->sku);
            break;
        }
    const char **dead_ids = xcalloc(b->n, sizeof *dead_ids);
    const char **dead_why = xcalloc(b->n, sizeof *dead_why);
    size_t ndead = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] == DEC_DEAD) {
            dead_ids[ndead] = b->e[i].stream_id;
            dead_why[ndead++] = b->reason[i];
        }
    int rc = writer_dead_letter(b->w, b->sku, &b->lock, dead_ids, dead_why, 1, ndead);
    free(dead_ids);
    free(dead_why);
    return rc;
}

/* One batch's orders_ack.lua call, as a command of a pipeline. */
#define ACK_HEAD 3 /* FCALL, name, numkeys (EVALSHA, sha, numkeys for a plain script) */
#define ACK_KEYS 7
struct ack_call {
    char keys[5][KEYS_MAX], count[24], nconf[24], per_epoch[24];
    char lock[KEYS_MAX], counter[KEYS_MAX + 8], fence[TXLOCK_FENCE_ARG_MAX];
    const char **argv;
    char (*nums)[3][24];
    int argc;
};

/* Returns 0, or -1 when the batch's fence cannot be named. */
static int ack_prepare(struct ack_call *a, const struct batch *b)
{
    if (txlock_redis_fence(&b->lock, b->sku, a->lock, a->counter, a->fence) != 0)
        return -1;
    static const enum keys_kind kinds[] = {KEY_STREAM, KEY_JOURNAL, KEY_STOCK, KEY_BOUGHT,
                                           KEY_META};
    for (int i = 0; i < 5; i++)
        keys_sku(a->keys[i], b->sku, kinds[i]);
    size_t nack = 0, nconf = 0;
    for (size_t i = 0; i < b->n; i++) {
        nack += b->dec[i] != DEC_DEAD;
        nconf += b->dec[i] == DEC_CONFIRMED;
    }
    snprintf(a->count, sizeof a->count, "%zu", nack);
    snprintf(a->nconf, sizeof a->nconf, "%zu", nconf);
    snprintf(a->per_epoch, sizeof a->per_epoch, "%" PRId64, ORDER_IDS_PER_EPOCH);
    a->argv = xcalloc(ACK_HEAD + ACK_KEYS + 7 + 6 * b->n, sizeof *a->argv);
    a->nums = xcalloc(b->n ? b->n : 1, sizeof *a->nums);
    size_t head_len[2];
    rlock_script_head(&script_orders_ack, a->argv, head_len);
    int argc = 2;
    a->argv[argc++] = "7";
    for (int i = 0; i < 5; i++)
        a->argv[argc++] = a->keys[i];
    a->argv[argc++] = a->lock;
    a->argv[argc++] = a->counter;
    a->argv[argc++] = a->fence;
    a->argv[argc++] = KEYS_WRITER_GROUP;
    a->argv[argc++] = a->count;
    a->argv[argc++] = a->nconf;
    a->argv[argc++] = a->per_epoch;
    a->argv[argc++] = KEYS_DECISIONS_CHANNEL;
    a->argv[argc++] = ""; /* the decisions go out in the messages of the whole transaction */
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] != DEC_DEAD)
            a->argv[argc++] = b->e[i].stream_id;
    for (size_t i = 0; i < b->n; i++) {
        snprintf(a->nums[i][0], sizeof a->nums[i][0], "%" PRId64, b->e[i].order_id);
        snprintf(a->nums[i][1], sizeof a->nums[i][1], "%" PRId64, b->e[i].user_id);
        snprintf(a->nums[i][2], sizeof a->nums[i][2], "%" PRId64, b->e[i].qty);
    }
    /* A reapplied order's marker is a field of its own (orders_reapply.lua):
     * its pending state goes like any other confirmed order's. */
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] == DEC_CONFIRMED) {
            a->argv[argc++] = a->nums[i][0];
            a->argv[argc++] = a->nums[i][1];
            a->argv[argc++] = b->e[i].stream_id;
        }
    for (size_t i = 0; i < b->n; i++)
        if (is_rejected(b, i)) {
            a->argv[argc++] = a->nums[i][0];
            a->argv[argc++] = a->nums[i][1];
            a->argv[argc++] = a->nums[i][2];
            a->argv[argc++] = b->e[i].stream_id;
            a->argv[argc++] = b->reason[i];
        }
    a->argc = argc;
    return 0;
}

/* Whether an orders_ack reply says done; an EVALSHA the server no longer
 * knows (its script cache was flushed, a failover) runs again by text (a
 * function is never NOSCRIPT: a missing one is a refusal). */
static int ack_done(struct redis_conn *rc, const struct ack_call *a, const redisReply *r)
{
    redisReply *again = NULL;
    if (rlock_reply_kind(r) == RLOCK_REPLY_NOSCRIPT)
        r = again = redis_conn_script(rc, &script_orders_ack, ACK_KEYS,
                                      a->argc - ACK_HEAD - ACK_KEYS, a->argv + ACK_HEAD, NULL);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r && !ok)
        script_refused("orders_ack", r);
    if (again)
        freeReplyObject(again);
    return ok;
}

void writer_settle_all(struct batch *const *b, size_t n)
{
    if (n == 0)
        return;
    struct redis_conn *rc = &b[0]->w->ctx.redis;
    struct ack_call *acks = xcalloc(n, sizeof *acks);
    size_t *of = xcalloc(n, sizeof *of); /* the batch of each ack */
    struct messages msgs = {0};
    size_t nack = 0;
    for (size_t k = 0; k < n; k++) {
        b[k]->finished = 0;
        if (settle_returns(b[k]) != 0 || ack_prepare(&acks[nack], b[k]) != 0)
            continue;
        add_decisions(&msgs, b[k]);
        of[nack++] = k;
    }
    /* Every acknowledgement, then the decisions, in one round trip. */
    size_t ncmd = nack + msgs.n;
    int *argcs = xcalloc(ncmd ? ncmd : 1, sizeof *argcs);
    const char *const **argvs = xcalloc(ncmd ? ncmd : 1, sizeof *argvs);
    const char *(*pub)[3] = xcalloc(msgs.n ? msgs.n : 1, sizeof *pub);
    redisReply **out = xcalloc(ncmd ? ncmd : 1, sizeof *out);
    for (size_t i = 0; i < nack; i++) {
        argcs[i] = acks[i].argc;
        argvs[i] = acks[i].argv;
    }
    for (size_t i = 0; i < msgs.n; i++) {
        pub[i][0] = "PUBLISH";
        pub[i][1] = KEYS_DECISIONS_CHANNEL;
        pub[i][2] = msgs.m[i];
        argcs[nack + i] = 3;
        argvs[nack + i] = pub[i];
    }
    if (ncmd > 0 && redis_conn_pipeline(rc, ncmd, argcs, argvs, out) == 0) {
        for (size_t i = 0; i < nack; i++)
            b[of[i]]->finished = ack_done(rc, &acks[i], out[i]);
        for (size_t i = nack; i < ncmd; i++)
            if (out[i]->type == REDIS_REPLY_ERROR)
                log_warn("PUBLISH decisions: %s", out[i]->str);
        for (size_t i = 0; i < ncmd; i++)
            freeReplyObject(out[i]);
    }
    for (size_t i = 0; i < nack; i++) {
        free(acks[i].argv);
        free(acks[i].nums);
    }
    for (size_t i = 0; i < msgs.n; i++)
        free(msgs.m[i]);
    free(msgs.m);
    free(out), free(pub), free(argvs), free(argcs), free(of), free(acks);
}
