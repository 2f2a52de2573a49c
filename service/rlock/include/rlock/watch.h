/*
 * rlock_watch: the watchdog of the synchronous API.  A lock taken without an
 * explicit lease (struct rlock_opts: ttl_ms == 0, watchdog set) gets the
 * watchdog's lease and is renewed every lease/3 by one background thread
 * with its own connection, until it is released or cleared (seed 004:
 * Redisson's 30 s lease renewed every 10 s).
 *
 * Unlike the peers, a renewal that finds the lock gone or owned by someone
 * else does not just stop: the lock is marked lost and its lost callback runs
 * at once, on the watchdog thread.  The lock is also declared lost when its
 * last renewed lease runs out while Redis cannot be reached, since then
 * nobody can tell who holds it.  A writer checks rlock_lost() (or
 * rlock_reentrant_lost()) right before COMMIT, from its own thread, and rolls
 * back on 1: work done under a lost lock must not be committed.
 *
 * Renewal scripts: a simple or multi-lock is extended only while every key
 * still holds its token (lua/rlock/extend.lua, compare-token PEXPIRE); a
 * reentrant or fair lock only while its owner field is still in the hash
 * (lua/rlock/reentrant_renew.lua).
 *
 * Thread-safety: every function may be called from any thread.  Lease
 * arithmetic uses CLOCK_MONOTONIC only.
 */
#ifndef RLOCK_WATCH_H
#define RLOCK_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "rlock/rlock.h"

#define RLOCK_WATCHDOG_LEASE_MS 30000 /* Redisson's lockWatchdogTimeout */

struct rlock_watchdog; /* opaque: thread, connection, watched locks */
struct rlock_watch;    /* opaque: one watched lock */

struct rlock_watchdog_opts {
    int lease_ms;      /* lease of watched locks; <= 0 = RLOCK_WATCHDOG_LEASE_MS */
    int op_timeout_ms; /* bound on one renewal round trip; <= 0 = lease_ms / 3 */
};

/*
 * Starts the watchdog thread.  connect(connect_arg) opens its connection from
 * that thread, lazily and again after an I/O error; the watchdog owns the
 * context and puts op_timeout_ms on it with redisSetTimeout().  o may be NULL
 * (defaults).  Returns the watchdog, or NULL with err filled (bad lease,
 * thread or memory failure).
 */
RLOCK_MUST_CHECK struct rlock_watchdog *rlock_watchdog_new(rlock_connect_fn *connect,
                                                           void *connect_arg,
                                                           const struct rlock_watchdog_opts *o,
                                                           char *err, size_t errlen);

/*
 * The same for locks on a Redis Cluster (u: a redis-cluster:// URL): the
 * thread keeps a cluster client of its own (rlock/cluster.h; co may be NULL,
 * its timeouts then op_timeout_ms), and each renewal goes to the master of
 * its lock's first key (the keys of one lock share a slot), following MOVED
 * and ASK, so locks of every master are renewed, also after a failover or a
 * reshard.  Returns NULL with err filled on a bad URL or lease.
 */
struct rlock_url;
struct rlock_cluster_opts;
RLOCK_MUST_CHECK struct rlock_watchdog *
rlock_watchdog_new_cluster(const struct rlock_url *u, const struct rlock_cluster_opts *co,
                           const struct rlock_watchdog_opts *o, char *err, size_t errlen);

/*
 * Stops the thread (bounded by one renewal's timeout) and frees the
 * watchdog.  Every watched lock must have been released or cleared first.
 * NULL is a no-op.
 */
void rlock_watchdog_free(struct rlock_watchdog *wd);

/* Returns the lease given to watched locks, in ms. */
int rlock_watchdog_lease_ms(const struct rlock_watchdog *wd);

/*
 * Starts renewing a simple or multi-lock: keys[0..nkeys) holding token,
 * whose lease (the watchdog's) was requested at since_ms (CLOCK_MONOTONIC).
 * Copies keys and token.  fn (may be NULL) is called once if the lock is
 * found lost.  Returns the watch, or NULL when out of memory.  The lock
 * functions call this for you; it is public for lock kinds built elsewhere.
 */
struct rlock_watch *rlock_watch_tokens(struct rlock_watchdog *wd, const char *const *keys,
                                       size_t nkeys, const char *token, int64_t since_ms,
                                       rlock_lost_fn *fn, void *arg);

/*
 * Same for a Redisson-format hash lock (reentrant or fair) held by owner
 * field "<uuid>:<thread id>".  Returns the watch, or NULL when out of memory.
 */
struct rlock_watch *rlock_watch_owner(struct rlock_watchdog *wd, const char *key, const char *owner,
                                      int64_t since_ms, rlock_lost_fn *fn, void *arg);

/*
 * Returns 1 once the lock was found lost, or its last renewed lease has run
 * out (renewals failing); else 0.  Thread-safe, lock-free.
 */
int rlock_watch_lost(const struct rlock_watch *w);

/*
 * Returns the ms surely left of the last renewed lease (less a clock drift
 * allowance, as rlock_remaining_ms), 0 once lost.  Thread-safe, lock-free.
 */
int64_t rlock_watch_remaining_ms(const struct rlock_watch *w);

/*
 * Stops renewing and frees w.  Waits for a renewal of w in flight to finish
 * (bounded by op_timeout_ms), so once it returns no renewal of w is sent and
 * its lost callback is never called.  May be called from the lost callback
 * itself.  NULL is a no-op.
 */
void rlock_watch_stop(struct rlock_watch *w);

#endif /* RLOCK_WATCH_H */
