/*
 * order_writer: turns reservations on the per-SKU Redis streams into order rows.
 *
 * A consumer group ("writers") spreads entries over every writer of every
 * instance.  What one read brings is one batch per SKU, and the batches of
 * up to writer_skus_per_tx SKUs are written in one transaction, each SKU
 * under its own fenced writer lock handed to the transaction (writer_tx.c):
 *   the fenced row locks and the reads; guarded UPDATE skus (stock >= n),
 *   INSERT orders ON CONFLICT (id) DO NOTHING, ledger rows; COMMIT; then, in
 *   the completion hooks and still under the locks, the units of rejected
 *   orders back (exactly once, by the journal), XACK and the decisions
 *   (writer_settle.c); last, the locks are released.
 * Entries of a writer that died are reclaimed with XAUTOCLAIM and replayed;
 * the primary key and the journal make a replay change nothing.
 */
#ifndef SECKILL_ORDER_WRITER_H
#define SECKILL_ORDER_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "core/cfg.h"
#include "store/workers.h"

struct writer_entry {
    char stream_id[32];
    int64_t order_id, user_id, qty;
    int64_t reserved_ms; /* from the stream id */
    char idem[1025];
};

struct writer {
    struct worker_ctx ctx;
    char consumer[96];
    int64_t *skus;
    size_t nskus;
    int64_t next_refresh_ms, next_claim_ms;
    /* This writer reads the streams of the SKUs whose id is 'part' modulo
     * 'nparts' (nparts <= 1: all), so that an instance's writer threads share
     * many SKUs instead of one thread reading every stream's batch at once;
     * each SKU still has one reader per instance, and every instance's. */
    size_t part, nparts;
    unsigned long prepared_session; /* the db session the batch statements are prepared on */
    int idle_ms; /* on a cluster: the pause before the next poll while nothing comes */
};

/* Prepares a writer (no I/O yet).  Returns 0, or -1 with err set. */
int writer_init(struct writer *w, const struct cfg *c, const char *consumer, char *err,
                size_t errlen) __attribute__((warn_unused_result));
void writer_close(struct writer *w);

/* Writes one batch of entries of one SKU in one transaction.  Returns 0 when
 * every entry was decided (committed, compensated and acknowledged), or -1 when
 * nothing may be assumed and the batch must be replayed later. */
int writer_process_batch(struct writer *w, int64_t sku, const struct writer_entry *e, size_t n);

/* One round: refresh the SKU list when due, reclaim idle entries when due,
 * read new entries (blocking up to writer_block_ms) and write them.  Returns
 * the number of entries decided, or -1 after an error. */
int writer_poll(struct writer *w);

struct order_writer;

/* Starts cfg->writer_threads writer threads (none when 0). */
struct order_writer *order_writer_start(const struct cfg *c, char *err, size_t errlen);
/* Asks the threads to stop (they finish their batch), joins and frees. */
void order_writer_stop(struct order_writer *ow);

#endif
