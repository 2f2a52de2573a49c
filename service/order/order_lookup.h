/*
 * order_lookup: what a buyer's GET of an order shows (runs on a worker).
 *
 * A decided order is a row in PostgreSQL.  One not decided yet lives only in
 * Redis: the id's epoch names the SKU load that issued it (sku_epochs), and
 * that SKU's journal says "pending:<user>": the buyer is part of the state.
 */
#ifndef SECKILL_ORDER_LOOKUP_H
#define SECKILL_ORDER_LOOKUP_H

#include <jansson.h>
#include <stdint.h>

#include "order/order.h"
#include "store/workers.h"

/* The order 'order_id' of 'buyer' (the user its token names).  Returns
 * ORDER_FOUND with *out (caller json_decref), ORDER_NOT_FOUND (also for an
 * order of another buyer: ids are sequential, and a buyer may learn nothing
 * of orders not theirs, not even that they exist), or ORDER_UNAVAILABLE when
 * Redis or PostgreSQL failed; *out is NULL unless ORDER_FOUND. */
enum order_result order_lookup(struct worker_ctx *w, int64_t order_id, int64_t buyer, json_t **out);

#endif
