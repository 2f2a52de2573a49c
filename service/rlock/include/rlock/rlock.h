/*
 * rlock: a lease lock on a single Redis, synchronous API.
 *
 * On-Redis format (shared with redsync, node-redlock and redis-py, so those
 * clients and this one exclude each other on the same key):
 *   acquire  SET key token NX PX ttl
 *   release  if GET key == token then DEL key            (lua/rlock/release.lua)
 *   extend   if GET key == token then PEXPIRE key ttl    (lua/rlock/extend.lua)
 * The token is 128 random bits from getrandom() as 32 lowercase hex chars.
 *
 * A multi-lock takes several keys with one token in one round trip, all or
 * nothing (lua/rlock/multi_acquire.lua); on Redis Cluster the keys must share
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
 * CLOCK_MONOTONIC.  With a notifier (rlock/notify.h: one pub/sub connection
 * per process) a waiter is also woken as soon as the holder releases:
 * release publishes "0" on the key's channel, rlock_channel_name(
 * RLOCK_RELEASE_CHANNEL_PREFIX, key), e.g. "rlock:release:{lock:a}".
 *
 * Watchdog: with opts.ttl_ms == 0 and opts.watchdog set, the lease is the
 * watchdog's and a background thread renews it every lease/3 until release
 * (rlock/watch.h); rlock_lost() and opts.on_lost report a lock found lost.
 *
 * Thread-safety: a redisContext and a struct rlock are each used by one
 * thread at a time (rlock_lost() and rlock_remaining_ms() of a watched lock
 * may be called from any thread).  Shared state: the script table
 * (pthread_once), the metrics (atomics) and the default notifier.
 */
#ifndef RLOCK_H
#define RLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#ifndef RLOCK_MUST_CHECK
#define RLOCK_MUST_CHECK __attribute__((warn_unused_result))
#endif

#define RLOCK_TOKEN_LEN 32        /* hex chars, without the NUL */
#define RLOCK_DEFAULT_RETRY_MS 50 /* used when opts.retry_ms <= 0 */
/* Channel prefix of simple-lock release notices (see rlock_channel_name). */
#define RLOCK_RELEASE_CHANNEL_PREFIX "rlock:release"

struct rlock_notifier; /* rlock/notify.h */
struct rlock_watchdog; /* rlock/watch.h */
struct rlock_watch;    /* rlock/watch.h */
struct rlock_cluster;  /* rlock/cluster.h */

/*
 * Called once when a watched lock is found lost: a renewal found the key gone
 * or owned by someone else, or the lease ran out while Redis could not be
 * reached.  'key' is the lock's (first) key, valid during the call.  Runs on
 * the watchdog's thread (sync API) or the event loop (async API); it must not
 * block for long and must not release or clear the lock from inside.
 */
typedef void rlock_lost_fn(const char *key, void *arg);

/*
 * Makes a new connection for a library-owned helper (notifier, watchdog):
 * connected, authenticated; the library owns and frees the returned context.
 * Returns NULL (or a context with err set) when Redis cannot be reached; the
 * helper then retries later.  Called from the helper's own thread.
 */
typedef redisContext *rlock_connect_fn(void *arg);

enum rlock_status {
    RLOCK_OK = 0,
    RLOCK_BUSY,      /* held by someone else and wait_ms expired */
    RLOCK_NOT_OWNER, /* release/extend refused: token mismatch, key gone, or not held */
    RLOCK_ERR,       /* I/O, protocol, Redis error reply or bad argument; see lock.err */
};

