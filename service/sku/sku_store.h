/*
 * sku_store: the SKU operations' building blocks, shared by sku.c (one SKU)
 * and buckets.c (a parent and its buckets): the outcomes, the transaction
 * that owns SKU locks, loading a SKU into Redis, guarded stock adjustments
 * of several SKUs at once, and the reads of one SKU row.
 */
#ifndef SECKILL_SKU_STORE_H
#define SECKILL_SKU_STORE_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "core/keys.h"
#include "core/validate.h"
#include "store/dbtx.h"
#include "store/txlock.h"
#include "store/workers.h"

/* Business outcomes of the SKU operations; the HTTP handlers map them to
 * answers in one switch. */
enum sku_result {
    SKU_OK,
    SKU_UNKNOWN,         /* no such SKU */
    SKU_EXISTS,          /* create: id taken, or Redis already holds the SKU */
    SKU_INSUFFICIENT,    /* negative delta larger than what is available */
    SKU_UNAVAILABLE,     /* Redis or PostgreSQL failed; nothing was changed */
    SKU_NOT_LOADED,      /* known to PostgreSQL, not (or not loadable) in Redis */
    SKU_IDEM_MISMATCH,   /* an Idempotency-Key already used with another request */
    SKU_STORE_FULL,      /* Redis is at its maxmemory and refused a write: nothing changed */
    SKU_NOT_LOADED_FULL, /* committed in PostgreSQL; Redis at its maxmemory refused the load,
                          * which the reconciler does once it has room */
};

/* Takes the SKU's lock (with a fencing token) and begins a transaction that
 * owns it: the lock is released by the transaction's completion, after
 * COMMIT or ROLLBACK, and hook(outcome, arg) runs just before that release
 * (still under the lock).  The caller's first statement is the fenced row
 * lock (txlock_fence).  Returns the transaction, or NULL (logged) with the
 * lock released and the hook never run. */
struct dbtx *sku_tx_begin(struct worker_ctx *w, struct txlock *t, int64_t sku, dbtx_hook_fn *hook,
                          void *arg);
/* Commits a transaction of sku_tx_begin once the lock's lease still covers
 * lock_commit_margin_ms (else rolls back).  SKU_OK or SKU_UNAVAILABLE. */
enum sku_result sku_tx_commit(struct worker_ctx *w, struct dbtx *tx, const struct txlock *t,
                              int64_t sku);

/*
 * A SKU becomes sellable in Redis only after PostgreSQL committed it: the load
 * runs in a completion hook (registered after the lock's, so it runs while the
 * lock is still held).  If the load fails, the SKU is known but not loaded,
 * which buyers see as 503 until the reconciler rebuilds it: nothing is sold
 * that the database does not know, and nothing sold is lost by an undo.
 */
#define LOAD_NKEYS 9  /* sku_load.lua's keys before the keys it writes back */
#define LOAD_NARGS 14 /* sku_load.lua's arguments before the (user, units) pairs */
struct load_job {
    struct worker_ctx *w;
    int wanted;       /* load on commit (a check that decided not to rebuild leaves it 0) */
    const char *mode; /* "new" (refused when Redis holds the SKU) or "rebuild" */
    int64_t id, stock, limit;
    char starts_ms[24], ends_ms[24]; /* "" when open-ended */
    char epoch[24];
    char run[48]; /* Redis run id read before the load, "" unknown */
    /* a bucket: its parent, its place and the parent's buckets ("" otherwise) */
    char parent[24], bucket[24], buckets[24];
    PGresult *bought; /* rows (user_id, units) to restore, or NULL */
    /* orders answered 202 and recorded, whose buyer's key the load writes
     * back (pending_restore_plan), owned; n of them */
    struct load_restore *restore;
    size_t nrestore;
    /* the SKU's lock the transaction holds: fences the load (NULL: unfenced) */
    const struct txlock *lock;
    enum sku_result res;
};

/* A recorded 202 whose buyer's Idempotency-Key a rebuild's load writes back
 * (sku_load.lua), with the journal state pending:<user>:<entry>. */
struct load_restore {
    char key[KEYS_MAX]; /* the buyer's key's name (keys_idem) */
    char order[24], entry[32], user[24], qty[24];
};

