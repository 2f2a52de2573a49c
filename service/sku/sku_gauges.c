#include "sku/sku_gauges.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/keys.h"
#include "core/log.h"

/* Redis commands per SKU, in the pipeline's order. */
enum { CMD_STOCK, CMD_XLEN, CMD_GROUPS, CMD_OLDEST, CMDS_PER_SKU };
static const int cmd_argc[CMDS_PER_SKU] = {2, 2, 3, 6};
#define ARGV_MAX 6

struct sku_keys {
    char stock[KEYS_MAX], stream[KEYS_MAX];
    const char *argv[CMDS_PER_SKU][ARGV_MAX];
};

/* A reply's integer: an integer reply, or a string of one (GET). */
static int reply_i64(const redisReply *r, int64_t *v)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        *v = (int64_t)r->integer;
        return 0;
    }
    if (r->type != REDIS_REPLY_STRING || r->len == 0)
        return -1;
    char *end;
    long long x = strtoll(r->str, &end, 10);
    if (*end)
        return -1;
    *v = x;
    return 0;
}

/* The writers' group in an XINFO GROUPS reply (each group a flat list of
 * field, value): *pending and *lag (-1 when Redis cannot tell: entries
 * were deleted past the group's position).  Returns 0, or -1 without that
 * group. */
static int writers_group(const redisReply *r, int64_t *pending, int64_t *lag)
{
    for (size_t g = 0; r->type == REDIS_REPLY_ARRAY && g < r->elements; g++) {
        const redisReply *e = r->element[g];
        int mine = 0;
        *pending = 0;
        *lag = -1;
        for (size_t i = 0; e->type == REDIS_REPLY_ARRAY && i + 1 < e->elements; i += 2) {
            const redisReply *k = e->element[i], *v = e->element[i + 1];
            if (k->type != REDIS_REPLY_STRING)
                continue;
            if (strcmp(k->str, "name") == 0)
                mine = v->type == REDIS_REPLY_STRING && strcmp(v->str, KEYS_WRITER_GROUP) == 0;
            else if (strcmp(k->str, "pending") == 0 && v->type == REDIS_REPLY_INTEGER)
                *pending = (int64_t)v->integer;
            else if (strcmp(k->str, "lag") == 0 && v->type == REDIS_REPLY_INTEGER)
                *lag = (int64_t)v->integer;
        }
        if (mine)
            return 0;
    }
    return -1;
}

/* The time (ms since the epoch, Redis's clock) in the id of the first entry
 * of an XRANGE ... COUNT 1 reply, into *ms; 0 with no entry.  Returns 0, or
 * -1 on an unexpected reply. */
static int oldest_entry_ms(const redisReply *r, int64_t *ms)
{
    *ms = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    if (r->elements == 0)
        return 0;
    const redisReply *e = r->element[0];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 1 ||
        e->element[0]->type != REDIS_REPLY_STRING)
        return -1;
    char *end;
    long long t = strtoll(e->element[0]->str, &end, 10);
    if (end == e->element[0]->str || *end != '-')
        return -1;
    *ms = t;
    return 0;
}

/* Fills s from its replies (now_ms: this process's wall clock, against which
 * the oldest entry's age is measured); returns 0, or -1 on an unexpected
 * reply. */
static int sku_from_replies(struct metrics_sku *s, redisReply *const *r, int64_t now_ms)
{
    const redisReply *stock = r[CMD_STOCK], *len = r[CMD_XLEN], *groups = r[CMD_GROUPS];
    if (stock->type == REDIS_REPLY_ERROR || len->type == REDIS_REPLY_ERROR) {
        log_warn("metrics: sku %" PRId64 ": %s", s->sku,
                 stock->type == REDIS_REPLY_ERROR ? stock->str : len->str);
        return -1;
    }
    if (stock->type != REDIS_REPLY_NIL) {
        if (reply_i64(stock, &s->stock_available) != 0)
            return -1;
        s->has_available = 1;
    }
    if (reply_i64(len, &s->stream_length) != 0)
        return -1;
    int64_t oldest_ms;
    if (oldest_entry_ms(r[CMD_OLDEST], &oldest_ms) != 0) {
        log_warn("metrics: sku %" PRId64 ": XRANGE: %s", s->sku,
                 r[CMD_OLDEST]->type == REDIS_REPLY_ERROR ? r[CMD_OLDEST]->str
                                                          : "unexpected reply");
        return -1;
    }
    /* a clock behind Redis's would make a fresh entry look from the future */
    s->oldest_age_ms = oldest_ms > 0 && now_ms > oldest_ms ? now_ms - oldest_ms : 0;
    int64_t pending, lag;
    if (groups->type == REDIS_REPLY_ERROR) {
        /* No stream yet: nothing to acknowledge.  Anything else (NOPERM: an
         * ACL without xinfo|groups) is an error the operator must see. */
        if (s->stream_length != 0 || strstr(groups->str, "no such key") == NULL) {
            log_warn("metrics: sku %" PRId64 ": XINFO GROUPS: %s", s->sku, groups->str);
            return -1;
        }
        s->stream_lag = 0;
    } else if (writers_group(groups, &pending, &lag) != 0) {
        s->stream_lag = s->stream_length; /* no group yet: nothing was delivered */
    } else {
        /* Acknowledged entries are deleted (orders_ack.lua), so when Redis
         * cannot count the undelivered ones, they are the rest of the stream. */
        if (lag < 0)
            lag = s->stream_length > pending ? s->stream_length - pending : 0;
        s->stream_lag = pending + lag;
    }
    s->has_stream = 1;
    return 0;
}

