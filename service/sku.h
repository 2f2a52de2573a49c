/*
 * sku: the blocking operations behind the admin API and the lookups (run on a
 * worker): create a SKU, adjust its stock by a relative delta, and read SKU
 * and order state.  Writes that touch both stores take the SKU's distributed
 * lock and hand it to the database transaction, whose completion hook
 * releases it after COMMIT or ROLLBACK.
 */
#ifndef SECKILL_SKU_H
#define SECKILL_SKU_H

#include <jansson.h>
#include <stdint.h>

#include "validate.h"
#include "workers.h"

/* Business outcomes; http_api maps them to status codes in one switch. */
enum sku_result {
    SKU_OK,
    SKU_UNKNOWN,      /* no such SKU (or order) */
    SKU_EXISTS,       /* create: id taken, or Redis already holds the SKU */
    SKU_INSUFFICIENT, /* negative delta larger than what is available */
    SKU_UNAVAILABLE,  /* Redis or PostgreSQL failed; nothing was changed */
    SKU_NOT_LOADED,   /* known to PostgreSQL, not (or not loadable) in Redis */
    SKU_BUSY,         /* reload refused: reservations are still queued */
};

/* Each fills *out (caller json_decref) on SKU_OK and SKU_INSUFFICIENT; on
 * other results *out is NULL. */
enum sku_result sku_create(struct worker_ctx *w, const struct validate_sku *spec, json_t **out);
/* Rebuilds a SKU in Redis from PostgreSQL after Redis lost it (restart without
 * persistence, failover): stock = skus.stock, units held per user from the
 * confirmed orders, and a fresh epoch so new order ids never repeat old ones.
 * SKU_EXISTS when Redis still holds the SKU. */
enum sku_result sku_reload(struct worker_ctx *w, int64_t sku, json_t **out);
enum sku_result sku_adjust(struct worker_ctx *w, int64_t sku, int64_t delta, const char *reason,
                           json_t **out);
enum sku_result sku_view(struct worker_ctx *w, int64_t sku, int admin, json_t **out);
enum sku_result order_view(struct worker_ctx *w, int64_t order_id, json_t **out);
/* SKU_OK if the SKU exists in PostgreSQL, SKU_UNKNOWN if not. */
enum sku_result sku_exists(struct worker_ctx *w, int64_t sku);
/* SKU_OK when both Redis and PostgreSQL answer. */
enum sku_result sku_health(struct worker_ctx *w, json_t **out);

/* Formats Unix milliseconds as RFC 3339 UTC ("2026-11-22T10:00:00.000Z"). */
void sku_format_time(int64_t ms, char *out, size_t cap);

#endif
