/*
 * order_lookup: what a buyer's GET of an order shows (runs on a worker).
 *
 * A decided order is a row in PostgreSQL.  One not decided yet lives only in
 * Redis: the id's epoch names the SKU load that issued it (sku_epochs), and
 * that SKU's journal says "pending:<user>": the buyer is part of the state.
 * A pending order its buyer cancelled has a cancel request in PostgreSQL
 * until the writer writes it as cancelled.
 */
#ifndef SECKILL_ORDER_LOOKUP_H
#define SECKILL_ORDER_LOOKUP_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "order/order.h"
#include "store/workers.h"

/* The order 'order_id' of 'buyer' (the user its token names).  Returns
 * ORDER_FOUND with *out (caller json_decref), ORDER_NOT_FOUND (also for an
 * order of another buyer: ids are sequential, and a buyer may learn nothing
 * of orders not theirs, not even that they exist), or ORDER_UNAVAILABLE when
 * Redis or PostgreSQL failed; *out is NULL unless ORDER_FOUND. */
enum order_result order_lookup(struct worker_ctx *w, int64_t order_id, int64_t buyer, json_t **out);

/* The buyer of order 'order_id', for an operator, who may see and cancel
 * any order through the buyer's own paths (order_lookup, order_cancel): from
 * its row, else its pending reservation in Redis, else its newest recorded
 * reservation.  Returns ORDER_FOUND with *buyer, ORDER_NOT_FOUND or
 * ORDER_UNAVAILABLE. */
enum order_result order_buyer_of(struct worker_ctx *w, int64_t order_id, int64_t *buyer);

/* The JSON of the order in row 0 of a sql/order_get.sql result: id, SKU,
 * buyer, qty, status, reason, and the times of its states that are set. */
json_t *order_row_json(const PGresult *r);

/* Where an order that has no row yet is: ORDER_PENDING with its SKU, buyer
 * and (entry not NULL: ORDER_ENTRY_MAX bytes) the stream entry of its
 * reservation ("" for a journal state written before states named it), from
 * the journal's "pending:<user>:<entry>"; ORDER_NOT_FOUND when Redis holds no
 * pending reservation under that id, or ORDER_UNAVAILABLE. */
enum order_result order_pending_where(struct worker_ctx *w, int64_t order_id, int64_t *sku,
                                      int64_t *buyer, char *entry);

/* The same on a known SKU, from Redis alone. */
enum order_result order_pending_owner_of(struct worker_ctx *w, int64_t sku, int64_t order_id,
                                         int64_t *buyer, char *entry);

/* A pending order its buyer cancelled (the writer has not written it yet):
 * the time (Unix ms) of the request that names this reservation (order id,
 * buyer and stream entry 'entry'; a request recorded before requests named
 * their entry names any), 0 when there is none, -1 when PostgreSQL failed. */
int64_t order_cancel_requested(struct worker_ctx *w, int64_t order_id, int64_t buyer,
                               const char *entry);

#endif
