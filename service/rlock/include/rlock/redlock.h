/*
 * rlock_redlock: the Redlock algorithm over N independent Redis masters
 * (seed 002; redis.io "Distributed Locks with Redis"), synchronous API.
 *
 * One attempt sends SET key token NX PX ttl to every node at once (the same
 * value format as the simple lock, so each node also excludes redsync and
 * node-redlock clients) and collects the answers until node_timeout_ms, a
 * small fraction of the ttl, so one dead or stalled node cannot eat the lease.
 * The lock is held when a quorum of N/2+1 nodes said OK and the validity
 *     ttl - elapsed - drift       (drift = ttl/100 + 2 ms, as rlock.h)
 * is still positive; elapsed counts from before the first request was sent.
 * Otherwise the attempt is undone on every node (compare-token-then-DEL, so
 * nothing left behind holds other owners off until the ttl) and retried after
 * a random pause, at most retry_count times.
 *
 * Nodes are caller-owned blocking hiredis contexts, one per master, used by
 * one thread at a time.  A node that fails or does not answer in time gets
 * err set on its context (REDIS_ERR_IO, "no reply within ... ms"): a late
 * answer would otherwise be read as the answer to the next command.  The
 * caller reconnects such contexts (redisFree + redisConnect) before the next
 * call; a NULL context or one with err set counts as a node that said no.
 *
 * Redlock is only as safe as its timing assumptions (process pauses, clock
 * jumps: Kleppmann).  It gives no fencing token: a store that must refuse a
 * superseded holder needs rlock_fence on a single authority.
 */
#ifndef RLOCK_REDLOCK_H
#define RLOCK_REDLOCK_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "rlock/rlock.h"

#define RLOCK_REDLOCK_DEFAULT_NODE_TIMEOUT_MS 50 /* cap of the default node timeout */
#define RLOCK_REDLOCK_NODE_TIMEOUT_DIVISOR 10    /* default node timeout <= ttl / this */

struct rlock_redlock_opts {
    int ttl_ms;          /* lease on every node, > 0 */
    int retry_count;     /* attempts after the first one, >= 0 */
    int retry_ms;        /* mean random pause between attempts; <= 0: RLOCK_DEFAULT_RETRY_MS */
    int node_timeout_ms; /* how long an attempt waits for the nodes (all at once), < ttl_ms;
                            <= 0: min(ttl_ms / 10, 50 ms), at least 1 */
};

/*
 * A Redlock over one key.  Zero-initialise before first use; after
 * rlock_redlock_release() or rlock_redlock_clear() it is empty and reusable.
 * Fields are readable; do not write.
 */
struct rlock_redlock {
    char *key;                       /* owned copy; NULL when empty */
    char token[RLOCK_TOKEN_LEN + 1]; /* value on every node */
    int ttl_ms;                      /* lease of the last successful acquire/extend */
    int node_timeout_ms;             /* used again by release and extend */
    int64_t acquired_mono_ms;        /* rlock_mono_ms() before that attempt's first request */
    int64_t validity_ms;             /* ttl - elapsed - drift when that attempt ended */
    size_t granted;                  /* nodes that said yes to it */
    int held;                        /* 1 while we believe we hold a quorum */
    char err[160];                   /* why the last call failed; "" after success */
};

/*
 * Takes key on a quorum of the nnodes nodes (nnodes >= 1; quorum nnodes/2+1).
 * l must be empty.  Returns RLOCK_OK with l held; RLOCK_BUSY if, in the last
 * attempt, enough nodes answered but too few granted (held by someone else,
 * or the attempt took longer than the ttl allows); RLOCK_ERR if fewer than a
 * quorum of nodes answered, or on bad options or out of memory.  On anything
 * but RLOCK_OK l stays empty and every node that answered holds no key with
 * our token; nodes that did not answer drop theirs after the ttl.
 */
RLOCK_MUST_CHECK enum rlock_status rlock_redlock_acquire(redisContext *const *nodes, size_t nnodes,
                                                         struct rlock_redlock *l, const char *key,
                                                         const struct rlock_redlock_opts *o);

/*
 * Deletes the key on every node where it still holds l's token (in parallel,
 * bounded by l->node_timeout_ms).  Always empties l.  Returns RLOCK_OK if a
 * quorum of nodes deleted it; RLOCK_NOT_OWNER if l was empty or too few still
 * held our token (the lease was lost at some point); RLOCK_ERR if fewer than
 * a quorum answered (their keys expire by the ttl).  Not must-check, as
 * rlock_release().
 */
enum rlock_status rlock_redlock_release(redisContext *const *nodes, size_t nnodes,
                                        struct rlock_redlock *l);

/*
 * Resets the lease to ttl_ms on every node that still holds l's token.
 * Returns RLOCK_OK if a quorum did so within the validity (l's lease then
 * counts from this call); RLOCK_NOT_OWNER if l is not held or too few nodes
 * still had our token (l is marked not held; release it to clean up);
 * RLOCK_ERR if fewer than a quorum answered or ttl_ms <= 0 (l unchanged).
 */
RLOCK_MUST_CHECK enum rlock_status rlock_redlock_extend(redisContext *const *nodes, size_t nnodes,
                                                        struct rlock_redlock *l, int ttl_ms);

/* Milliseconds of the lease surely left (as rlock_remaining_ms()), 0 if not held. */
int64_t rlock_redlock_remaining_ms(const struct rlock_redlock *l);

/* Frees l's memory and empties it without contacting any node. */
void rlock_redlock_clear(struct rlock_redlock *l);

#endif /* RLOCK_REDLOCK_H */
