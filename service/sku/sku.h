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

#include "core/validate.h"
#include "sku/sku_store.h"
#include "store/dbtx.h"
#include "store/txlock.h"
#include "store/workers.h"

/* Each fills *out (caller json_decref) on SKU_OK and SKU_INSUFFICIENT; on
 * other results *out is NULL. */
enum sku_result sku_create(struct worker_ctx *w, const struct validate_sku *spec, json_t **out);
/*
 * Reconciliation of one SKU, under its lock and its fenced row: compares what
 * Redis holds with PostgreSQL and, by mode, repairs.
 *
 * A rebuild replaces the SKU's Redis state with one built from PostgreSQL
 * (stock = skus.stock, units per user from the confirmed orders) under a
 * fresh epoch, so order ids never repeat.  It is safe at any time: orders
 * still in flight were reserved under an older epoch, and their writer takes
 * them from the rebuilt state too (orders_reapply.lua) or, rejected, gives
 * nothing back to it.
 */
enum sku_check_mode {
    SKU_CHECK_ONLY,   /* compare and report, change nothing */
    SKU_CHECK_REPAIR, /* settle adjustment records; rebuild when Redis lost the SKU,
                       * restarted or failed over since it was built, or disagrees
                       * with the database while nothing is in flight */
    SKU_CHECK_RELOAD, /* as REPAIR, and also rebuild while orders are in flight */
    SKU_CHECK_REBUILD /* settle and rebuild */
};

struct sku_check {
    int64_t sku;
    int loaded;       /* Redis holds the SKU (meta and stock) */
    int quiescent;    /* nothing in flight: the numbers below are comparable */
    int stale_run;    /* Redis restarted or failed over since the state was built */
    int invariant_ok; /* sql/invariant_check.sql finds nothing for the SKU */
    int rebuilt;      /* rebuilt now */
    int64_t db_stock, redis_stock;
    int64_t in_flight;        /* stream entries not yet written and acknowledged */
    int64_t adjustments_open; /* adjustment records not settled (after settling) */
    int64_t settled;          /* adjustment records settled now */
    int64_t dead_letters;     /* entries in the SKU's dead-letter stream */
    int64_t journal_pending;  /* journal entries 'pending'; with nothing in flight, each is a
                               * reservation no writer can write any more */
    int64_t drift_units;      /* |Redis stock - skus.stock|, when quiescent */
    int64_t users_differing;  /* users whose units differ, when quiescent */
    int64_t loaded_epoch;     /* the load the Redis state was built at */
    char built_run[48];
};

/* Returns SKU_OK with c filled, SKU_UNKNOWN, SKU_UNAVAILABLE, or
 * SKU_NOT_LOADED when a rebuild committed but Redis refused the load.
 * 'why' goes to the log line of a rebuild. */
enum sku_result sku_check(struct worker_ctx *w, int64_t sku, enum sku_check_mode mode,
                          const char *why, struct sku_check *c);

/* Reads, without any lock, what a reconciliation pass needs to decide whether
 * a SKU deserves a locked sku_check: loaded, in flight, open adjustment
 * records, stale run, both stocks.  Returns SKU_OK, SKU_UNKNOWN or
 * SKU_UNAVAILABLE. */
enum sku_result sku_peek(struct worker_ctx *w, int64_t sku, struct sku_check *c);

/* sku_check(SKU_CHECK_REBUILD). */
enum sku_result sku_rebuild(struct worker_ctx *w, int64_t sku, const char *why);

/* The admin reload: sku_check(SKU_CHECK_RELOAD).  SKU_EXISTS when Redis holds
 * the SKU, nothing is in flight and it agrees with the database. */
enum sku_result sku_reload(struct worker_ctx *w, int64_t sku, json_t **out);
/* Applies a relative delta.  With an Idempotency-Key ('idem', may be NULL), a
 * retry of a delta that committed answers the first answer ("replayed"),
 * SKU_IDEM_MISMATCH when the key was used with another delta. */
enum sku_result sku_adjust(struct worker_ctx *w, int64_t sku, int64_t delta, const char *reason,
                           const char *idem, json_t **out);
enum sku_result sku_view(struct worker_ctx *w, int64_t sku, int admin, json_t **out);
/* Sets the SKU's payment window (seconds, 0: none) for the orders confirmed
 * from now on; answers the admin view.  SKU_UNKNOWN when there is no such SKU. */
enum sku_result sku_set_window(struct worker_ctx *w, int64_t sku, int64_t window_s, json_t **out);
/* SKU_OK if the SKU exists in PostgreSQL, SKU_UNKNOWN if not. */
enum sku_result sku_exists(struct worker_ctx *w, int64_t sku);

#endif
