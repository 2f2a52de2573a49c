/*
 * lt_life: the order lifecycle phase of a run.  After the buyers, and once
 * the order stream has drained, each order a 201 or 202 named is, by a draw
 * from --seed, paid by the admin (--pay-share; a few twice with the same
 * payment_ref), cancelled by its buyer (--cancel-share), or left alone to
 * expire.  The pays and cancels are spread over half the payment window
 * from the phase's start, so that with a short window some race the
 * service's expiry sweep; and a few are aimed at their order's deadline, so
 * that some do whatever the length of the buying phase.  They go on
 * keep-alive connections (at most --concurrency), within a bounded time.
 * Every answer is kept in the order's lt_act for the check (lt_check.h).
 */
#ifndef LT_LIFE_H
#define LT_LIFE_H

#include <stddef.h>
#include <stdint.h>

#include "lt_answers.h"
#include "lt_opts.h"
#include "lt_rand.h"

#define LT_PAY_AGAIN_SHARE 0.05 /* of the pays, sent a second time with the same ref */
/* Of the pays and cancels (with a window), aimed at their order's deadline:
 * its first answer's time + the window, +/- the jitter (a 201 comes a few ms
 * after the commit that set the deadline, a 202 before it). */
#define LT_DEADLINE_SHARE 0.1
#define LT_DEADLINE_JITTER_MS 100
#define LT_PAYMENT_REF_PREFIX_MAX 32 /* "lt-" + a 64-bit seed + "-" */
#define LT_PAYMENT_REF_MAX 64        /* the prefix and an order id */

/* True when o asks for a lifecycle phase: a share to pay or cancel, or a
 * payment window (then every order walks away and expires). */
int lt_life_enabled(const struct lt_opts *o);

/* The payment_ref of an order's pay: "lt-<seed>-<order id>" (out: cap bytes),
 * and what every ref of a seed starts with: "lt-<seed>-". */
void lt_life_payment_ref(char *out, size_t cap, uint64_t seed, int64_t order_id);
void lt_life_payment_ref_prefix(char *out, size_t cap, uint64_t seed);

/* Plans the lifecycle of the orders of 'a' (deduplicated: lt_answers_dedupe)
 * that a 201 or 202 named into a->acts, in order id order, five draws of rng
 * per order: pay, cancel or walk away; a second pay; when, within half of
 * o->payment_window_s; whether at the deadline instead; where about it.  The
 * same seed and the same orders give the same plan.  Returns 0, or -1 when
 * out of memory. */
int lt_life_plan(const struct lt_opts *o, struct lt_rand *rng, struct lt_answers *a)
    __attribute__((warn_unused_result));

/* Sends the planned pays and cancels of ans[0..n-1] and records every
 * answer in its lt_act and the counts in ans[i].life; *elapsed_s is how long
 * it took.  Stops sending at SIGINT/SIGTERM or after the window +
 * o->lifecycle_timeout_s + twice o->timeout_ms; what was never sent becomes
 * a walk-away.  Returns 0, or -1 with a message in err when it could not
 * start (no event loop, no connection, no buyer token). */
int lt_life_run(const struct lt_opts *o, struct lt_answers *ans, int n, double *elapsed_s,
                char *err, size_t errlen) __attribute__((warn_unused_result));

#endif
