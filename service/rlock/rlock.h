/*
 * rlock: a lease lock on a single Redis, synchronous API.
 *
 * On-Redis format (shared with redsync, node-redlock and redis-py, so those
 * clients and this one exclude each other on the same key):
 *   acquire  SET key token NX PX ttl
 *   release  if GET key == token then DEL key            (lua/rlock_release.lua)
 *   extend   if GET key == token then PEXPIRE key ttl    (lua/rlock_extend.lua)
 * The token is 128 random bits from getrandom() as 32 lowercase hex chars.
 *
 * A multi-lock takes several keys with one token in one round trip, all or
 * nothing (lua/rlock_multi_acquire.lua); on Redis Cluster the keys must share
 * one hash tag, e.g. "lock:{sku42}:stock" and "lock:{sku42}:price".
 *
 * A lock is a lease: it disappears by itself after ttl_ms, whether or not
 * its owner is still working.  Before committing anything that the lock
 * protects, check rlock_remaining_ms() > 0 (or extend) and refuse to commit
 * otherwise; the remaining time is computed pessimistically from the moment
 * the acquire request was sent, minus a clock-drift allowance.
 *
 * Waiting: a busy lock is retried every retry_ms (with +-50% jitter so many
 * waiters do not stampede together) until wait_ms has passed, measured on
 * CLOCK_MONOTONIC.  The retry sleep is the only place that waits, so a later
 * pub/sub wake-up (release publishing on a channel) replaces just that sleep.
 *
 * Thread-safety: a redisContext and a struct rlock are each used by one
 * thread at a time.  The library's only shared state is its script table,
 * initialised once with pthread_once.
 */
#ifndef RLOCK_H
#define RLOCK_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#ifndef RLOCK_MUST_CHECK
#define RLOCK_MUST_CHECK __attribute__((warn_unused_result))
#endif

#define RLOCK_TOKEN_LEN 32        /* hex chars, without the NUL */
#define RLOCK_DEFAULT_RETRY_MS 50 /* used when opts.retry_ms <= 0 */

enum rlock_status {
    RLOCK_OK = 0,
    RLOCK_BUSY,      /* held by someone else and wait_ms expired */
    RLOCK_NOT_OWNER, /* release/extend refused: token mismatch, key gone, or not held */
    RLOCK_ERR,       /* I/O, protocol, Redis error reply or bad argument; see lock.err */
};

struct rlock_opts {
    int ttl_ms;   /* lease length, > 0 */
    int wait_ms;  /* how long to retry a busy lock; 0 = try once, < 0 invalid */
    int retry_ms; /* mean pause between tries; <= 0 means RLOCK_DEFAULT_RETRY_MS */
};

/*
 * One lock over one or many keys with one token.  Zero-initialise before
 * first use (struct rlock l = {0};).  After rlock_release() or rlock_clear()
 * it is empty again and can be reused.  Fields are readable; do not write.
 */
struct rlock {
    char **keys;                     /* owned copies of the keys; NULL when empty */
    size_t nkeys;                    /* 0 when empty */
    char token[RLOCK_TOKEN_LEN + 1]; /* owner token, NUL-terminated */
    int ttl_ms;                      /* lease of the last successful acquire/extend */
    int64_t acquired_mono_ms;        /* rlock_mono_ms() just before that request was sent */
    int held;                        /* 1 while we believe we hold the lease */
    char err[128];                   /* why the last call failed; "" after success */
};

/*
 * Takes the lock on key, retrying while it is busy for up to o->wait_ms.
 * l must be empty.  The key is copied into l.
 * Returns RLOCK_OK with l held; RLOCK_BUSY if still taken when the wait
 * expired; RLOCK_ERR on I/O or Redis error, bad options or out of memory.
 * On anything but RLOCK_OK l stays empty.  After RLOCK_ERR from an I/O
 * failure the SET may still have reached Redis; the key then expires by ttl.
 */
RLOCK_MUST_CHECK enum rlock_status rlock_acquire(redisContext *c, struct rlock *l, const char *key,
                                                 const struct rlock_opts *o);

/*
 * Like rlock_acquire() but over nkeys keys with one token, atomically: either
 * every key is set in one round trip or none is (nothing is left behind when
 * one key is busy).  The keys must be distinct and, on Redis Cluster, share a
 * hash tag.  nkeys == 1 is exactly rlock_acquire().  Same returns.
 */
RLOCK_MUST_CHECK enum rlock_status rlock_acquire_multi(redisContext *c, struct rlock *l,
                                                       const char *const *keys, size_t nkeys,
                                                       const struct rlock_opts *o);

/*
 * Deletes the keys that still hold l's token, leaving keys taken over by
 * someone else alone.  Always empties l (frees the keys), whatever the
 * outcome, so l is reusable; l->err survives for the caller to read.
 * Returns RLOCK_OK if every key was deleted; RLOCK_NOT_OWNER if l was empty
 * or at least one key had expired or was held by another token (the lease was
 * lost at some point: work done under it may not have been exclusive);
 * RLOCK_ERR on I/O or Redis error (the keys then expire by their ttl).
 * Not must-check: on cleanup paths a failed release is harmless (the lease
 * runs out), and gcc's warn_unused_result cannot be silenced with (void).
 */
enum rlock_status rlock_release(redisContext *c, struct rlock *l);

/*
 * Resets the expiry of every key of l to ttl_ms, if all of them still hold
 * l's token (all or nothing).  The new lease counts from when this request is
 * sent.  Returns RLOCK_OK with l->ttl_ms / acquired_mono_ms updated;
 * RLOCK_NOT_OWNER if l is not held or a key was lost (l is then marked not
 * held, but keeps its keys until rlock_release()/rlock_clear());
 * RLOCK_ERR on I/O or Redis error or ttl_ms <= 0 (l unchanged).
 */
RLOCK_MUST_CHECK enum rlock_status rlock_extend(redisContext *c, struct rlock *l, int ttl_ms);

/*
 * Returns how many milliseconds of the lease are surely left:
 * ttl - (now - acquired_mono_ms) - drift, where drift = ttl/100 + 2 ms,
 * or 0 if that is negative or l is not held.  Never contacts Redis.
 */
int64_t rlock_remaining_ms(const struct rlock *l);

/*
 * Frees l's memory and empties it without touching Redis (e.g. after the
 * connection died; the keys then expire by their ttl).  Safe on an empty l.
 */
void rlock_clear(struct rlock *l);

/* Returns a static name for st, e.g. "RLOCK_BUSY"; never NULL. */
const char *rlock_status_str(enum rlock_status st);

/* Returns CLOCK_MONOTONIC in milliseconds, the clock of every rlock deadline. */
int64_t rlock_mono_ms(void);

#endif /* RLOCK_H */
