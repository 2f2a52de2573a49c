/*
 * sku_pages: the operators' paged views over many SKUs (run on a worker):
 * the SKU list (PostgreSQL alone) and the sale status (every SKU on sale:
 * both stores' stock, what is in flight, stream lag, drift).
 *
 * Pages are keyset pages (ids above 'after', in id order), bounded by the
 * maxima below, so one request costs a bounded amount of work whatever the
 * number of SKUs; "next_after" in the answer is the cursor of the next page,
 * null on the last one.
 */
#ifndef SECKILL_SKU_PAGES_H
#define SECKILL_SKU_PAGES_H

#include <jansson.h>
#include <stdint.h>

#include "sku/sku_store.h"
#include "store/workers.h"

/* GET /admin/v1/skus: one PostgreSQL query per page. */
#define SKU_LIST_PAGE_DEFAULT 100
#define SKU_LIST_PAGE_MAX 500
/* GET /admin/v1/sale: a Redis script and a PostgreSQL read per SKU. */
#define SKU_SALE_PAGE_DEFAULT 50
#define SKU_SALE_PAGE_MAX 100

/* {"skus": [the admin fields of each SKU's row], "next_after": id|null}.
 * Returns SKU_OK with *out (caller json_decref), or SKU_UNAVAILABLE (*out
 * NULL). */
enum sku_result sku_list_page(struct worker_ctx *w, int64_t after, int64_t limit, json_t **out);

/* {"skus": [...], "next_after": id|null}: each SKU on sale (its sale has not
 * ended; buckets rather than their parent) with db_stock, available (null:
 * Redis does not hold it), in_flight_units (db_stock - available), sold_out,
 * stream_length, stream_lag, adjustments_open, dead_letters, quiescent and
 * drift_units (|Redis - PostgreSQL| when quiescent, else null).  Returns
 * SKU_OK with *out, or SKU_UNAVAILABLE. */
enum sku_result sku_sale_page(struct worker_ctx *w, int64_t after, int64_t limit, json_t **out);

#endif
