/*
 * order_desk: a buyer's order on one HTTP event loop, from request to outcome.
 *
 * One desk per loop, used only on that loop's thread.  order_desk_place()
 * queues the order for reserve.lua; at the end of the loop turn the desk
 * sends the turn's orders on the loop's own async Redis connection (no worker,
 * no blocking), one call per SKU key of up to reserve_batch_max orders, turns
 * each order's part of the reply into an order_result (order.c), and in durable
 * mode (order_ack = durable) waits for the writer's decision (order_wait).
 * A SKU that Redis does not hold is looked up in PostgreSQL on a worker: 404
 * material if unknown there too, else the reconciler is woken to restore it.
 * A parent of stock buckets (sku/buckets.h) is found the same way, once per
 * loop: its orders then run on the buyer's bucket, and a bucket's sold_out
 * sends the order to a worker that moves units into the bucket
 * (sku_bucket_refill), then tries again (bucket_refill_rounds).
 *
 * Every reservation carries an Idempotency-Key: the buyer's, or one made up
 * here, so that an outcome lost with a broken connection can still be found.
 * The script is given a deadline (Redis clock) a little before the request's
 * Redis timeout, so that "nothing taken" answers are true.
 */
#ifndef SECKILL_ORDER_DESK_H
#define SECKILL_ORDER_DESK_H

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cfg.h"
#include "order/order.h"
#include "store/workers.h"

struct order_desk;

/* One order as the buyer asked for it (validated by the caller). */
struct order_request {
    int64_t sku, user, qty;
    const char *idem; /* the buyer's Idempotency-Key (validated), or NULL */
    /* the request's deadline (clock_mono_ms; 0 none): the PostgreSQL work an
     * order needs on a worker (the SKU probe, a bucket refill, the record
     * of a 202) ends by then, or is not started, and fails */
    int64_t deadline_ms;
};

/* The final outcome of one order_desk_place(). */
struct order_outcome {
    enum order_result result;
    int replayed;            /* the answer to an earlier request with the same key */
    struct order_decision d; /* the order, when result is PENDING, CONFIRMED or REJECTED */
    const char *idem;        /* the reservation's key: it settles ORDER_OUTCOME_LOST/TIMEOUT */
    int64_t retry_after_ms;  /* ORDER_RATE_LIMITED: when the buyer may order again */
};

/* Called exactly once per order, on the desk's loop; o is valid only during
 * the call. */
typedef void order_desk_fn(const struct order_outcome *o, void *arg);

/* Creates the desk of the loop 'base' and starts its Redis connections.
 * 'ws' runs the PostgreSQL look-ups.  Returns NULL with err set on a bad
 * Redis URL. */
struct order_desk *order_desk_new(struct event_base *base, const struct cfg *c, struct workers *ws,
                                  char *err, size_t errlen);

/* Places one order; fn runs exactly once, possibly before this returns.
 * After order_desk_close(), or when od is NULL, the outcome is
 * ORDER_UNAVAILABLE at once. */
void order_desk_place(struct order_desk *od, const struct order_request *rq, order_desk_fn *fn,
                      void *arg);

/* From now on new orders are refused (ORDER_UNAVAILABLE); reservations
 * already sent still get their real outcome. */
void order_desk_close(struct order_desk *od);

/* Reservations queued for this loop turn or sent to Redis whose reply has not
 * come yet. */
int order_desk_pending(const struct order_desk *od);

/* Tells every buyer still waiting for a commit that the order is pending,
 * disconnects and frees.  NULL is a no-op. */
void order_desk_free(struct order_desk *od);

#endif
