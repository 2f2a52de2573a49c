/*
 * order_sweeper: the thread of every seckilld that expires unpaid orders
 * (order_life_sweep) every expiry_sweep_interval_ms, on its own Redis and
 * PostgreSQL connections.  Every instance sweeps; they never expire an order
 * twice (order_life.h says why).
 */
#ifndef SECKILL_ORDER_SWEEPER_H
#define SECKILL_ORDER_SWEEPER_H

#include <stddef.h>

#include "core/cfg.h"

struct order_sweeper;

/* Starts the thread (NULL with a message in err on failure).  With
 * expiry_sweep_interval_ms 0 it starts nothing and returns a handle that
 * order_sweeper_stop accepts. */
struct order_sweeper *order_sweeper_start(const struct cfg *c, char *err, size_t errlen);

/* Stops after the sweep in progress (bounded by its store deadlines). */
void order_sweeper_stop(struct order_sweeper *s);

#endif
