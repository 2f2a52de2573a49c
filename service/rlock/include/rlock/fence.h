/*
 * rlock_fence: fencing tokens for the simple lock and the multi-lock, and a
 * replica acknowledgement check.  Synchronous API.
 *
 * Why: a lease can run out while its holder is paused (GC, swap, SIGSTOP, a
 * long network stall) and the holder cannot notice in time; Kleppmann's
 * critique of Redlock (seed 002).  The protected store must therefore refuse
 * writes from a holder that has been superseded.  Every fenced acquisition
 * returns a token that is strictly larger than the token of every earlier
 * holder of the same lock; the store remembers the largest token it accepted
 * and refuses smaller ones, in the same transaction as the protected write.
 *
 * How the token is made (lua/rlock/fence_acquire.lua): the lock keys are set
 * exactly as SET NX PX sets them (so plain rlock_release()/rlock_extend(),
 * redsync and node-redlock all still work on them) and, in the same script,
 *     token = max(counter + 1, Redis server time in microseconds)
 * is stored in a counter key next to the lock (rlock_fence_key()).  A plain
 * INCR counter goes backwards when Redis loses it (restart without
 * persistence, failover to a replica that had not received it, FLUSHALL);
 * this one restarts from the server clock, which is ahead of every earlier
 * token unless the clock went back or more than 10^6 tokens per second were
 * drawn.  For those remaining cases the store is the authority: it refuses,
 * the client calls rlock_fence_floor() with the token the store has seen and
 * retries, and the next token is larger.  One refused attempt, never a wrong
 * write.  Tokens are below 2^53 (exact in Lua, JSON and PostgreSQL bigint).
 *
 * The store side (PostgreSQL), first statement of the transaction that does
 * the protected write, so that holders are serialised in token order:
 *     UPDATE t SET fence_token = $token WHERE id = $id AND fence_token <= $token
 * and exactly one affected row is required; 0 rows means "superseded": roll
 * back, rlock_fence_floor(c, key, NULL, <the row's fence_token>), try again.
 * '<=' (not '<') lets one holder run several transactions under one token.
 *
 * The counter key has no expiry: one small string per lock name.  A lock
 * name's tokens only need to be comparable with each other; different locks
 * may share a counter (a named fence key), which then orders them all.
 */
#ifndef RLOCK_FENCE_H
#define RLOCK_FENCE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "rlock/rlock.h"

#define RLOCK_FENCE_SUFFIX ":fence"
#define RLOCK_FENCE_MAX ((int64_t)1 << 53) /* tokens and floors stay below this */

/*
 * Writes the name of the fence counter of lock_key into out[0..cap):
 * lock_key + ":fence" when lock_key has a Redis Cluster hash tag ("{...}",
 * non-empty), else "{" lock_key "}:fence", which hashes to the same slot as
 * the untagged lock key.  Returns 0; -1 if out is too small or lock_key
 * contains a brace but no valid tag (give such a lock a named fence key).
 */
RLOCK_MUST_CHECK int rlock_fence_key(char *out, size_t cap, const char *lock_key);

/*
 * rlock_acquire() that also draws a fencing token, atomically with taking
 * the lock (one round trip per attempt), from rlock_fence_key(key).
 * Returns RLOCK_OK with l held and *fence set (> 0); RLOCK_BUSY when still
 * held by another owner after o->wait_ms; RLOCK_ERR on I/O or Redis error,
 * bad arguments or out of memory (l->err says which).  On anything but
 * RLOCK_OK, l stays empty and *fence is 0.  o->ttl_ms must be > 0: fenced
 * locks have an explicit lease (no watchdog).  Waiting is rlock's (jittered
 * retries, woken early by the notifier).  Release, extend and check the
 * lease with the plain rlock_release(), rlock_extend(), rlock_remaining_ms().
 */
RLOCK_MUST_CHECK enum rlock_status rlock_acquire_fenced(redisContext *c, struct rlock *l,
                                                        const char *key, const struct rlock_opts *o,
                                                        int64_t *fence);

/*
 * rlock_acquire_multi() that also draws one fencing token for the whole
 * multi-lock, from fence_key, or from rlock_fence_key(keys[0]) when fence_key
 * is NULL.  The fence key must differ from every lock key and, on Redis
 * Cluster, share their hash tag.  Tokens are only comparable when drawn from
 * one counter: a multi-lock whose key set varies (a batch of orders) names
 * the counter of what it protects (e.g. its SKU's).  Same returns as
 * rlock_acquire_fenced().
 */
