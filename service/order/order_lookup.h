/*
 * order_lookup: what a buyer's GET of an order shows (runs on a worker).
 *
 * A decided order is a row in PostgreSQL.  One not decided yet lives only in
 * Redis: the id's epoch names the SKU load that issued it (sku_epochs), and
 * that SKU's journal says "pending".
 */
#ifndef SECKILL_ORDER_LOOKUP_H
#define SECKILL_ORDER_LOOKUP_H

#include <jansson.h>
#include <stdint.h>

#include "order/order.h"
#include "store/workers.h"

/* Returns ORDER_FOUND with *out (caller json_decref), ORDER_NOT_FOUND, or
 * ORDER_UNAVAILABLE when Redis or PostgreSQL failed; *out is NULL unless
 * ORDER_FOUND. */
enum order_result order_lookup(struct worker_ctx *w, int64_t order_id, json_t **out);

#endif
