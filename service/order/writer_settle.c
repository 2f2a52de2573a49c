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

#include "core/embedded.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "order/order.h"
#include "order/soldout.h"
#include "order/writer_batch.h"
#include "store/redis_conn.h"

static int is_rejected(const struct batch *b, size_t i)
{
    return b->dec[i] == DEC_REJECTED;
}

/* Runs a script over the SKU's journal, stock, bought and meta keys (and,
 * for the reapply of load 'epoch', its debts) with ARGV 'lead' (may be NULL),
 * then per selected entry the order, user, qty and (with 'reasons') its
 * reason, then 'tail' (may be NULL).  Returns the script's integer answer, or
 * -1 when Redis failed. */
static long long run_for(struct batch *b, const struct rlock_script *s, const char *lead,
                         int reasons, const char *tail, int (*want)(const struct batch *, size_t),
                         int32_t epoch)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        n += want(b, i) && (!epoch || b->reapply[i] == epoch);
    if (n == 0)
        return 0;
    char keys[5][KEYS_MAX];
    static const enum keys_kind kinds[] = {KEY_JOURNAL, KEY_STOCK, KEY_BOUGHT, KEY_META, KEY_DEBTS};
    int nkeys = epoch ? 5 : 4;
    const char **argv = calloc(7 + 4 * n, sizeof *argv);
    char(*nums)[3][24] = calloc(n, sizeof *nums);
    if (!argv || !nums)
        abort();
    size_t argc = 0, k = 0;
    for (int i = 0; i < nkeys; i++) {
        keys_sku(keys[i], b->sku, kinds[i]);
        argv[argc++] = keys[i];
    }
    if (lead)
        argv[argc++] = lead;
    for (size_t i = 0; i < b->n; i++) {
        if (!want(b, i) || (epoch && b->reapply[i] != epoch))
            continue;
        snprintf(nums[k][0], sizeof nums[k][0], "%" PRId64, b->e[i].order_id);
        snprintf(nums[k][1], sizeof nums[k][1], "%" PRId64, b->e[i].user_id);
        snprintf(nums[k][2], sizeof nums[k][2], "%" PRId64, b->e[i].qty);
        for (int j = 0; j < 3; j++)
            argv[argc++] = nums[k][j];
        if (reasons)
            argv[argc++] = b->reason[i];
        k++;
    }
    if (tail)
        argv[argc++] = tail;
    redisReply *r = redis_conn_script(&b->w->ctx.redis, s, nkeys, (int)argc - nkeys, argv, NULL);
    long long rc = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r && rc < 0)
        log_warn("%s: %s", s->name, r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
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
        long long n = run_for(b, &script_orders_reapply, NULL, 0, ep, wants_reapply, epoch);
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
 * (orders_dead_letter.lua, exactly once by the entry's presence).  Returns 0
 * or -1. */
int writer_dead_letter(struct writer *w, int64_t sku, const char *const *entry_ids,
                       const char *const *reasons, int give_back, size_t n)
{
    if (n == 0)
        return 0;
    char keys[6][KEYS_MAX], max[24], per_epoch[24];
    static const enum keys_kind kinds[] = {KEY_STREAM, KEY_DEAD,   KEY_JOURNAL,
                                           KEY_STOCK,  KEY_BOUGHT, KEY_META};
    const char **argv = calloc(12 + 3 * n, sizeof *argv);
    if (!argv)
        abort();
    size_t argc = 0;
    for (int i = 0; i < 6; i++) {
        keys_sku(keys[i], sku, kinds[i]);
        argv[argc++] = keys[i];
    }
    snprintf(max, sizeof max, "%" PRId64, w->ctx.cfg->dead_letter_max);
    snprintf(per_epoch, sizeof per_epoch, "%" PRId64, ORDER_IDS_PER_EPOCH);
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
        redis_conn_script(&w->ctx.redis, &script_orders_dead_letter, 6, (int)argc - 6, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (ok && r->integer > 0) {
        for (size_t i = 0; i < n; i++)
            log_error("sku %" PRId64 ": stream entry %s moved to the dead letters (%s)", sku,
                      entry_ids[i], reasons[i]);
        metrics_add(M_WRITER_DEAD_LETTERS, (long)r->integer);
    } else if (r && !ok) {
        log_warn("orders_dead_letter: %s", r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    }
    if (r)
        freeReplyObject(r);
    free(argv);
    return ok ? 0 : -1;
}

/* Builds the decisions message of the batch (see order.h) into a heap string. */
static char *decisions_message(const struct batch *b)
{
    size_t cap = 1 + b->n * (24 + 1 + ORDER_ENTRY_MAX + 4 + ORDER_REASON_MAX), len = 0;
    char *msg = malloc(cap);
    if (!msg)
        abort();
    msg[0] = '\0';
    for (size_t i = 0; i < b->n; i++) {
        struct order_decision d = {.order_id = b->e[i].order_id,
                                   .status = b->dec[i] == DEC_CONFIRMED ? ORDER_CONFIRMED
                                                                        : ORDER_REJECTED};
        snprintf(d.entry, sizeof d.entry, "%s", b->e[i].stream_id);
        if (d.status == ORDER_REJECTED)
            snprintf(d.reason, sizeof d.reason, "%s", b->reason[i]);
        if (order_decision_append(msg, cap, &len, &d) != 0)
            abort(); /* cap covers the longest token of every entry */
    }
    return msg;
}

/* Gives back the units of rejected orders (order_return.lua is idempotent by
 * the journal), takes reapplied ones, moves dead entries, then acknowledges
 * the batch and publishes its decisions.  Returns 0, or -1 on Redis failure
 * (the entries stay pending; a replay repeats all of this harmlessly). */
int writer_settle(struct batch *b)
{
    char per_epoch[24];
    snprintf(per_epoch, sizeof per_epoch, "%" PRId64, ORDER_IDS_PER_EPOCH);
    if (run_for(b, &script_order_return, per_epoch, 1, NULL, is_rejected, 0) < 0 ||
        reapply_orders(b) != 0)
        return -1;
    for (size_t i = 0; i < b->n; i++)
        if (is_rejected(b, i)) { /* units came back: this process sells them at once */
            soldout_clear(soldout_shared(), b->sku);
            break;
        }
    const char **dead_ids = calloc(b->n, sizeof *dead_ids);
    const char **dead_why = calloc(b->n, sizeof *dead_why);
    if (!dead_ids || !dead_why)
        abort();
    size_t ndead = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] == DEC_DEAD) {
            dead_ids[ndead] = b->e[i].stream_id;
            dead_why[ndead++] = b->reason[i];
        }
    int rc = writer_dead_letter(b->w, b->sku, dead_ids, dead_why, 1, ndead);
    free(dead_ids);
    free(dead_why);
    if (rc != 0)
        return -1;

    char journal[KEYS_MAX], stream[KEYS_MAX], count[24];
    keys_sku(journal, b->sku, KEY_JOURNAL);
    keys_sku(stream, b->sku, KEY_STREAM);
    char *msg = decisions_message(b);
    size_t argc = 0, nack = b->n - ndead;
    const char **argv = calloc(6 + 2 * b->n, sizeof *argv);
    char(*ids)[24] = calloc(b->n, sizeof *ids);
    if (!argv || !ids)
        abort();
    snprintf(count, sizeof count, "%zu", nack);
    argv[argc++] = stream;
    argv[argc++] = journal;
    argv[argc++] = KEYS_WRITER_GROUP;
    argv[argc++] = count;
    argv[argc++] = KEYS_DECISIONS_CHANNEL;
    argv[argc++] = msg;
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] != DEC_DEAD)
            argv[argc++] = b->e[i].stream_id;
    /* A reapplied order keeps its marker: a writer that paused with this
     * batch in hand and replays it after this acknowledgement must find it. */
    for (size_t i = 0; i < b->n; i++)
        if (b->dec[i] == DEC_CONFIRMED && !b->reapply[i]) {
            snprintf(ids[i], sizeof ids[i], "%" PRId64, b->e[i].order_id);
            argv[argc++] = ids[i];
        }
    redisReply *r =
        redis_conn_script(&b->w->ctx.redis, &script_orders_ack, 2, (int)argc - 2, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r && !ok)
        log_warn("orders_ack: %s", r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    if (r)
        freeReplyObject(r);
    free(argv);
    free(ids);
    free(msg);
    return ok ? 0 : -1;
}

