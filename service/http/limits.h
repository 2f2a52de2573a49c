/*
 * limits: the service's rate limits at its HTTP door, and its one 429 answer.
 *
 * Three kinds of token bucket, each with its settings (0 disables it):
 *  - a buyer's orders on one SKU (rate_buyer_orders_*): kept in Redis and
 *    taken by reserve.lua, so it holds across every instance and costs no
 *    round trip of its own; handle_order.c hands its verdict to limits_reply;
 *  - the buyer API per client address (rate_addr_*): orders and lookups, in
 *    this process (core/ratelimit), before any store is touched;
 *  - failed authentications per client address, of the admin area
 *    (admin_auth_fail_*) and, in a table of its own, of the payment callback
 *    (payment_auth_fail_*): only a wrong token is charged, and while the
 *    bucket is empty wrong tokens get 429; the right token is always served,
 *    so nobody sharing the operator's (or the payment system's) address can
 *    lock it out.  Guessing is kept hopeless by the tokens' length (cfg
 *    demands 32 bytes), not by these buckets, which only keep a guesser's
 *    noise down (a distributed guesser has many addresses anyway).
 * IPv6 clients are counted per /64, the block one subscriber usually holds.
 *
 * The tables are process-wide: limits_init() before the HTTP loops start,
 * limits_free() after they stopped; the functions in between are safe from
 * any thread.  Before limits_init() nothing is limited.
 */
#ifndef SECKILL_LIMITS_H
#define SECKILL_LIMITS_H

#include <stdint.h>

#include "core/cfg.h"
#include "http/server.h"

/* Which bucket refused (the scope label of seckill_rate_limited_total). */
enum limits_scope { LIMITS_BUYER, LIMITS_ADDR, LIMITS_ADMIN_AUTH, LIMITS_PAYMENT_AUTH };

/* Sets the per-address tables up from c's settings. */
void limits_init(const struct cfg *c);

/* Gives the tables c's current rates and bursts (after a reload changed
 * them; any thread, while loops take tokens).  Each bucket keeps what it
 * lacks, at most the new burst (core/ratelimit.h: ratelimit_set_rate). */
void limits_update(const struct cfg *c);

/* Frees the tables; nothing is limited afterwards. */
void limits_free(void);

/* The buyer API: takes a token of r's client address.  Returns 1 to go on;
 * 0 after answering 429 (nothing else was done). */
int limits_addr_pass(const struct http_req *r);

/* Charges a failed authentication of r's client address to the bucket of
 * 'scope' (LIMITS_ADMIN_AUTH or LIMITS_PAYMENT_AUTH), after its token was
 * compared and found wrong.  Returns 0 when it was charged (answer 401), or
 * the microseconds until the empty bucket has room (answer 429 with
 * limits_reply); nothing is answered here. */
int64_t limits_auth_failed(const struct http_req *r, enum limits_scope scope);

/* Answers 429 rate_limited with Retry-After (wait_us in whole seconds,
 * rounded up, at least 1) and counts it under 'scope'. */
void limits_reply(const struct http_req *r, enum limits_scope scope, int64_t wait_us);

#endif
