/*
 * writer_batch: what the order writer's three parts share (private to
 * service/order/).
 *
 *   order_writer.c   reads the streams, makes one batch per SKU of what it
 *                    read, hands the batches to writer_tx, and runs the threads;
 *   writer_tx.c      writes several SKUs' batches in ONE transaction: each
 *                    SKU's writer lock (fenced), the fenced row locks and the
 *                    reads in one round trip, the decisions, the writes in one
 *                    more, COMMIT;
 *   writer_settle.c  what a batch owes Redis once its transaction committed,
 *                    in the completion hook and still under the SKU's lock:
 *                    units of rejected orders back, reapplied orders taken,
 *                    dead letters moved, the batch acknowledged and its
 *                    decisions published.
 */
#ifndef SECKILL_WRITER_BATCH_H
#define SECKILL_WRITER_BATCH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "order/order.h"

#include "store/txlock.h"

struct writer;       /* order/order_writer.h */
struct writer_entry; /* order/order_writer.h */

enum decision {
    DEC_NONE,
    DEC_CONFIRMED,
    DEC_REJECTED,
    DEC_DEAD /* its id belongs to another order in the database: dead letter */
};

/* Units each user of a batch holds: confirmed rows, then this batch's
 * confirmations as they are decided.  A small open-addressing table. */
struct user_units {
    size_t cap;
    int64_t *user, *units;
};

/* The entries of one SKU read from its stream, and what the transaction
 * decides for each.  A batch is allocated on its own and never moves while
 * its lock is held (the watchdog thread writes lock.lost). */
struct batch {
    struct writer *w;
    int64_t sku;
    struct writer_entry *e; /* owned */
    size_t n, cap;
    const char **dup; /* per entry: ORDER_REASON_ID_CONFLICT for a repeated id, else NULL */
    int top_up;       /* still to do: read what queued while the lock was awaited */

    /* one transaction's state, reset by writer_tx for each attempt */
    enum decision *dec;  /* what the database holds for each entry after commit */
    const char **reason; /* of rejections and dead letters */
    int32_t *reapply;    /* load epoch the confirmed order must be taken from, or 0 */
    int64_t *cancel_ms;  /* its buyer cancelled it before it was written: when (Unix ms), or 0 */
    int64_t limit;       /* per-user limit, from skus */
    int64_t window_s;    /* payment window of the orders it confirms, from skus (0: none) */
    int64_t load_epoch;  /* the SKU's last load into Redis, from sku_epochs */
    int64_t stock;       /* under the fenced row lock */
    struct user_units units;
    struct txlock lock;
    int locked;    /* lock taken for this attempt */
    int busy;      /* its lock was held by another writer: tried again, waiting */
    int in_tx;     /* row lock taken: its writes are part of the transaction */
    int stale;     /* its token was refused for good: tried again on its own */
    int rules;     /* its rules were read */
    int conflicts; /* dead letters: Redis went back in time, rebuild the SKU */
    int finished;  /* stock returned, reapplied, dead letters moved, acknowledged */
    int done;      /* committed and finished: every entry decided */
};

/* Whether entry i was refused by its buyer (cancelled before any writer
 * wrote it), not by the database's guards. */
static inline int batch_is_cancelled(const struct batch *b, size_t i)
{
    return b->dec[i] == DEC_REJECTED && strcmp(b->reason[i], ORDER_REASON_CANCELLED) == 0;
}

/* A new empty batch of sku for w. */
struct batch *batch_new(struct writer *w, int64_t sku);
void batch_free(struct batch *b);
/* Room for n entries in all. */
void batch_reserve(struct batch *b, size_t n);
/* Marks entries from..n that repeat an id seen earlier in the batch (Redis
 * went back in time and issued it again): dead letters. */
void batch_mark_dups(struct batch *b, size_t from);

/* Adds to b what queued on its stream while its lock was awaited
 * (order_writer.c).  A failure leaves b as it was. */
void writer_top_up(struct batch *b);

/* Writes batches b[0..n) (distinct SKUs, in any order) in one transaction:
 * each batch whose lock could be taken and whose SKU accepted its fencing
 * token; the others keep their entries pending (b[i]->done stays 0).  A
 * batch whose lock was busy has b[i]->busy set, one refused for a stale
 * token b[i]->stale: try them again.  Without 'wait' the locks are tried
 * once, all in one round trip; with it they are taken one by one in id
 * order, each waited for.  Sets b[i]->done for each batch committed and
 * settled. */
void writer_tx_write(struct writer *w, struct batch *const *b, size_t n, int wait);

/* After COMMIT, under the batches' locks: gives back the units of rejected
 * orders, takes reapplied ones, moves dead entries, then acknowledges every
 * batch and publishes the decisions, all acknowledgements and messages in
 * one round trip.  Sets b[k]->finished for each batch done; one that is not
 * keeps its entries pending (a replay repeats all of this harmlessly). */
void writer_settle_all(struct batch *const *b, size_t n);

/* Moves stream entries entry_ids[0..n) of sku to the dead-letter stream,
 * giving their units back when give_back (orders_dead_letter.lua, exactly
 * once by the entry's presence), fenced by lock (NULL: entries read without
 * the SKU's writer lock, which give nothing back).  Returns 0 or -1. */
int writer_dead_letter(struct writer *w, int64_t sku, const struct txlock *lock,
                       const char *const *entry_ids, const char *const *reasons, int give_back,
                       size_t n);

#endif