struct rlock_opts {
    int ttl_ms;   /* lease length, > 0; 0 = the watchdog's lease, renewed (needs .watchdog) */
    int wait_ms;  /* how long to retry a busy lock; 0 = try once, < 0 invalid */
    int retry_ms; /* mean pause between tries; <= 0 means RLOCK_DEFAULT_RETRY_MS */
    /* Optional; zero them and nothing changes (new fields go last so
     * positional initialisers of the first three keep working). */
    struct rlock_notifier *notifier; /* early wake-up; NULL = rlock_notifier_default() */
    struct rlock_watchdog *watchdog; /* renews ttl_ms == 0 locks until release */
    rlock_lost_fn *on_lost;          /* watched locks: called once if the lock is lost */
    void *lost_arg;                  /* passed to on_lost */
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
    struct rlock_watch *watch;       /* the watchdog's renewal of this lock, or NULL */
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
 * someone else alone, and publishes a wake-up on each deleted key's channel.
 * Stops l's watchdog first.  Always empties l (frees the keys), whatever the
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
 * rlock_release() of locks ls[0..n) in one round trip (a pipeline of the
 * same scripts), for a holder of many (rlock_try_fenced_each()).  Sets st[i]
 * as rlock_release() would return it for ls[i], and empties every ls[i].
 * Returns how many were released (RLOCK_OK).  Every key must live on c's
 * server.  After an I/O error the locks not answered are left to their
 * leases (RLOCK_ERR).
 */
int rlock_release_each(redisContext *c, struct rlock *const *ls, size_t n, enum rlock_status *st);

/*
 * rlock_release() on a Redis Cluster (rlock/cluster.h): sent to the master
 * of l's slot, and made again where a MOVED, ASK or TRYAGAIN answer says
 * (rlock_cluster_lock()), so a lock whose slot moved since it was taken is
 * still deleted, on its new owner.  Same returns; l is always emptied.
 */
enum rlock_status rlock_cluster_release(struct rlock_cluster *c, struct rlock *l);

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
 * or 0 if that is negative or l is not held.  For a watched lock the lease
 * counts from the watchdog's last successful renewal, and is 0 once the lock
 * was found lost.  Never contacts Redis.
 */
int64_t rlock_remaining_ms(const struct rlock *l);

/*
 * Returns 1 if l can no longer be trusted to be held: not held, its lease
 * ran out (rlock_remaining_ms() == 0), or its watchdog found it lost; else 0.
 * A writer calls it right before COMMIT and rolls back on 1.  For a watched
 * lock it may be called from any thread.  Never contacts Redis.
 */
int rlock_lost(const struct rlock *l);

/*
 * Frees l's memory and empties it without touching Redis (e.g. after the
 * connection died; the keys then expire by their ttl).  Stops the watchdog.
 * Safe on an empty l.
 */
void rlock_clear(struct rlock *l);

/*
 * Fills buf with len bytes from the kernel CSPRNG (getrandom).
 * Returns 0, or -1 with errno set.
 */
RLOCK_MUST_CHECK int rlock_random_bytes(void *buf, size_t len);

/*
 * Returns a new string "<prefix>:{<key>}", or "<prefix>:<key>" when key
 * already contains '{' (Redisson's rule, so the name hashes to the key's
 * cluster slot and matches what Redisson computes).  The caller frees it.
 * Returns NULL when out of memory.
 */
char *rlock_channel_name(const char *prefix, const char *key);

/* ---- releasing a lock when a database transaction completes ---- */

/*
 * Returns the connection a release should use, borrowed: the caller keeps
 * owning it.  NULL when none is available (the release then fails and the
 * lock expires by its lease).
 */
typedef redisContext *rlock_borrow_fn(void *arg);

enum rlock_kind {
    RLOCK_KIND_SIMPLE,    /* lock is a struct rlock (simple or multi-key) */
    RLOCK_KIND_REENTRANT, /* lock is a struct rlock_reentrant (reentrant or fair) */
};

/*
 * What rlock_release_on_complete() releases.  Fill the first four fields;
 * the hook writes the last two.  Must outlive the transaction.
 */
struct rlock_binding {
    enum rlock_kind kind;
    void *lock;            /* struct rlock * or struct rlock_reentrant * (one hold) */
    rlock_borrow_fn *conn; /* where to send the release */
    void *conn_arg;
    int outcome;              /* written by the hook: the outcome it was given */
    enum rlock_status status; /* written by the hook: how the release went */
};

/*
 * A database-agnostic completion hook: releases b->lock whatever the
 * transaction's outcome (commit or rollback: seed 001's correction) and
 * records outcome and the release status in b.  A simple lock is always left
 * empty; a reentrant lock loses one hold (and is emptied if that failed).
 * With a watchdog, renewal stops before the release.
 * 'binding' is a struct rlock_binding *.  Adapt it to a hook type with an
 * enum outcome by a one-line wrapper, e.g. for dbtx:
 *   static void hook(enum dbtx_outcome o, void *b) { rlock_release_on_complete((int)o, b); }
 */
void rlock_release_on_complete(int outcome, void *binding);

/* Returns a static name for st, e.g. "RLOCK_BUSY"; never NULL. */
const char *rlock_status_str(enum rlock_status st);

/* Returns CLOCK_MONOTONIC in milliseconds, the clock of every rlock deadline. */
int64_t rlock_mono_ms(void);

/* ms (a negative one as 0) as a struct timeval: for an event's timer or a
 * connection's timeouts.  Pure. */
struct timeval rlock_ms_tv(int64_t ms);

/* ---- building blocks for other lock kinds (rlock_fence, rlock_redlock) and tools ---- */

/*
 * Writes a fresh owner token (RLOCK_TOKEN_LEN lowercase hex characters from
 * 128 bits of the kernel CSPRNG, plus a NUL) into out.  The bytes come from a
 * per-thread buffer refilled by getrandom() (one call per 32 tokens; a
 * forked child refills before its first token).  Returns 0, or -1 with
 * errno set when getrandom() fails (out is then unspecified).
 */
RLOCK_MUST_CHECK int rlock_token_new(char out[RLOCK_TOKEN_LEN + 1]);

/*
 * Makes an empty l hold keys[0..nkeys) with token, as if rlock_acquire_multi()
 * had just taken them with a lease of ttl_ms counted from acquired_mono_ms
 * (rlock_mono_ms() taken before the acquiring request was sent).  For lock
 * kinds that set the keys by other means (a fenced acquire script) and for
 * tools that release a lock whose token they know.  Copies keys and token;
 * contacts no server.  Returns 0; -1 with l->err set if l is in use, an
 * argument is invalid (no keys, NULL key, token not RLOCK_TOKEN_LEN long,
 * ttl_ms <= 0) or memory runs out, leaving l as it was.
 */
RLOCK_MUST_CHECK int rlock_adopt(struct rlock *l, const char *const *keys, size_t nkeys,
                                 const char *token, int ttl_ms, int64_t acquired_mono_ms);

#endif /* RLOCK_H */
