/*
 * handle_sku: the SKU endpoints (buyer view and admin) and the health check,
 * over the SKU module.  Each runs its blocking work on a worker and comes back
 * to the loop, where one switch maps the sku_result to the HTTP answer.
 *
 *   GET  /api/v1/skus/{sku_id}                         handle_sku_get
 *   POST /admin/v1/skus                                handle_sku_create
 *   GET  /admin/v1/skus                                handle_sku_list (a page)
 *   GET  /admin/v1/sale                                handle_sku_sale (a page)
 *   GET  /admin/v1/skus/{sku_id}                       handle_sku_get_admin
 *   POST /admin/v1/skus/{sku_id}/reload                handle_sku_reload
 *   PATCH /admin/v1/skus/{sku_id}                      handle_sku_update (payment window)
 *   POST /admin/v1/skus/{sku_id}/stock-adjustments     handle_sku_adjust
 *   GET  /healthz                                      handle_sku_health
 */
#ifndef SECKILL_HANDLE_SKU_H
#define SECKILL_HANDLE_SKU_H

#include <stdint.h>

#include "http/server.h"

void handle_sku_get(struct http_req *r, int64_t sku);
void handle_sku_create(struct http_req *r, int64_t unused);
void handle_sku_get_admin(struct http_req *r, int64_t sku);
void handle_sku_reload(struct http_req *r, int64_t sku);
void handle_sku_adjust(struct http_req *r, int64_t sku);
void handle_sku_update(struct http_req *r, int64_t sku);
void handle_sku_health(struct http_req *r, int64_t unused);
void handle_sku_list(struct http_req *r, int64_t unused);
void handle_sku_sale(struct http_req *r, int64_t unused);

#endif
