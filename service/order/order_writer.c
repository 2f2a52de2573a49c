#include "order/order_writer.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/embedded.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "order/order.h"
#include "order/soldout.h"
#include "order/writer_batch.h"
#include "sku/reconcile.h"
#include "sku/sku.h"

/* ---- writing batches -------------------------------------------------------- */

/* Counts a batch that was written and settled, and repairs what it found. */
static void account(struct writer *w, const struct batch *b)
{
    long confirmed = 0, rejected = 0, cancelled = 0;
    for (size_t i = 0; i < b->n; i++) {
        int by_buyer = batch_is_cancelled(b, i);
        confirmed += b->dec[i] == DEC_CONFIRMED;
        cancelled += by_buyer;
        rejected += b->dec[i] == DEC_REJECTED && !by_buyer;
    }
    metrics_add(M_WRITER_BATCHES_COMMITTED, 1);
    metrics_add(M_WRITER_ORDERS_CONFIRMED, confirmed);
    metrics_add(M_WRITER_ORDERS_REJECTED, rejected);
    metrics_add(M_ORDERS_TO_CONFIRMED, confirmed);
    metrics_add(M_ORDERS_TO_REJECTED, rejected);
    metrics_add(M_ORDERS_CANCELLED_PENDING, cancelled);
    /* The database refused what Redis sold: Redis is ahead of it (an
     * adjustment left by a dead process, lost writes). */
    if (rejected)
        reconcile_refused(b->sku);
    /* Redis issued an id again: its state is behind the database.  Rebuild it
     * from the database (a fresh epoch, so no id repeats) now, not when an
     * operator notices. */
    if (b->conflicts > 0 && sku_rebuild(&w->ctx, b->sku, "order id issued twice") != SKU_OK)
        log_warn("sku %" PRId64 ": rebuild after an id conflict failed; reconciliation retries",
                 b->sku);
}

/* Writes batches b[0..n) of distinct SKUs, writer_skus_per_tx SKUs to a
 * transaction.  A batch whose token was refused for good (another holder
 * wrote the SKU first) is tried again with a fresh lock, up to
 * TXLOCK_FENCE_ATTEMPTS in all.  Returns 0 when every batch was decided
 * (committed, compensated and acknowledged), -1 when some stay pending (a
 * reclaim replays them). */
static int write_batches(struct writer *w, struct batch *const *b, size_t n)
{
    if (n == 0)
        return 0;
    int64_t started_us = clock_mono_us();
    size_t per = (size_t)w->ctx.cfg->writer_skus_per_tx;
    for (size_t from = 0; from < n; from += per) {
        size_t k = n - from < per ? n - from : per;
        /* Every lock tried at once; the busy ones (another writer of the
         * SKU is committing) then waited for, one by one, holding nothing. */
        writer_tx_write(w, b + from, k, 0);
        /* What the transaction left out or lost goes again, each batch in a
         * transaction of its own, so that one SKU cannot hold up the others:
         * a busy lock waited for (holding nothing else), a stale token with a
         * fresh lock, and after a rollback of the whole group (a statement or
         * a check failed for one of its SKUs) every batch alone once. */
        for (size_t i = from; i < from + k; i++) {
            int failed_in_group = k > 1 && !b[i]->done && !b[i]->busy && !b[i]->stale;
            for (int attempt = 1; attempt <= TXLOCK_FENCE_ATTEMPTS && !b[i]->done; attempt++) {
                if (!(b[i]->stale || (attempt == 1 && (b[i]->busy || failed_in_group))))
                    break;
                writer_tx_write(w, &b[i], 1, 1);
            }
        }
    }
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        metrics_writer_batch(started_us, b[i]->n); /* with its top-up */
        if (b[i]->done) {
            account(w, b[i]);
        } else {
            metrics_add(M_WRITER_BATCHES_FAILED, 1);
            rc = -1;
        }
    }
    return rc;
}

int writer_process_batch(struct writer *w, int64_t sku, const struct writer_entry *e, size_t n)
{
    if (n == 0)
        return 0;
    struct batch *b = batch_new(w, sku);
    batch_reserve(b, n);
    memcpy(b->e, e, n * sizeof *e);
    b->n = n;
    batch_mark_dups(b, 0);
    int rc = write_batches(w, &b, 1);
    batch_free(b);
    return rc;
}

/* ---- reading the streams ------------------------------------------------ */