int sku_gauges_fill(struct worker_ctx *w, struct metrics_sku *skus, size_t count)
{
    if (count == 0)
        return 0;
    struct sku_keys *keys = xcalloc(count, sizeof *keys);
    int *argcs = xcalloc(count * CMDS_PER_SKU, sizeof *argcs);
    const char *const **argvs = xcalloc(count * CMDS_PER_SKU, sizeof *argvs);
    redisReply **replies = xcalloc(count * CMDS_PER_SKU, sizeof *replies);
    for (size_t i = 0; i < count; i++) {
        struct sku_keys *k = &keys[i];
        keys_sku(k->stock, skus[i].sku, KEY_STOCK);
        keys_sku(k->stream, skus[i].sku, KEY_STREAM);
        k->argv[CMD_STOCK][0] = "GET";
        k->argv[CMD_STOCK][1] = k->stock;
        k->argv[CMD_XLEN][0] = "XLEN";
        k->argv[CMD_XLEN][1] = k->stream;
        k->argv[CMD_GROUPS][0] = "XINFO";
        k->argv[CMD_GROUPS][1] = "GROUPS";
        k->argv[CMD_GROUPS][2] = k->stream;
        const char *oldest[ARGV_MAX] = {"XRANGE", k->stream, "-", "+", "COUNT", "1"};
        memcpy(k->argv[CMD_OLDEST], oldest, sizeof oldest);
        for (int c = 0; c < CMDS_PER_SKU; c++) {
            argcs[i * CMDS_PER_SKU + (size_t)c] = cmd_argc[c];
            argvs[i * CMDS_PER_SKU + (size_t)c] = k->argv[c];
        }
    }
    int rc = redis_conn_pipeline(&w->redis, count * CMDS_PER_SKU, argcs, argvs, replies);
    int64_t now_ms = clock_wall_ms();
    for (size_t i = 0; rc == 0 && i < count; i++)
        rc = sku_from_replies(&skus[i], &replies[i * CMDS_PER_SKU], now_ms);
    for (size_t i = 0; i < count * CMDS_PER_SKU; i++)
        if (replies[i])
            freeReplyObject(replies[i]);
    free(replies);
    free(argvs);
    free(argcs);
    free(keys);
    return rc;
}

int sku_gauges_read(struct worker_ctx *w, struct metrics_sku **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    char limit[24];
    snprintf(limit, sizeof limit, "%" PRId64, CFG_LIVE(w->cfg, metrics_max_skus));
    PGresult *pr = db_query(&w->db, "metrics_skus", 1, (const char *[]){limit});
    if (!pr)
        return -1;
    size_t count = (size_t)PQntuples(pr);
    if (count == 0) {
        PQclear(pr);
        return 0;
    }
    struct metrics_sku *skus = xcalloc(count, sizeof *skus);
    for (size_t i = 0; i < count; i++) {
        skus[i].sku = strtoll(PQgetvalue(pr, (int)i, 0), NULL, 10);
        skus[i].stock_db = strtoll(PQgetvalue(pr, (int)i, 1), NULL, 10);
        skus[i].parent = strtoll(PQgetvalue(pr, (int)i, 2), NULL, 10);
        skus[i].sale_open = strcmp(PQgetvalue(pr, (int)i, 3), "t") == 0;
    }
    PQclear(pr);
    if (sku_gauges_fill(w, skus, count) != 0) {
        free(skus);
        return -1;
    }
    *out = skus;
    *n = count;
    return 0;
}
