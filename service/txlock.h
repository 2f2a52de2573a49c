/*
 * txlock: hand a held distributed lock to a database transaction.  The lock
 * is released by the transaction's completion hook, after COMMIT or ROLLBACK
 * (seed 001 and its 2024-03-01 correction): released earlier, another process
 * could read "not there yet" under READ COMMITTED and write a duplicate;
 * released only after commit, a rollback would leak it until its lease ends.
 */
#ifndef SECKILL_TXLOCK_H
#define SECKILL_TXLOCK_H

#include "cfg.h"
#include "dbtx.h"
#include "redis_conn.h"
#include "rlock.h"

struct txlock {
    struct redis_conn *redis;
    struct rlock lock;
};

/* The lock options of the service's locks, from the config. */
struct rlock_opts txlock_opts(const struct cfg *c);

/* Registers the release of t->lock as a completion hook of tx.  t must stay
 * valid until the transaction completed.  Returns 0, or -1 if the hook could not
 * be registered (the caller still owns the lock and must release it). */
int txlock_bind(struct txlock *t, struct dbtx *tx) __attribute__((warn_unused_result));

/* True when the lease has more than margin_ms left: a writer checks it right
 * before COMMIT and rolls back instead of committing on an expired lease. */
int txlock_still_valid(const struct txlock *t, int64_t margin_ms);

#endif
