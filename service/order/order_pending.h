/*
 * order_pending: a durable order whose commit did not come within
 * order_ack_wait_ms, recorded in PostgreSQL before its buyer is told "202
 * pending" (order_pending, migrations/0008_order_pending.sql), so that the
 * answer holds whatever Redis loses afterwards: the writer writes the order
 * from its stream entry, or, when Redis lost the reservation, the reconciler
 * settles the record itself (sku/pending_settle.h).  This is the rare slow
 * path: an order committed in time is never recorded here.  Runs on a worker.
 */
#ifndef SECKILL_ORDER_PENDING_H
#define SECKILL_ORDER_PENDING_H

#include <jansson.h>
#include <stdint.h>

#include "order/order.h"
#include "store/dbtx.h"
#include "store/workers.h"

/* The reservation a 202 names. */
struct order_pending_rec {
    int64_t order_id;
    char entry[ORDER_ENTRY_MAX]; /* its stream entry id */
    int64_t sku;                 /* the SKU whose keys reserved it (a bucket's own id) */
    int64_t user, qty;
    const char *idem; /* the buyer's own Idempotency-Key, or NULL */
};

/* Records p (a second record of the same reservation is a no-op).  Nothing
 * is written to Redis: a Redis that lost the reservation may still issue its
 * id again, and only a rebuild (a new epoch) writes the buyer's key back
 * (sku_load.lua, from pending_restore_plan).  Returns 0 once PostgreSQL holds the record, -1
 * when it could not be recorded (nothing may then be promised beyond what
 * Redis holds). */
int order_pending_record(struct worker_ctx *w, const struct order_pending_rec *p)
    __attribute__((warn_unused_result));

/* A lookup that found neither a row of 'buyer' nor a pending journal entry:
 * the newest recorded reservation of order_id by buyer.  ORDER_FOUND with
 * *out (caller json_decref): "pending" while it is not settled (or settled a
 * moment ago by a row the caller did not see yet), "rejected" with reason
 * id_conflict when its id went to another reservation; ORDER_NOT_FOUND, or
 * ORDER_UNAVAILABLE. */
enum order_result order_pending_lookup(struct worker_ctx *w, int64_t order_id, int64_t buyer,
                                       json_t **out);

/* The newest recorded reservation of order_id by buyer, read in tx (NULL:
 * on w's own connection): 1 with *sku, its stream entry and *conflict (1:
 * settled id_conflict, another reservation's row holds the id), 0 when there
 * is none, -1 when PostgreSQL failed. */
int order_pending_of(struct worker_ctx *w, struct dbtx *tx, int64_t order_id, int64_t buyer,
                     int64_t *sku, char entry[ORDER_ENTRY_MAX], int *conflict)
    __attribute__((warn_unused_result));

#endif
