/*
 * handle_order: the buyer's order endpoints, over the order module.
 *
 *   POST /api/v1/skus/{sku_id}/orders          place an order (order_desk, on the loop)
 *   GET  /api/v1/orders/{order_id}             look one up (order_lookup, on a worker)
 *   POST /api/v1/orders/{order_id}/cancel      its buyer cancels it (order_life, on a worker)
 *   POST /admin/v1/orders/{order_id}/payment   the payment callback (order_life, on a worker)
 *   GET  /admin/v1/orders/{order_id}           an operator looks any order up (as its buyer would)
 *   POST /admin/v1/orders/{order_id}/cancel    an operator cancels it (as its buyer would)
 *
 * Placing and looking up end in one switch that maps an order_result to the
 * HTTP answer; cancel and pay in one that maps a life_result.
 */
#ifndef SECKILL_HANDLE_ORDER_H
#define SECKILL_HANDLE_ORDER_H

#include <stdint.h>

#include "http/server.h"

void handle_order_place(struct http_req *r, int64_t sku);
void handle_order_get(struct http_req *r, int64_t order_id);
void handle_order_cancel(struct http_req *r, int64_t order_id);
void handle_order_pay(struct http_req *r, int64_t order_id);
void handle_order_get_admin(struct http_req *r, int64_t order_id);
void handle_order_cancel_admin(struct http_req *r, int64_t order_id);

#endif
