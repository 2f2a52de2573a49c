/*
 * rlock_fair: a fair (FIFO) reentrant lock, sync API.
 *
 * The lock itself is the Redisson-format hash of rlock/reentrant.h, so a
 * fair holder and a plain reentrant holder (ours or Redisson's) of the same
 * key exclude each other.  Fairness adds two keys beside it, named with
 * Redisson's hash-tag rule so all three share one cluster slot:
 *
 *   rlock_fair_queue:{key}    list of waiting owner fields, oldest first
 *   rlock_fair_timeout:{key}  zset  owner field -> deadline (server ms)
 *
 * Design (lua/rlock/fair_acquire.lua, _release.lua, _cancel.lua):
 *  - Every acquire attempt reads the Redis server's clock (TIME) inside the
 *    script and first prunes every waiter whose deadline has passed, wherever
 *    it stands in the queue.  No client clock is ever compared with another:
 *    clients with skewed or jumping clocks still agree on who gave up.
 *  - The lock is granted only when it is free and the caller is at the head
 *    of the queue (or the queue is empty); the caller then leaves the queue.
 *    A holder re-entering just increments its count.
 *  - Otherwise the caller joins the tail (first time) or keeps its place, and
 *    its deadline becomes server-now + keep_ms.  A live waiter asks again at
 *    least every 1.5 x retry_ms, well inside keep_ms, so only waiters that
 *    stopped asking (crashed, partitioned) age out.  Both keys expire after
 *    keep_ms without any waiter asking, so nothing is left behind.
 *  - A waiter that gives up (wait_ms over, error) removes itself at once
 *    (cancel), waking the new head if the lock is free.
 *  - The last release deletes the hash, prunes stale waiters and publishes
 *    "0" on the head waiter's own channel, rlock_fair__channel:{key}:<owner>,
 *    so exactly the next in line is woken (through the process's single
 *    notifier subscription), plus Redisson's channel of the key for Redisson
 *    waiters.  Missed messages fall back to the jittered retry.
 *
 * The queue format is ours, not Redisson's RFairLock (whose deadlines are
 * client clock values); do not mix the two fair locks on one key.
 */
#ifndef RLOCK_FAIR_H
#define RLOCK_FAIR_H

#include <stdint.h>

#include "rlock/reentrant.h"
#include "rlock/rlock.h"

#define RLOCK_FAIR_QUEUE_PREFIX "rlock_fair_queue"
#define RLOCK_FAIR_TIMEOUT_PREFIX "rlock_fair_timeout"
#define RLOCK_FAIR_CHANNEL_PREFIX "rlock_fair__channel"
#define RLOCK_FAIR_KEEP_MS 5000 /* default place-keeping time of a waiter */

struct rlock_fair_opts {
    /* How long a waiter keeps its place in the queue without asking again,
     * on the server's clock; <= 0 = max(RLOCK_FAIR_KEEP_MS, 3 x retry_ms).
     * Raised to at least 3 x retry_ms, so live waiters never age out. */
    int keep_ms;
};

/*
 * Takes (or re-enters) the fair lock on key for owner "<uuid>:<thread_id>"
 * (as rlock_reentrant_acquire(): uuid NULL = process uuid, thread_id 0 =
 * calling thread), queueing behind earlier waiters for up to o->wait_ms.
 * fo may be NULL.  Release with rlock_reentrant_release() (or
 * rlock_fair_release_hold()); the watchdog works as for reentrant locks.
 * Returns RLOCK_OK with l held (l->fair = 1); RLOCK_BUSY when the wait ended
 * first (our place in the queue is given up); RLOCK_ERR on I/O or Redis
 * error, bad arguments or out of memory.  On failure l is as it was.
 */
RLOCK_MUST_CHECK enum rlock_status rlock_fair_acquire(redisContext *c, struct rlock_reentrant *l,
                                                      const char *key, const char *uuid,
                                                      uint64_t thread_id,
                                                      const struct rlock_opts *o,
                                                      const struct rlock_fair_opts *fo);

/*
 * Drops one hold of the fair lock l; the last one frees it and wakes the next
 * waiter.  Sets *freed to 1 when the lock was deleted.  Does not change l
 * (rlock_reentrant_release() does the bookkeeping and is what callers use).
 * Returns RLOCK_OK, RLOCK_NOT_OWNER (we hold nothing; counted as refused),
 * or RLOCK_ERR with l->err set.
 */
enum rlock_status rlock_fair_release_hold(redisContext *c, struct rlock_reentrant *l, int *freed);

#endif /* RLOCK_FAIR_H */