static size_t parse_entries(const redisReply *list, struct writer_entry *e, const char **bad,
                            const char **why, size_t *nbad);

/* Adds the SKU's entries that reached the stream after the batch was read
 * (one XREADGROUP without BLOCK, up to writer_batch in all), once the SKU's
 * lock is ours: a writer that waited for the lock writes what queued
 * meanwhile in the same transaction instead of a batch of one.  Malformed
 * entries go to the dead letters.  A failure leaves the batch as it was. */
void writer_top_up(struct batch *b)
{
    struct writer *w = b->w;
    int64_t room = w->ctx.cfg->writer_batch - (int64_t)b->n;
    if (room <= 0)
        return;
    char stream[KEYS_MAX], count[24];
    keys_sku(stream, b->sku, KEY_STREAM);
    snprintf(count, sizeof count, "%" PRId64, room);
    const char *argv[] = {"XREADGROUP", "GROUP", KEYS_WRITER_GROUP,
                          w->consumer,  "COUNT", count,
                          "STREAMS",    stream,  ">"};
    redisReply *r = redis_conn_cmd(&w->ctx.redis, 9, argv, NULL);
    if (!r)
        return;
    const redisReply *list = NULL;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2)
        list = r->element[0]->element[1];
    if (list && list->type == REDIS_REPLY_ARRAY && list->elements > 0) {
        size_t from = b->n, nbad = 0;
        const char **bad = xcalloc(list->elements, sizeof *bad);
        const char **why = xcalloc(list->elements, sizeof *why);
        batch_reserve(b, b->n + list->elements);
        b->n += parse_entries(list, b->e + b->n, bad, why, &nbad);
        batch_mark_dups(b, from);
        /* still pending if this fails: a reclaim replays them */
        (void)writer_dead_letter(w, b->sku, NULL, bad, why, 0, nbad);
        free(bad);
        free(why);
    }
    freeReplyObject(r);
}

/* A strictly decimal value in 1..max, or 0. */
static int64_t field_i64(const char *v, int64_t max)
{
    if (!v || *v < '1' || *v > '9')
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    return errno == 0 && *end == '\0' && x <= max ? (int64_t)x : 0;
}

static int parse_entry(const redisReply *r, struct writer_entry *e)
{
    memset(e, 0, sizeof *e);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY)
        return -1;
    snprintf(e->stream_id, sizeof e->stream_id, "%s", r->element[0]->str);
    e->reserved_ms = atoll(e->stream_id);
    const redisReply *f = r->element[1];
    int have = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const char *k = f->element[i]->str, *v = f->element[i + 1]->str;
        if (!k || !v)
            return -1;
        if (strcmp(k, order_fields[ORDER_FIELD_ID]) == 0)
            e->order_id = field_i64(v, ORDER_ID_MAX), have |= 1;
        else if (strcmp(k, order_fields[ORDER_FIELD_USER]) == 0)
            e->user_id = field_i64(v, INT64_MAX), have |= 2;
        else if (strcmp(k, order_fields[ORDER_FIELD_QTY]) == 0)
            e->qty = field_i64(v, INT32_MAX), have |= 4;
        else if (strcmp(k, order_fields[ORDER_FIELD_IDEM]) == 0)
            snprintf(e->idem, sizeof e->idem, "%s", v);
    }
    return have == 7 && e->order_id > 0 && e->user_id > 0 && e->qty > 0 ? 0 : -1;
}

/* Parses the entries of one stream reply (array of [id, fields]) into e;
 * entries reserve.lua did not write go to bad/why[0..*nbad) (their ids
 * point into list).  Returns the number parsed into e. */
static size_t parse_entries(const redisReply *list, struct writer_entry *e, const char **bad,
                            const char **why, size_t *nbad)
{
    size_t n = 0;
    for (size_t i = 0; i < list->elements; i++) {
        const redisReply *en = list->element[i];
        if (parse_entry(en, &e[n]) == 0) {
            n++;
        } else if (en->type == REDIS_REPLY_ARRAY && en->elements >= 1 &&
                   en->element[0]->type == REDIS_REPLY_STRING) {
            bad[*nbad] = en->element[0]->str;
            why[(*nbad)++] = "malformed";
        }
    }
    return n;
}

static int64_t stream_sku(const char *name)
{
    const char *p = strstr(name, "{sku:");
    return p ? atoll(p + 5) : 0;
}

