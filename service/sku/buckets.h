/*
 * buckets: a hot SKU's stock split over several bucket SKUs.
 *
 * A SKU created with buckets = N > 1 is a parent: it sells nothing itself.
 * Its stock lives in N buckets, each an ordinary SKU (row, stock, orders,
 * ledger, stream and Redis keys under a hash tag of its own), whose ids are
 * chosen so that their tags land on different masters of a Redis Cluster:
 * N buckets take N cores' worth of reservations.  A buyer's orders all go to
 * one bucket, ids[user mod N], so the per-user limit and the Idempotency-Key
 * stay in one bucket and one script (reserve.lua refuses the others).
 *
 * When a buyer's bucket cannot serve an order while others still hold units,
 * sku_bucket_refill() moves units into it: one transaction under the locks
 * of every bucket involved (taken in id order), a guarded stock adjustment
 * and an 'admin' ledger row (reason "bucket transfer") per bucket, the Redis
 * halves settled by each adjustment's completion hook as for any admin
 * delta.  So every bucket keeps every invariant on its own, the parent's
 * stock is the sum of its buckets', and "sold out" is answered only when the
 * buckets together cannot serve the order.
 */
#ifndef SECKILL_SKU_BUCKETS_H
#define SECKILL_SKU_BUCKETS_H

#include <stdint.h>

#include <jansson.h>

#include "core/validate.h"
#include "sku/sku_store.h"
#include "store/workers.h"

/* The buckets of SKU sku, in bucket order, into ids (at most cap).  Returns
 * how many (0: sku is not a parent, or does not exist), or -1 on failure. */
int sku_buckets_of(struct worker_ctx *w, int64_t sku, int64_t *ids, int cap);

/* The parent's side of sku_create (spec->buckets > 1), sku_adjust and
 * sku_view (buckets[0..n) of the parent), as sku.h describes them. */
enum sku_result sku_create_buckets(struct worker_ctx *w, const struct validate_sku *spec,
                                   json_t **out);
enum sku_result sku_adjust_parent(struct worker_ctx *w, int64_t parent, const int64_t *buckets,
                                  int n, int64_t delta, const char *reason, const char *idem,
                                  json_t **out);
/* sku_view_parent() turns *out, the parent row's own view, into the sum of
 * its buckets' (freed and NULL on failure). */
enum sku_result sku_view_parent(struct worker_ctx *w, const int64_t *buckets, int n, int admin,
                                json_t **out);

/* The place of buyer user's bucket among n. */
static inline int sku_bucket_index(int64_t user, int n)
{
    return (int)(user % n);
}

/*
 * Makes bucket ids[home] of parent able to serve qty units if the buckets
 * together can: moves units from the others (the fullest first, towards an
 * even share of what is left, at least what the order lacks).  Returns
 * SKU_OK when the bucket holds qty units now or units were moved (ask it
 * again), SKU_INSUFFICIENT when the buckets together hold fewer than qty
 * (*left: how many; sold out), SKU_UNAVAILABLE when Redis or PostgreSQL
 * failed or the locks were busy (nothing moved).
 */
enum sku_result sku_bucket_refill(struct worker_ctx *w, int64_t parent, const int64_t *ids, int n,
                                  int home, int64_t qty, int64_t *left);

/* Takes d units from a[0..n) (a[i] >= 0 each), the largest first, levelling
 * them: take[i] gets what comes from a[i].  Returns 0, or -1 when the a[i]
 * sum to less than d (take untouched).  Pure, for the tests. */
int sku_level_take(const int64_t *a, int n, int64_t d, int64_t *take);
/* Gives d units to a[0..n), the smallest first, levelling them: give[i]
 * goes to a[i].  Pure, for the tests. */
void sku_level_give(const int64_t *a, int n, int64_t d, int64_t *give);

#endif
