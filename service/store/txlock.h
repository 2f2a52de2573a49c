/*
 * txlock: the service's distributed locks, from acquisition to release.
 *
 * Every lock that guards a write to a SKU's row (the SKU lock of admin
 * operations, the writer lock of a batch) is taken with a fencing
 * token from one counter per SKU, renewed by the watchdog while held, and
 * handed to the database transaction:
 *   - the fenced row lock is the transaction's first statement (txlock_fence(),
 *     or txlock_fence_stmt() leading a pipeline of reads): PostgreSQL accepts
 *     the token only if no newer holder has written (skus.fence_token), so a
 *     holder whose lease ran out during a pause cannot commit (I5);
 *   - txlock_still_valid() right before COMMIT: lease left and not lost;
 *   - the release runs in the transaction's completion hook, after COMMIT or
 *     ROLLBACK (seed 001 and its 2024-03-01 correction): released earlier,
 *     another process could read "not there yet" under READ COMMITTED and
 *     write a duplicate; released only after commit, a rollback would leak it.
 */
#ifndef SECKILL_TXLOCK_H
#define SECKILL_TXLOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cfg.h"
#include "core/keys.h"
#include "store/dbtx.h"
#include "store/redis_conn.h"
#include <rlock/rlock.h>
#include <rlock/watch.h>

struct txlock {
    struct redis_conn *redis;
    struct rlock lock;
    int64_t sku;
    int64_t fence;   /* token of this acquisition, checked by PostgreSQL */
    atomic_int lost; /* set by the watchdog thread when the lock is found lost */
    /* set too when the lock is found lost, when not NULL (txlock_bind_all) */
    _Atomic(atomic_int *) lost_also;
};

/* Process-wide: the watchdog that renews held locks (NULL: leases are not
 * renewed, the commit-time lease check still applies).  Set once at start-up. */
void txlock_set_watchdog(struct rlock_watchdog *wd);

/* Takes keys[0..n) of SKU 'sku' (all-or-nothing, one fencing token from the
 * SKU's counter) with the configured lease and wait.  Returns RLOCK_OK with t
 * filled, or the failure (t empty but t->lock.err: why).  While the lock is held, the watchdog
 * thread may write t->lost: t must stay where it is until the lock is
 * released or cleared (which waits for a callback in flight). */
enum rlock_status txlock_acquire(struct txlock *t, struct redis_conn *rc, const struct cfg *c,
                                 int64_t sku, const char *const *keys, size_t n)
    __attribute__((warn_unused_result));

/* Tries, without waiting and in one round trip, locks keys[i] of SKUs
 * skus[i] (one key each), each as txlock_acquire() would take it (its own
 * fencing token from the SKU's counter, the configured lease, renewed by the
 * watchdog).  Sets st[i]: RLOCK_OK with t[i] filled, else t[i] empty
 * (RLOCK_BUSY: another holder has it).  Returns how many were taken, or -1
 * when this connection cannot take them together (a Redis Cluster, or
 * lock_min_replicas asked for): take them one at a time with
 * txlock_acquire().  The same rule as txlock_acquire: t[i] stays where it
 * is until released. */
int txlock_try_each(struct txlock *const *t, struct redis_conn *rc, const struct cfg *c,
                    const int64_t *skus, const char *const *keys, size_t n, enum rlock_status *st)
    __attribute__((warn_unused_result));

/* What fences the Redis writes a completion hook makes under t (the scripts
 * of lua/ that settle a committed transaction: "Fenced" in their headers):
 * the key of t's lock, the SKU's fencing counter and "<token>:<owner>".  A
 * script refuses to write when its lock holds another owner (or none) and
 * the counter has drawn a newer token: a newer holder took over.  A NULL or
 * empty t (writes made without the SKU's lock) gives arg "", which the
 * scripts take as unfenced, and the keys of SKU sku's own lock.  Returns 0,
 * or -1 when a name does not fit (a programming error). */
#define TXLOCK_FENCE_ARG_MAX 96
int txlock_redis_fence(const struct txlock *t, int64_t sku, char lock_key[KEYS_MAX],
                       char counter[KEYS_MAX + 8], char arg[TXLOCK_FENCE_ARG_MAX])
    __attribute__((warn_unused_result));

/* Registers the release of t->lock as a completion hook of tx, and makes a
 * lost lock end tx's statement in progress at once (dbtx_set_abort_flag with
 * t->lost): work under a lost lock is rolled back, not only refused at the
 * commit check.  t must stay valid until the transaction completed.  Returns
 * 0, or -1 if the hook could not be registered (the caller still owns the
 * lock and must release it). */
int txlock_bind(struct txlock *t, struct dbtx *tx) __attribute__((warn_unused_result));

/* txlock_bind() for several locks guarding one transaction (a writer's
 * SKUs): one completion hook releases them all, in one round trip where the
 * connection allows (txlock_try_each's rule), and the loss of any of them
 * (*any_lost, which must outlive tx) ends tx's statement in progress.
 * t[0..n) must stay valid until the transaction completed.  Returns 0, or
 * -1 if the hook could not be registered (the caller still owns the locks
 * and must release them). */
int txlock_bind_all(struct txlock *const *t, size_t n, struct dbtx *tx, atomic_int *any_lost)
    __attribute__((warn_unused_result));

/* Releases a lock that was never bound to a transaction. */
void txlock_release(struct txlock *t);

/* Runs the fenced row lock (sql/sku_fence.sql) as a statement of tx.
 * Returns 1 and the SKU's stock in *stock when PostgreSQL accepted the token
 * (a refused holder that still holds its lock draws newer tokens and retries
 * within the transaction); 0 when the SKU does not exist; TXLOCK_STALE when the
 * lock is gone or kept losing; -1 when a statement or Redis failed.  On
 * anything but 1 the caller rolls back. */
#define TXLOCK_STALE (-2)
/* Newer tokens a refused holder draws inside one transaction before it gives up. */
#define TXLOCK_RENEWALS 8
/* Fresh acquisitions a caller makes after TXLOCK_STALE. */
#define TXLOCK_FENCE_ATTEMPTS 3
int txlock_fence(struct txlock *t, struct dbtx *tx, int64_t *stock)
    __attribute__((warn_unused_result));

/* The fenced row lock as the first statement of a pipeline of reads
 * (dbtx_exec_pipeline), saving its own round trip: txlock_fence_stmt fills
 * *stmt, whose parameters live in *a (keep both until the pipeline ran);
 * txlock_fence_result reads its result: 1 and the stock when PostgreSQL took
 * the token, else it goes on as txlock_fence() does after a refusal and
 * returns what that returns (the statements after it in the pipeline saw no
 * row lock: the caller runs them again when this returns 1). */
struct txlock_fence_args {
    char sid[24], tok[24];
    const char *params[2];
};
void txlock_fence_stmt(const struct txlock *t, struct txlock_fence_args *a,
                       struct pgwait_stmt *stmt);
int txlock_fence_result(struct txlock *t, struct dbtx *tx, const PGresult *r, int64_t *stock)
    __attribute__((warn_unused_result));

/* True when the lock is still ours with more than margin_ms of lease left: a
 * writer checks it right before COMMIT and rolls back otherwise. */
int txlock_still_valid(const struct txlock *t, int64_t margin_ms);

#endif
