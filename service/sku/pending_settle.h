/*
 * pending_settle: durable orders answered "202 pending" are recorded in
 * PostgreSQL first (order_pending, migrations/0008_order_pending.sql; the
 * order desk records them), and settled here, so that none ever vanishes.
 *
 * The writer writes such an order from its stream entry as usual; the record
 * is then only marked 'written'.  When Redis lost the reservation (restarted
 * empty, a failover to a replica that never had it) the entry never comes:
 * under the SKU's lock and fenced row, with no row for the order and its
 * entry gone from the stream (order_pending_probe.lua), the settler decides
 * the order itself, first come first served as a writer would: cancelled
 * when its buyer asked, rejected over the per-user limit or the stock,
 * else confirmed by a guarded stock take.  Redis did not count it (the units
 * went with the reservation): after COMMIT a confirmed order is taken from
 * the SKU's last load by orders_reapply.lua (its row records that load in
 * reapply_epoch, as a writer's does for an order written across a rebuild),
 * and the journal of a refused one says so (order_pending_settled.lua).
 */
#ifndef SECKILL_PENDING_SETTLE_H
#define SECKILL_PENDING_SETTLE_H

#include <stdint.h>

#include "store/dbtx.h"
#include "store/workers.h"

struct load_job; /* sku/sku_store.h */

/* Settles the orders of sku recorded as pending at least older_ms ago (at
 * most writer_batch of them per call), under the SKU's lock.  Returns 0 with
 * *settled (may be NULL) counting the records settled now, or -1 when a store
 * failed or the lock was busy (nothing assumed; the next pass tries again). */
int pending_settle_sku(struct worker_ctx *w, int64_t sku, int64_t older_ms, int64_t *settled)
    __attribute__((warn_unused_result));

/* pending_settle_sku() for every SKU with records due (older than older_ms).
 * Returns 0, or -1 when one could not be settled. */
int pending_settle_due(struct worker_ctx *w, int64_t older_ms, int64_t *settled)
    __attribute__((warn_unused_result));

/* For a rebuild, under the SKU's lock and row: adds to lj the orders of sku
 * recorded as pending, not settled, with a key of the buyer's and no row
 * under their id, whose keys its load (sku_load.lua) writes back in the step
 * that installs the new epoch, so that a retry with its key finds the order
 * from the moment the SKU sells again.  Returns 0 or -1 (lj->restore is
 * the caller's to free either way). */
int pending_restore_plan(struct dbtx *tx, int64_t sku, struct load_job *lj)
    __attribute__((warn_unused_result));

#endif