/* The batches of one read (one per SKU), written together. */
struct batch_set {
    struct batch **b;
    size_t n, cap;
    size_t read; /* entries read, the malformed included */
    int failed;  /* a dead letter could not be moved */
};

/* Adds the entries of one stream reply (list) of sku as a batch.  Entries
 * reserve.lua did not write go to the dead letters now, never guessed at.
 * With top, the batch takes what queued while its lock was awaited (see
 * writer_top_up).  Returns the batch, or NULL when it has no entry. */
static struct batch *set_add(struct writer *w, struct batch_set *s, int64_t sku,
                             const redisReply *list, int top)
{
    if (list->type != REDIS_REPLY_ARRAY || list->elements == 0)
        return NULL;
    struct batch *b = batch_new(w, sku);
    batch_reserve(b, list->elements);
    const char **bad = xcalloc(list->elements, sizeof *bad);
    const char **why = xcalloc(list->elements, sizeof *why);
    size_t nbad = 0;
    b->n = parse_entries(list, b->e, bad, why, &nbad);
    if (writer_dead_letter(w, sku, NULL, bad, why, 0, nbad) != 0)
        s->failed = 1;
    free(bad);
    free(why);
    s->read += b->n + nbad;
    if (b->n == 0) {
        batch_free(b);
        return NULL;
    }
    batch_mark_dups(b, 0);
    b->top_up = top;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->b = xrealloc(s->b, s->cap * sizeof *s->b);
    }
    s->b[s->n++] = b;
    return b;
}

/* Adds the batches of one XREADGROUP reply ([[stream, entries]...]). */
static void set_add_read(struct writer *w, struct batch_set *s, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
            e->element[0]->type == REDIS_REPLY_STRING)
            (void)set_add(w, s, stream_sku(e->element[0]->str), e->element[1], 1);
    }
}

/* Writes the set's batches and frees them.  Returns the number of entries
 * read and decided, or -1 when some stay pending. */
static int set_write(struct writer *w, struct batch_set *s)
{
    int rc = write_batches(w, s->b, s->n) != 0 || s->failed ? -1 : (int)s->read;
    for (size_t i = 0; i < s->n; i++)
        batch_free(s->b[i]);
    free(s->b);
    *s = (struct batch_set){0};
    return rc;
}

static int refresh_skus(struct writer *w)
{
    PGresult *r = db_query(&w->ctx.db, "sku_ids_active", 0, NULL);
    if (!r)
        return -1;
    free(w->skus);
    size_t rows = (size_t)PQntuples(r);
    w->skus = xcalloc(rows ? rows : 1, sizeof *w->skus);
    w->nskus = 0;
    for (size_t i = 0; i < rows; i++) {
        int64_t sku = atoll(PQgetvalue(r, (int)i, 0));
        if (w->nparts <= 1 || (uint64_t)sku % w->nparts == w->part)
            w->skus[w->nskus++] = sku;
    }
    PQclear(r);
    return 0;
}

/* A stream of a SKU that was never loaded (or lost) has no group: create it. */
static void ensure_groups(struct writer *w)
{
    for (size_t i = 0; i < w->nskus; i++) {
        char stream[KEYS_MAX];
        keys_sku(stream, w->skus[i], KEY_STREAM);
        const char *argv[] = {"XGROUP", "CREATE", stream, KEYS_WRITER_GROUP, "0", "MKSTREAM"};
        redisReply *r = redis_conn_cmd(&w->ctx.redis, 6, argv, NULL);
        if (r)
            freeReplyObject(r);
    }
}

/* Takes over the entries other writers of the group left idle for
 * writer_claim_idle_ms (a writer that died) and writes them, all SKUs in
 * one set.  Returns the number decided, or -1. */
