/*
 * rlock_notify: wake lock waiters early, with ONE pub/sub connection per
 * process shared by every lock.
 *
 * Releasing a lock publishes "0" on a channel derived from its key (simple
 * lock: "rlock:release:{key}"; reentrant lock: Redisson's
 * "redisson_lock__channel:{key}"; fair lock: one channel per waiter).  A
 * waiter that found the lock busy registers its channel here; the notifier's
 * thread SUBSCRIBEs while at least one waiter wants the channel and
 * UNSUBSCRIBEs when the last one leaves, so the process holds one connection
 * whatever the number of locks (Redisson's per-lock subscriptions are what
 * exhaust connection pools).
 *
 * A wake-up is a hint, never a grant: the waiter simply retries at once.
 * Messages can be missed (subscription not yet confirmed, connection lost,
 * lease expiring without a release), so waiters keep their jittered retry
 * as the fallback, and every reconnect wakes every waiter once.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef RLOCK_NOTIFY_H
#define RLOCK_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

#include "rlock/rlock.h"

struct rlock_notifier;    /* opaque: the subscriber thread and its channels */
struct rlock_notify_wait; /* opaque: one waiter's interest in one channel */

/*
 * Called on the notifier's thread, with its lock held, when a message arrives
 * on the waiter's channel, when its subscription is confirmed, and after a
 * reconnect.  Must be quick and must not call rlock_notify_* functions (for
 * a libevent loop: event_active() on an event of that loop, which is safe
 * from another thread once evthread_use_pthreads() was called).
 */
typedef void rlock_notify_fn(void *arg);

/*
 * Starts the notifier thread.  connect(connect_arg) is called from that
 * thread to open (and after a failure, reopen with back-off) the subscriber
 * connection; the notifier owns the contexts it returns.  Connecting happens
 * in the background: this call does not wait for Redis.
 * Returns the notifier, or NULL with err filled (thread or memory failure).
 */
RLOCK_MUST_CHECK struct rlock_notifier *
rlock_notifier_new(rlock_connect_fn *connect, void *connect_arg, char *err, size_t errlen);

/*
 * Stops the thread (bounded: it only ever blocks in poll() or connect) and
 * frees everything.  Every waiter must have been unwatched before; if n is
 * the default notifier, the default is reset to NULL first.  NULL is a no-op.
 */
void rlock_notifier_free(struct rlock_notifier *n);

/*
 * Sets the notifier that acquisitions use when their options name none
 * (struct rlock_opts.notifier == NULL).  NULL turns wake-ups off again.
 */
void rlock_notifier_set_default(struct rlock_notifier *n);

/* Returns the default notifier, or NULL. */
struct rlock_notifier *rlock_notifier_default(void);

/* Returns 1 while the subscriber connection is up, else 0. */
int rlock_notifier_connected(struct rlock_notifier *n);

/*
 * Registers one waiter's interest in nchannels channels (copied; a multi-lock
 * waits on the channel of each of its keys).  With fn == NULL the waiter
 * sleeps in rlock_notify_wait_until(); with fn, fn(arg) is called instead
 * (see rlock_notify_fn).  Returns the waiter, or NULL when n is NULL, a
 * channel is NULL or memory is short (the caller then just polls).  End it
 * with rlock_notify_unwatch().
 */
struct rlock_notify_wait *rlock_notify_watch(struct rlock_notifier *n, const char *const *channels,
                                             size_t nchannels, rlock_notify_fn *fn, void *arg);

/*
 * Sleeps until something happened on one of w's channels since the last call (a
 * message, the subscription's confirmation, a reconnect) or until the
 * CLOCK_MONOTONIC time until_ms.  Returns 1 when woken by an event, 0 at the
 * deadline.  Only for waiters registered without fn.
 */
int rlock_notify_wait_until(struct rlock_notify_wait *w, int64_t until_ms);

/*
 * Ends w's interest (a channel is unsubscribed when nobody else waits on
 * it) and frees w.  Once this returns, w's fn is never called again.
 * NULL is a no-op.
 */
void rlock_notify_unwatch(struct rlock_notify_wait *w);

/* ---- the waiting loop shared by every synchronous lock kind ---- */

/*
 * One attempt to take a lock.  Returns RLOCK_OK (taken), RLOCK_BUSY (held by
 * another owner; *busy_ms may be set to how long it stays held, or left -1
 * when unknown) or RLOCK_ERR (stop waiting; the callee explains why).
 */
typedef enum rlock_status rlock_try_fn(void *arg, int64_t *busy_ms);

/*
 * Calls try_once until it returns something other than RLOCK_BUSY or
 * o->wait_ms has passed on CLOCK_MONOTONIC.  Between tries it sleeps a
 * jittered o->retry_ms (never past the deadline, nor past the holder's
 * reported lease), woken early through the notifier (o->notifier, else the
 * default) when one of the nchannels channels carries a release.  Counts the
 * acquired / waited / wait-time / busy metrics.
 * Returns try_once's last answer: RLOCK_OK, RLOCK_BUSY (wait expired) or
 * RLOCK_ERR.
 */
enum rlock_status rlock_wait_acquire(const struct rlock_opts *o, const char *const *channels,
                                     size_t nchannels, rlock_try_fn *try_once, void *arg);

/* Returns a pause uniformly in [retry_ms/2, retry_ms*3/2], at least 1 ms;
 * *state is the caller's xorshift state (never 0). */
int64_t rlock_jitter_pause(uint64_t *state, int retry_ms);

/* Returns a non-zero seed for rlock_jitter_pause() from the kernel CSPRNG
 * (or the clock and a counter if that fails). */
uint64_t rlock_jitter_seed(void);

#endif /* RLOCK_NOTIFY_H */
