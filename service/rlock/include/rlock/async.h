/*
 * rlock_async: the lock API for a libevent loop, on a hiredis
 * redisAsyncContext attached to that loop.  Same scripts and on-Redis
 * formats as the sync API, so sync and async holders exclude each other:
 *   simple lock     SET-NX-PX format (acquired with a plain
 *                   SET key token NX PX ttl, released/extended by token),
 *                   released with a wake-up on "rlock:release:{key}"
 *   reentrant lock  Redisson's hash format (lua/rlock/reentrant_*.lua); the
 *                   owner is "<uuid>:<thread_id>", where on an event loop the
 *                   "thread id" names a task, e.g. a request id
 *
 * Every operation takes a callback that runs exactly once, on the loop,
 * never before the call returns: with the outcome, or RLOCK_ERR when the
 * command's deadline (op_timeout_ms after it was sent; hiredis 0.14 has no
 * command timeout) passes first, the connection drops or the client is
 * freed.  The deadlines of a client are kept by one libevent timer, not one
 * per command.  A late reply to
 * an acquisition that already timed out is undone: if it did take the lock,
 * the lock is released at once instead of being left to expire.
 *
 * Waiting: a busy lock is retried after a jittered retry_ms (capped by the
 * holder's remaining lease and the deadline), and earlier when the process's
 * notifier (rlock/notify.h) sees a release on the key's channel.  The
 * notifier wakes the loop with event_active() from its own thread, which
 * libevent allows only after evthread_use_pthreads() was called before the
 * base was created (the daemon does so); without a notifier it just polls.
 *
 * Watchdog: a lock acquired with ttl_ms == 0 gets the client's lease and is
 * renewed every lease/3 by a timer on the loop until it is released or
 * forgotten; when a renewal finds it gone or owned by someone else (or the
 * lease ran out while renewals failed) it is marked lost and on_lost runs on
 * the loop.
 *
 * Threads: a client, its locks and the redisAsyncContext belong to the loop's
 * thread; call everything from there.
 */
#ifndef RLOCK_ASYNC_H
#define RLOCK_ASYNC_H

#include <stdint.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "rlock/rlock.h"

struct rlock_async;      /* opaque: one client per event loop */
struct rlock_async_lock; /* opaque: one held lock */

struct rlock_async_opts {
    int op_timeout_ms;               /* bound on every Redis round trip; > 0 */
    int lease_ms;                    /* lease of ttl_ms == 0 locks; <= 0 = 30000 */
    struct rlock_notifier *notifier; /* NULL = rlock_notifier_default() at each wait */
    const char *uuid;                /* reentrant owner uuid; NULL = rlock_process_uuid() */
};

/* What to acquire. */
struct rlock_async_req {
    const char *key;        /* copied */
    int reentrant;          /* 0 = simple lock, 1 = Redisson-format reentrant lock */
    uint64_t thread_id;     /* reentrant: owner id within the uuid (task id); must be > 0 */
    int ttl_ms;             /* lease; 0 = the client's lease, renewed on the loop until release */
    int wait_ms;            /* how long to wait for a busy lock; 0 = try once */
    int retry_ms;           /* mean fallback poll interval; <= 0 = RLOCK_DEFAULT_RETRY_MS */
    rlock_lost_fn *on_lost; /* watched locks: called once on the loop if the lock is lost */
    void *lost_arg;
};

/*
 * Outcome of rlock_async_acquire(): st is RLOCK_OK with l the held lock (the
 * callee owns it and must end it with rlock_async_release() or
 * rlock_async_forget()), RLOCK_BUSY when the wait expired, or RLOCK_ERR
 * (timeout, disconnect, Redis error, client freed) with err saying why;
 * l is NULL then.  err is valid during the call only.
 */
typedef void rlock_async_acquire_fn(enum rlock_status st, struct rlock_async_lock *l,
                                    const char *err, void *arg);

/* Outcome of a release or extend; err valid during the call only. */
typedef void rlock_async_done_fn(enum rlock_status st, const char *err, void *arg);

/*
 * Creates a client on base.  Commands go to the context set with
 * rlock_async_set_context().  Returns NULL on bad options or out of memory.
 */
RLOCK_MUST_CHECK struct rlock_async *rlock_async_new(struct event_base *base,
                                                     const struct rlock_async_opts *o);

/*
 * Sets the connection for later commands (NULL while disconnected: new
 * operations then fail at once).  The caller keeps owning ac; commands sent
 * on an earlier context still complete through it (or fail when it is freed).
 */
void rlock_async_set_context(struct rlock_async *a, redisAsyncContext *ac);

/*
 * Frees the client.  Pending acquisitions and operations get their callback
 * now with RLOCK_ERR ("cancelled"); locks still held stop being renewed and
 * can then only be forgotten (rlock_async_forget()), after which Redis
 * expires them.  Commands still inside hiredis are detached and end when the
 * context answers or is freed.  May be called from inside one of the
 * client's callbacks.  NULL is a no-op.
 */
void rlock_async_free(struct rlock_async *a);

/*
 * Starts acquiring r->key.  Returns 0: fn will be called exactly once, later.
 * Returns -1 (fn never called) on bad arguments, no context, or when the
 * command cannot be queued or memory is short.
 */
RLOCK_MUST_CHECK int rlock_async_acquire(struct rlock_async *a, const struct rlock_async_req *r,
                                         rlock_async_acquire_fn *fn, void *arg);

/*
 * Releases l (one hold for a reentrant lock), stops its watchdog, and wakes
 * waiters.  Returns 0: l is consumed (do not touch it again) and fn (may be
 * NULL) is called exactly once with RLOCK_OK, RLOCK_NOT_OWNER (not held any
 * more: expired or taken over; counted as refused) or RLOCK_ERR.  Returns -1
 * when nothing could be sent (no client or context, out of memory): l is
 * still the caller's and fn is not called.
 */
RLOCK_MUST_CHECK int rlock_async_release(struct rlock_async_lock *l, rlock_async_done_fn *fn,
                                         void *arg);

/*
 * Resets l's lease to ttl_ms if we still hold it.  Returns 0: fn (may be
 * NULL) is called exactly once with RLOCK_OK, RLOCK_NOT_OWNER (l is then
 * lost) or RLOCK_ERR.  Returns -1 (fn not called) on bad arguments, no
 * context or out of memory.
 */
RLOCK_MUST_CHECK int rlock_async_extend(struct rlock_async_lock *l, int ttl_ms,
                                        rlock_async_done_fn *fn, void *arg);

/* Returns 1 if l was found lost or its lease ran out, else 0. */
int rlock_async_lost(const struct rlock_async_lock *l);

/* Returns the ms surely left of l's lease (as rlock_remaining_ms), 0 if lost. */
int64_t rlock_async_remaining_ms(const struct rlock_async_lock *l);

/* Returns l's key (valid while l is). */
const char *rlock_async_key(const struct rlock_async_lock *l);

/*
 * Drops l without touching Redis (stops its watchdog); the lock expires by
 * its lease.  NULL is a no-op.
 */
void rlock_async_forget(struct rlock_async_lock *l);

#endif /* RLOCK_ASYNC_H */
