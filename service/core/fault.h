/*
 * fault: named crash points for the fault-injection suite (`make faults`).
 *
 * SECKILL_FAULT=<name> in the environment of seckilld makes the process kill
 * itself with SIGKILL when it reaches the point of that name, exactly where a
 * power cut or an OOM kill would hurt most.  Unset (always, in production),
 * a point costs one branch.  Points:
 *   adjust_after_redis  a stock adjustment applied in Redis, before its COMMIT
 *   release_before_redis  a cancel's or an expiry sweep's COMMIT done (units back
 *                       in skus.stock), before order_release.lua gave them to Redis
 */
#ifndef SECKILL_FAULT_H
#define SECKILL_FAULT_H

/* Kills the process if SECKILL_FAULT names this point. */
void fault_point(const char *name);

#endif