static int reclaim(struct writer *w)
{
    char idle[24];
    snprintf(idle, sizeof idle, "%" PRId64, w->ctx.cfg->writer_claim_idle_ms);
    char count[24];
    snprintf(count, sizeof count, "%" PRId64, w->ctx.cfg->writer_batch);
    struct batch_set set = {0};
    int failed = 0;
    for (size_t i = 0; i < w->nskus && !failed; i++) {
        char stream[KEYS_MAX];
        keys_sku(stream, w->skus[i], KEY_STREAM);
        const char *argv[] = {"XAUTOCLAIM", stream, KEYS_WRITER_GROUP, w->consumer,
                              idle,         "0-0",  "COUNT",           count};
        redisReply *r = redis_conn_cmd(&w->ctx.redis, 8, argv, NULL);
        if (!r) {
            failed = 1;
            break;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
            const struct batch *b = set_add(w, &set, w->skus[i], r->element[1], 0);
            if (b) {
                log_info("sku %" PRId64 ": replaying %zu reclaimed orders", w->skus[i], b->n);
                metrics_add(M_WRITER_ORDERS_RECLAIMED, (long)b->n);
            }
        }
        freeReplyObject(r);
    }
    int n = set_write(w, &set);
    return failed ? -1 : n;
}

/*
 * On a Redis Cluster each SKU's stream has a slot of its own, and one
 * XREADGROUP may not name streams of several slots (CROSSSLOT): one read
 * per stream, without BLOCK, all in one pipeline (each on its master).
 * While nothing comes the pause between polls doubles from 1 ms up to
 * writer_block_ms; the first entry brings it back to 1 ms.
 */
static int read_per_slot(struct writer *w)
{
    const struct cfg *c = w->ctx.cfg;
    size_t n = w->nskus;
    char count[24];
    snprintf(count, sizeof count, "%" PRId64, c->writer_batch);
    char(*names)[KEYS_MAX] = xcalloc(n, sizeof *names);
    const char *(*argv)[9] = xcalloc(n, sizeof *argv);
    const char *const **argvs = xcalloc(n, sizeof *argvs);
    int *argcs = xcalloc(n, sizeof *argcs);
    redisReply **out = xcalloc(n, sizeof *out);
    for (size_t i = 0; i < n; i++) {
        keys_sku(names[i], w->skus[i], KEY_STREAM);
        const char *a[9] = {"XREADGROUP", "GROUP",   KEYS_WRITER_GROUP, w->consumer, "COUNT",
                            count,        "STREAMS", names[i],          ">"};
        memcpy(argv[i], a, sizeof a);
        argvs[i] = argv[i];
        argcs[i] = 9;
    }
    int total = -1;
    if (redis_conn_pipeline(&w->ctx.redis, n, argcs, argvs, out) == 0) {
        int nogroup = 0;
        struct batch_set set = {0};
        for (size_t i = 0; i < n; i++) {
            const redisReply *r = out[i];
            if (r->type == REDIS_REPLY_ERROR) {
                if (strncmp(r->str, "NOGROUP", 7) == 0)
                    nogroup = 1;
                else
                    log_warn("XREADGROUP %s: %s", names[i], r->str);
                continue;
            }
            set_add_read(w, &set, r);
        }
        total = set_write(w, &set);
        if (nogroup)
            ensure_groups(w);
        for (size_t i = 0; i < n; i++)
            freeReplyObject(out[i]);
    }
    free(out);
    free(argcs);
    free(argvs);
    free(argv);
    free(names);
    if (total == 0) {
        w->idle_ms = w->idle_ms <= 0 ? 1 : w->idle_ms * 2;
        if (w->idle_ms > c->writer_block_ms)
            w->idle_ms = (int)c->writer_block_ms;
        usleep((useconds_t)w->idle_ms * 1000);
    } else if (total > 0) {
        w->idle_ms = 0;
    }
    return total;
}