/* Completion hook: loads lj (arg) into Redis when the transaction committed. */
void load_on_commit(enum dbtx_outcome outcome, void *arg);
/* Draws the epoch of lj's next load in tx.  Returns 0 or -1. */
int draw_epoch(struct dbtx *tx, struct load_job *lj);
/* Reads the run id of the Redis server that holds SKU sku (it changes on
 * every restart and failover; on a cluster, the SKU's master's) into out.
 * Returns 0, or -1 with out "". */
int redis_run_id(struct worker_ctx *w, int64_t sku, char *out, size_t cap);
/* Runs sql/<name>.sql in tx and returns the result, or NULL (logged). */
PGresult *tx_query(struct dbtx *tx, const char *name, int n, const char *const *params);
/* Reads the Redis side of a SKU.  Returns 0, or -1 when Redis failed.
 * *available is -1 when the SKU is not loaded; queued may be NULL. */
int redis_sku_state(struct worker_ctx *w, int64_t sku, long long *available, long long *queued);

/* sku_tx_begin() for n SKUs in one transaction: ids[i]'s lock into t[i]
 * (taken in the order given: callers sort by id, so that two of them never
 * wait for each other), hook(outcome, args[i]) before t[i]'s release. */
struct dbtx *sku_tx_begin_many(struct worker_ctx *w, struct txlock *t, const int64_t *ids, int n,
                               dbtx_hook_fn *hook, void *const *args);
/* sku_tx_commit() once every lock of t[0..n) has its margin left. */
enum sku_result sku_tx_commit_many(struct worker_ctx *w, struct dbtx *tx, const struct txlock *t,
                                   int n);

/* One SKU's part of an adjustment of several SKUs in one transaction. */
#define SKU_MOVES_MAX VALIDATE_BUCKETS_MAX
struct sku_move {
    int64_t sku, delta;
    int64_t before;    /* skus.stock under the fenced row lock */
    int64_t stock;     /* skus.stock after (SKU_OK) */
    int64_t available; /* Redis's stock after (SKU_OK), or what Redis refused on; -1 unknown */
};
/* What an adjustment is, as its ledger rows and its Idempotency-Key say. */
struct sku_adjust_req {
    int64_t delta;      /* the request's delta: the moves' sum */
    const char *reason; /* the ledger rows' */
    const char *idem;   /* the admin's Idempotency-Key, or NULL */
    int64_t idem_scope; /* the SKU the key belongs to: the one adjusted, or the parent */
    int idem_parent;    /* idem_scope is a parent: the key's rows are on its buckets */
    /* A move into a bucket: done only if, under the locks, Redis still holds
     * fewer than short_of units of SKU short_sku (0: always done). */
    int64_t short_sku, short_of;
};
/* The answer an Idempotency-Key already had (found), or that nothing was
 * done because short_sku was not short any more (skipped). */
struct sku_replay {
    int found, skipped;
    int64_t delta, stock;
};
/* Applies every move, all or nothing, guarded in PostgreSQL and Redis as
 * sku_adjust() does (m is sorted by SKU id first).  SKU_OK (rp->found: the key
 * already applied rp->delta, nothing done now; rp->skipped: rq->short_sku
 * was not short any more, nothing done), SKU_INSUFFICIENT (m[*refused]
 * refused; its available >= 0 when Redis refused it, -1 when the database
 * did), SKU_IDEM_MISMATCH, SKU_UNKNOWN, SKU_NOT_LOADED or SKU_UNAVAILABLE. */
enum sku_result sku_adjust_moves(struct worker_ctx *w, struct sku_move *m, int n,
                                 const struct sku_adjust_req *rq, struct sku_replay *rp,
                                 int *refused);

/* The create answer of an ordinary SKU made from spec. */
json_t *sku_created_json(const struct validate_sku *spec, int64_t id);
/* sku_view() of one row, parent or not. */
enum sku_result sku_view_row(struct worker_ctx *w, int64_t sku, int admin, json_t **out);

/* Settles the Redis records of earlier adjustments of sku that never
 * settled (their process died between the Redis step and its completion
 * hook, or its commit outcome was unknown).  A record under 'own' (the
 * running transaction's id, "" for none) is a lost primary's that the
 * promoted standby gave the id again: taken back.  Called under
 * the SKU lock with the row locked by the fence.  Returns 0, or -1 when
 * Redis or PostgreSQL failed (nothing assumed); *settled (may be NULL)
 * counts them. */
int settle_adjustments(struct worker_ctx *w, struct dbtx *tx, int64_t sku, const char *own,
                       int64_t *settled);

#endif