RLOCK_MUST_CHECK enum rlock_status
rlock_acquire_multi_fenced(redisContext *c, struct rlock *l, const char *const *keys, size_t nkeys,
                           const char *fence_key, const struct rlock_opts *o, int64_t *fence);

/*
 * One attempt, without waiting, at n independent fenced locks, all sent in
 * one round trip (a pipeline of the script rlock_acquire_fenced() runs):
 * lock ls[i] over the single key keys[i], its token drawn from
 * fence_keys[i] (fence_keys NULL, or an element NULL: rlock_fence_key of the
 * key), each with its own owner token and a lease of ttl_ms counted from
 * before the round trip.  For a process that works on many resources at
 * once (a writer committing many SKUs in one transaction): each lock is
 * still a lock of its own, released, extended or watched alone
 * (rlock_release_each() releases many in one round trip too).
 *
 * Sets st[i]: RLOCK_OK (ls[i] held, fences[i] > 0), RLOCK_BUSY (held by
 * another owner: ls[i] empty, fences[i] 0), RLOCK_ERR (ls[i]->err says
 * why).  Returns how many were taken, or -1 on bad arguments (nothing
 * sent).  An I/O error ends every lock not yet answered as RLOCK_ERR;
 * Redis may have taken some of them, which their lease then ends.  Every
 * key must live on c's server (on a Redis Cluster, group them by node).
 */
RLOCK_MUST_CHECK int rlock_try_fenced_each(redisContext *c, struct rlock *const *ls,
                                           const char *const *keys, const char *const *fence_keys,
                                           size_t n, int ttl_ms, int64_t *fences,
                                           enum rlock_status *st);

/*
 * Raises the fence counter of a lock to at least 'seen', the largest token
 * the fenced store has accepted, so that the next acquisition draws a larger
 * one.  Name the counter as the acquisition did: lock_key and fence_key are
 * the first lock key and the fence key (NULL: rlock_fence_key(lock_key)).
 * Never lowers the counter; does not need the lock.  Returns RLOCK_OK;
 * RLOCK_ERR with a message in err[0..errlen) on I/O or Redis error, seen
 * outside [0, RLOCK_FENCE_MAX) or an unusable key.
 */
RLOCK_MUST_CHECK enum rlock_status rlock_fence_floor(redisContext *c, const char *lock_key,
                                                     const char *fence_key, int64_t seen, char *err,
                                                     size_t errlen);

/*
 * Draws a newer fencing token for a lock l still held (every key holds its
 * token), from fence_key (or rlock_fence_key(l->keys[0]) when NULL), at least
 * floor + 1.  For a holder whose token the protected store refused because a
 * holder of another lock drawn from the same counter wrote first: it proves it
 * still holds its lock and tries again, without a release and re-acquire.
 * Returns RLOCK_OK with *fence set; RLOCK_NOT_OWNER when the lock is gone or
 * taken (the caller must roll back); RLOCK_ERR (l->err says why).
 */
RLOCK_MUST_CHECK enum rlock_status rlock_fence_renew(redisContext *c, struct rlock *l,
                                                     const char *fence_key, int64_t floor,
                                                     int64_t *fence);

/*
 * Replication check for a lock just taken on c (any kind of rlock_acquire*):
 * WAIT numreplicas timeout_ms, i.e. until at least numreplicas replicas have
 * acknowledged every write made so far on c, the lock keys included, so a
 * failover to one of them does not lose the lock.  The wait is bounded by
 * timeout_ms (> 0; WAIT 0 would block forever); c's own socket timeout must
 * be longer.  Returns RLOCK_OK if enough replicas acknowledged (l untouched).
 * Otherwise returns RLOCK_ERR with l->err set and the lock released, so no
 * key is left behind (l is empty); after an I/O error l is only cleared and
 * the keys expire by their ttl.  numreplicas <= 0 returns RLOCK_OK at once.
 */
RLOCK_MUST_CHECK enum rlock_status rlock_require_replicas(redisContext *c, struct rlock *l,
                                                          int numreplicas, int timeout_ms);

#endif /* RLOCK_FENCE_H */
