/*
 * order_wait: buyers waiting for their order's commit (order_ack = durable).
 *
 * One per HTTP event loop, used only on that loop's thread.  Writers publish
 * each committed batch's decisions on KEYS_DECISIONS_CHANNEL; this module
 * subscribes (its own Redis connection) and wakes the waiters of the orders
 * it names.  A decision can arrive before its waiter (the writer was faster
 * than reserve.lua's reply reaching the loop), so decisions nobody waits for
 * are kept for redis_timeout_ms, the longest a reserve reply can still come.
 * A waiter whose decision does not come within order_ack_wait_ms (a message
 * missed while the subscriber reconnected, a slow writer) is told so, and the
 * buyer gets an honest "pending".
 */
#ifndef SECKILL_ORDER_WAIT_H
#define SECKILL_ORDER_WAIT_H

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cfg.h"
#include "order/order.h"

struct order_wait;

/* Called exactly once per waiter: with the decision, or with NULL when it did
 * not come in time (or the loop is shutting down).  d is valid only during
 * the call. */
typedef void order_wait_fn(const struct order_decision *d, void *arg);

/* Creates the waiters of one loop and starts subscribing.  Returns NULL with
 * err set on a bad Redis URL. */
struct order_wait *order_wait_new(struct event_base *base, const struct cfg *c, char *err,
                                  size_t errlen);

/* Waits for the decision on the reservation 'entry' (its stream entry id, ""
 * when unknown) of order_id; fn may run before this returns (the decision had
 * already arrived). */
void order_wait_add(struct order_wait *ow, int64_t order_id, const char *entry, order_wait_fn *fn,
                    void *arg);

/* Answers every waiter with NULL, disconnects and frees.  NULL is a no-op. */
void order_wait_free(struct order_wait *ow);

#endif
