/*
 * rlock_reentrant: a reentrant lock in Redisson's RLock format, sync API.
 *
 * On Redis (byte for byte what Redisson writes, so a Java service using
 * Redisson and this library exclude each other on the same key):
 *   key      a hash { "<instance-uuid>:<thread-id>" : hold count }
 *   lease    PEXPIRE on the hash, reset by every acquire, release and renewal
 *   release  decrements the count; the last release deletes the hash and
 *            publishes "0" on "redisson_lock__channel:{key}" (Redisson's
 *            channel name rule: without braces if key already has a hash tag)
 * Scripts: lua/rlock/reentrant_acquire.lua, _release.lua, _renew.lua.
 *
 * The instance uuid is 128 random bits formatted as a UUID (version 4), one
 * per process (rlock_process_uuid()) unless the caller names its own, e.g.
 * one per client object.  The thread id is whatever identifies the owner
 * inside the instance: by default the calling thread's kernel id; an event
 * loop passes a task or request id instead.
 *
 * A release by anyone who does not hold the lock (wrong owner, or a lease
 * that expired) is refused, returned as RLOCK_NOT_OWNER and counted in the
 * release_refused metric; it never deletes another owner's lock.
 *
 * Thread-safety: a struct rlock_reentrant and a redisContext are used by one
 * thread at a time; rlock_reentrant_lost() may be called from any thread.
 */
#ifndef RLOCK_REENTRANT_H
#define RLOCK_REENTRANT_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "rlock/rlock.h"

#define RLOCK_UUID_LEN 36 /* "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", without the NUL */
/* Longest owner field: a uuid (or caller-chosen id of up to 63 chars), ':', a uint64. */
#define RLOCK_OWNER_MAX 96
#define RLOCK_REDISSON_CHANNEL_PREFIX "redisson_lock__channel"

/*
 * One reentrant (or fair, see rlock/fair.h) lock on one key, as held by one
 * owner.  Zero-initialise before first use.  Acquiring again through the same
 * struct re-enters (holds + 1); each release drops one hold, and the struct
 * is empty again after the last.  Fields are readable; do not write.
 */
struct rlock_reentrant {
    char *key;                   /* owned copy; NULL when empty */
    char owner[RLOCK_OWNER_MAX]; /* hash field "<uuid>:<thread id>" */
    int holds;                   /* holds taken through this struct and not released */
    int fair;                    /* 1 if taken by rlock_fair_acquire() */
    int ttl_ms;                  /* lease of the last acquire/extend/renewal */
    int64_t acquired_mono_ms;    /* rlock_mono_ms() before that request was sent */
    int held;                    /* 1 while we believe we hold the lease */
    struct rlock_watch *watch;   /* watchdog renewal, or NULL */
    char err[128];               /* why the last call failed; "" after success */
};

/*
 * Writes a fresh random (version 4) UUID, 36 chars plus NUL, into out.
 * Returns 0, or -1 with errno set when the kernel CSPRNG fails.
 */
RLOCK_MUST_CHECK int rlock_uuid_new(char out[RLOCK_UUID_LEN + 1]);

/*
 * Returns this process's instance uuid, made on first use and fixed for the
 * life of the process (a forked child gets its own on first use after the
 * fork).  Returns NULL only if the kernel CSPRNG failed.
 */
const char *rlock_process_uuid(void);

/*
 * Takes (or re-enters) the lock on key for owner "<uuid>:<thread_id>",
 * waiting up to o->wait_ms as rlock_acquire() does (woken by the release
 * channel through the notifier).  uuid NULL = rlock_process_uuid();
 * thread_id 0 = the calling thread's kernel id.  l must be empty, or already
 * hold key for the same owner (re-entry: one more hold, lease reset).  With
 * o->ttl_ms == 0 the watchdog's lease applies and the lock is renewed until
 * the last release.
 * Returns RLOCK_OK with l held (l->holds incremented); RLOCK_BUSY if another
 * owner still holds it when the wait expired; RLOCK_ERR on I/O or Redis
 * error, bad arguments or out of memory.  On failure l is as it was.
 */
RLOCK_MUST_CHECK enum rlock_status
rlock_reentrant_acquire(redisContext *c, struct rlock_reentrant *l, const char *key,
                        const char *uuid, uint64_t thread_id, const struct rlock_opts *o);

/*
 * Drops one hold.  The last one deletes the lock and wakes its waiters; the
 * watchdog stops when l becomes empty.
 * Returns RLOCK_OK (l->holds decremented; l is empty when it reaches 0);
 * RLOCK_NOT_OWNER if l holds nothing or Redis says our owner holds nothing
 * (lease expired, lock taken over): l is emptied and release_refused
 * counted; RLOCK_ERR on I/O or Redis error: l is emptied too (the lock then
 * expires by its lease, holds and all).
 */
enum rlock_status rlock_reentrant_release(redisContext *c, struct rlock_reentrant *l);

/*
 * Releases one hold of key for owner "<uuid>:<thread_id>" without a struct
 * (Redisson's unlock() by name; tools).  A caller that is not the owner is
 * refused: RLOCK_NOT_OWNER, release_refused counted, nothing changed.
 * Returns RLOCK_OK, RLOCK_NOT_OWNER, or RLOCK_ERR with err filled (err may
 * be NULL).
 */
enum rlock_status rlock_reentrant_release_owner(redisContext *c, const char *key, const char *uuid,
                                                uint64_t thread_id, char *err, size_t errlen);

/*
 * Resets the lease of l to ttl_ms if our owner still holds it.
 * Returns RLOCK_OK; RLOCK_NOT_OWNER if l is empty or the lock was lost
 * (l->held = 0); RLOCK_ERR on I/O or Redis error or ttl_ms <= 0.
 */
RLOCK_MUST_CHECK enum rlock_status rlock_reentrant_extend(redisContext *c,
                                                          struct rlock_reentrant *l, int ttl_ms);

/* Returns the ms surely left of the lease, as rlock_remaining_ms(). */
int64_t rlock_reentrant_remaining_ms(const struct rlock_reentrant *l);

/* Returns 1 if l is not held, expired or found lost by its watchdog, as rlock_lost(). */
int rlock_reentrant_lost(const struct rlock_reentrant *l);

/*
 * Empties l without touching Redis (stops the watchdog); the lock then
 * expires by its lease.  Safe on an empty l.
 */
void rlock_reentrant_clear(struct rlock_reentrant *l);

/*
 * Formats the owner field "<uuid>:<thread_id>" into out (uuid NULL = the
 * process uuid, thread_id 0 = the calling thread's kernel id).
 * Returns 0, or -1 if the uuid is unavailable or too long.
 */
RLOCK_MUST_CHECK int rlock_owner_field(char out[RLOCK_OWNER_MAX], const char *uuid,
                                       uint64_t thread_id);

#endif /* RLOCK_REENTRANT_H */