int writer_poll(struct writer *w)
{
    const struct cfg *c = w->ctx.cfg;
    int64_t now = clock_mono_ms();
    if (now >= w->next_refresh_ms) {
        if (refresh_skus(w) != 0)
            return -1;
        w->next_refresh_ms = now + c->writer_refresh_ms;
    }
    if (w->nskus == 0) {
        usleep((useconds_t)c->writer_block_ms * 1000);
        return 0;
    }
    int total = 0;
    if (now >= w->next_claim_ms) {
        int n = reclaim(w);
        if (n < 0)
            return -1;
        total += n;
        w->next_claim_ms = now + c->writer_claim_idle_ms / 2;
    }
    if (w->ctx.redis.target.nseeds > 0) {
        int n = read_per_slot(w);
        return n < 0 ? -1 : total + n;
    }
    size_t argc = 0, max = 9 + 2 * w->nskus; /* head below + 2 per stream */
    const char **argv = xcalloc(max, sizeof *argv);
    char(*names)[KEYS_MAX] = xcalloc(w->nskus, sizeof *names);
    char count[24], block[24];
    snprintf(count, sizeof count, "%" PRId64, c->writer_batch);
    snprintf(block, sizeof block, "%" PRId64, c->writer_block_ms);
    const char *head[] = {"XREADGROUP", "GROUP", KEYS_WRITER_GROUP, w->consumer, "COUNT", count,
                          "BLOCK",      block,   "STREAMS"};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        argv[argc++] = head[i];
    for (size_t i = 0; i < w->nskus; i++) {
        keys_sku(names[i], w->skus[i], KEY_STREAM);
        argv[argc++] = names[i];
    }
    for (size_t i = 0; i < w->nskus; i++)
        argv[argc++] = ">";
    redisReply *r = redis_conn_cmd(&w->ctx.redis, (int)argc, argv, NULL);
    free(argv);
    free(names);
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOGROUP", 7) == 0)
            ensure_groups(w);
        else
            log_warn("XREADGROUP: %s", r->str);
        freeReplyObject(r);
        return -1;
    }
    struct batch_set set = {0};
    set_add_read(w, &set, r);
    int n = set_write(w, &set);
    freeReplyObject(r);
    return n < 0 ? -1 : total + n;
}

int writer_init(struct writer *w, const struct cfg *c, const char *consumer, char *err,
                size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (worker_ctx_init(&w->ctx, c, err, errlen) != 0)
        return -1;
    /* Its statements are prepared once per session (writer_tx.c): through
     * a pooler, a session-pooled entry of its own. */
    db_conn_use_dsn(&w->ctx.db, c->pg_writer_dsn);
    /* A blocking XREADGROUP legitimately takes up to writer_block_ms. */
    w->ctx.redis.timeout_ms = (int)(c->redis_timeout_ms + c->writer_block_ms);
    snprintf(w->consumer, sizeof w->consumer, "%s", consumer);
    return 0;
}

void writer_close(struct writer *w)
{
    worker_ctx_close(&w->ctx);
    free(w->skus);
    w->skus = NULL;
}

/* ---- threads ------------------------------------------------------------- */

struct order_writer {
    atomic_int stopping;
    size_t n;
    pthread_t *tids;
    struct writer *writers;
};

struct writer_arg {
    struct order_writer *ow;
    struct writer *w;
};

static void *writer_main(void *arg)
{
    struct writer_arg *a = arg;
    struct order_writer *ow = a->ow;
    struct writer *w = a->w;
    free(a);
    while (!atomic_load(&ow->stopping))
        if (writer_poll(w) < 0)
            usleep((useconds_t)w->ctx.cfg->writer_retry_ms * 1000);
    return NULL;
}

struct order_writer *order_writer_start(const struct cfg *c, char *err, size_t errlen)
{
    struct order_writer *ow = xcalloc(1, sizeof *ow);
    ow->n = (size_t)c->writer_threads;
    ow->tids = xcalloc(ow->n ? ow->n : 1, sizeof *ow->tids);
    ow->writers = xcalloc(ow->n ? ow->n : 1, sizeof *ow->writers);
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    size_t started = 0;
    for (; started < ow->n; started++) {
        size_t i = started;
        char consumer[96];
        snprintf(consumer, sizeof consumer, "%s-%d-%zu", host, (int)getpid(), i);
        if (writer_init(&ow->writers[i], c, consumer, err, errlen) != 0)
            break;
        ow->writers[i].part = i;
        ow->writers[i].nparts = ow->n;
        struct writer_arg *a = xmalloc(sizeof *a);
        *a = (struct writer_arg){ow, &ow->writers[i]};
        if (pthread_create(&ow->tids[i], NULL, writer_main, a) != 0) {
            snprintf(err, errlen, "cannot start writer thread");
            free(a);
            writer_close(&ow->writers[i]);
            break;
        }
    }
    if (started < ow->n) {
        /* Stop the threads already running before the caller frees what
         * they use (the config, the lock library's threads). */
        ow->n = started;
        order_writer_stop(ow);
        return NULL;
    }
    return ow;
}

void order_writer_stop(struct order_writer *ow)
{
    if (!ow)
        return;
    atomic_store(&ow->stopping, 1);
    for (size_t i = 0; i < ow->n; i++) {
        pthread_join(ow->tids[i], NULL);
        writer_close(&ow->writers[i]);
    }
    free(ow->tids);
    free(ow->writers);
    free(ow);
}
