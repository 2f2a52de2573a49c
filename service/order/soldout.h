/*
 * soldout: a process-wide, per-SKU "sold out a moment ago" flag, so that a
 * sold-out storm is answered without a Redis script per request.
 *
 * A flag is set only by reserve.lua's own verdict {'sold_out', 0} for a
 * loaded SKU (no stock left at all: a sold_out for 3 units with 2 left sets
 * nothing), and is trusted for window_ms (the setting sold_out_flag_ms) from
 * the moment the request that earned it was *sent*.  The verdict was computed
 * after that moment, so a sold_out answered from the flag lags stock that
 * came back (a restock, a returned order, a rebuild, on any instance) by less
 * than window_ms: nothing needs to be told, and no message can be lost.
 *
 * During the second half of the window the first request that looks claims
 * the probe and goes to Redis while the others are still answered here; its
 * verdict re-arms the flag (still sold out) or clears it (stock again).  So
 * a storm on one SKU costs one script per half window per process (all HTTP
 * loops share the table), and at most one probe per SKU is in flight in a
 * process.  A probe that learns nothing about the stock (the buyer's limit,
 * bucket, a failure) gives its claim back; one that never answers loses it
 * after half a window.
 *
 * The table is a fixed array of slots, direct-mapped by SKU id, shared
 * lock-free by every thread: no allocation, no lock on the hot path.  A
 * slot's (sku, until) pair is kept consistent by a sequence word (a writer
 * that finds another one busy just gives up); two SKUs on one slot evict each
 * other.  Either way the cost is a missing flag, which is today's behaviour:
 * correctness never depends on a flag being set, only on a set flag being
 * true, which the sequence word and the full SKU id in the slot guarantee.
 *
 * Times are milliseconds on the monotonic clock (core/clock.h), passed in by
 * the caller (so the table is pure and its tests choose the time).
 */
#ifndef SECKILL_ORDER_SOLDOUT_H
#define SECKILL_ORDER_SOLDOUT_H

#include <stdint.h>

#include "order/order.h"

#define SOLDOUT_SLOTS 4096 /* a power of two */

struct soldout;

/* What to do with one order request for a SKU. */
enum soldout_check {
    SOLDOUT_ASK,     /* no flag (or none worth trusting): ask Redis as always */
    SOLDOUT_PROBE,   /* flagged, and this request is the one that asks Redis again */
    SOLDOUT_FLAGGED, /* answer sold_out here, without Redis */
};

/* What a reply from reserve.lua said about a SKU's stock. */
enum soldout_news {
    SOLDOUT_NEWS_NONE,  /* nothing about the stock (a limit, a replay, a failure) */
    SOLDOUT_NEWS_EMPTY, /* sold_out with no unit left: set the flag */
    SOLDOUT_NEWS_OPEN,  /* units to sell, or no sale to flag (unknown, not active): clear it */
};

/* The process's table, shared by every thread (zeroed: no flag). */
struct soldout *soldout_shared(void);

/* A private table, for tests; soldout_free() frees it.  Aborts on no memory. */
struct soldout *soldout_new(void);
void soldout_free(struct soldout *t);

/*
 * Looks at sku's flag at now_ms, window_ms being sold_out_flag_ms (0: the
 * flag is off, always SOLDOUT_ASK).  SOLDOUT_PROBE hands the caller the claim
 * *claim (nonzero), which it must pass back to soldout_note() with the
 * reply; otherwise *claim is 0.  A request carrying the buyer's own
 * Idempotency-Key must not look at all (its earlier answer is in Redis).
 */
enum soldout_check soldout_check(struct soldout *t, int64_t sku, int64_t now_ms, int64_t window_ms,
                                 int64_t *claim);

/*
 * Records what a reply said about sku.  sent_ms is when that request was sent
 * (never later: the flag's window starts there), claim what soldout_check
 * gave it (0: none).  EMPTY sets the flag until sent_ms + window_ms (keeping
 * a later expiry of the same SKU), OPEN clears it; all of them give the
 * claim back.  window_ms 0 records nothing.
 */
void soldout_note(struct soldout *t, int64_t sku, enum soldout_news news, int64_t sent_ms,
                  int64_t window_ms, int64_t claim);

/* What a parsed reserve.lua reply says (rep NULL: no reply came). */
enum soldout_news soldout_news_of(const struct order_reply *rep);

/* Clears sku's flag at once: this process has just given the SKU units (an
 * admin delta, a load, a rejected order's return).  Optional: the window
 * bounds a stale flag anyway. */
void soldout_clear(struct soldout *t, int64_t sku);

/* Calls fn for each SKU flagged at now_ms (for /metrics), in slot order;
 * returns how many.  A slot being written at that moment is skipped. */
int soldout_each(struct soldout *t, int64_t now_ms, void (*fn)(int64_t sku, void *arg), void *arg);

#endif
