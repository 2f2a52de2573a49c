/*
 * ticker: a thread that runs one job, waits, and runs it again until
 * stopped: the periodic threads of seckilld (the expiry sweeper, the
 * reconciler).  The wait is on CLOCK_MONOTONIC (a wall-clock step neither
 * stretches nor skips it) and ends early on a kick or a stop; a stop waits
 * for the run in progress, which may look at ticker_halt() to end sooner.
 */
#ifndef SECKILL_TICKER_H
#define SECKILL_TICKER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct ticker;

/* One run, on the ticker's thread; returns the pause before the next, in ms
 * (> 0). */
typedef int64_t ticker_fn(struct ticker *t, void *arg);

/* Starts the thread, whose first run is at once.  Returns the ticker, or
 * NULL with err set ("cannot start the <name> thread"); aborts without
 * memory. */
struct ticker *ticker_start(const char *name, ticker_fn *fn, void *arg, char *err, size_t errlen);

/* Asks for a run now: ends the pause in progress, or the next one at once
 * when a run is under way.  Any thread. */
void ticker_kick(struct ticker *t);

/* Set once a stop is asked: a long run looks at it between its steps. */
const atomic_int *ticker_halt(const struct ticker *t);

/* Stops after the run in progress, joins the thread and frees t.  NULL is a
 * no-op. */
void ticker_stop(struct ticker *t);

#endif
