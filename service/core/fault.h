/*
 * fault: named crash points for the fault-injection suite (`make faults`).
 *
 * SECKILL_FAULT=<name> in the environment of seckilld makes the process kill
 * itself with SIGKILL when it reaches the point of that name, exactly where a
 * power cut or an OOM kill would hurt most.  Unset (always, in production),
 * a point costs one branch.  Points:
 *   adjust_after_redis  a stock adjustment applied in Redis, before its COMMIT
 *   adjust_moves_half_done  an adjustment of several SKUs (a move between stock
 *                       buckets) took its units in Redis and gave them nowhere yet
 *   release_before_redis  a cancel's or an expiry sweep's COMMIT done (units back
 *                       in skus.stock), before order_release.lua gave them to Redis
 * and pause points, where the process stops itself (SIGSTOP, the first time
 * only) as a long GC pause or swapping would stop it, until the suite
 * continues it:
 *   pg_send_under_lock  statements of a transaction bound to a lock (a writer's
 *                       fenced batch) passed the last check of the lease and
 *                       are about to be sent: the worst moment for a pause
 *                       (Kleppmann's), which only the fencing token covers
 *   release_before_settled  a cancel's or an expiry's units are back in both
 *                       stores and the SKU's lock is released, but the orders
 *                       are not yet marked settled: another process that
 *                       takes the lock now finds them unsettled and gives them
 *                       to Redis again, which order_release.lua must refuse
 */
#ifndef SECKILL_FAULT_H
#define SECKILL_FAULT_H

/* Kills the process if SECKILL_FAULT names this point. */
void fault_point(const char *name);

/* Stops the process (SIGSTOP) the first time it reaches this point, if
 * SECKILL_FAULT names it; returns 1 once continued (SIGCONT), else 0. */
int fault_pause(const char *name);

#endif
