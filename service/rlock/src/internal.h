/*
 * internal.h: what the lock library's sources share and its public headers
 * do not show.  The library's only private header: any source in src/ may
 * include it, no public header does, and it is not installed.
 *
 * The base module, internal.c, sits under every other one: it uses nothing
 * of the library but the declarations of <rlock/rlock.h> and the counters of
 * metrics.c, a leaf.  The public helpers every module needs (rlock_mono_ms(),
 * rlock_random_bytes(), rlock_token_new(), rlock_channel_name(),
 * rlock_status_str(), declared in rlock.h) are implemented there too, so no
 * module calls back into the lock that uses it.
 *
 * Everything declared here has hidden visibility: the shared library
 * exports the public API only.
 */
#ifndef RLOCK_INTERNAL_H
#define RLOCK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "rlock/rlock.h"

#pragma GCC visibility push(hidden)

#define RLOCK_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))

/* ---- internal.c: errors ---- */

/*
 * Writes a printf-style message into err[0..errlen), truncated to fit: the
 * library's one way to record why a call failed, in a lock's err field or a
 * caller's buffer.  Writes nothing when err is NULL or errlen is 0.
 */
void rlock_err_set(char *err, size_t errlen, const char *fmt, ...) RLOCK_PRINTF(3, 4);

/* rlock_err_set() into the err array of a lock struct. */
#define RLOCK_SET_ERR(l, ...) rlock_err_set((l)->err, sizeof(l)->err, __VA_ARGS__)

/*
 * Reads the integer reply r of a call named op (e.g. "release") into *out.
 * Returns 0; or -1 with "op: <why>" in err when there is no reply (c's I/O
 * error), r is an error reply, or r is not an integer.  Does not free r.
 */
int rlock_reply_int(const redisContext *c, const redisReply *r, const char *op, long long *out,
                    char *err, size_t errlen);

/* ---- internal.c: time ---- */

/*
 * The allowance for the Redis server's clock running faster than ours, as
 * Redlock reckons it: ttl/100 + 2 ms, rounded up so that short leases are
 * never overestimated.
 */
int64_t rlock_drift_ms(int ttl_ms);

/*
 * Returns how many ms of a lease of ttl_ms requested at since_mono_ms
 * (rlock_mono_ms() before the request was sent) are surely left:
 * ttl - elapsed - drift, or 0 if that is not positive.
 */
int64_t rlock_lease_left_ms(int ttl_ms, int64_t since_mono_ms);

/* Returns the CLOCK_MONOTONIC time mono_ms as a timespec (absolute deadlines). */
struct timespec rlock_mono_timespec(int64_t mono_ms);

/* Sleeps until CLOCK_MONOTONIC reaches until_mono_ms, resuming after signals. */
void rlock_sleep_until(int64_t until_mono_ms);

/* ---- internal.c: bytes and strings ---- */

/* Writes len bytes of in as 2*len lowercase hex characters plus a NUL into out. */
void rlock_hex(char *out, const void *in, size_t len);

/*
 * Copies the n strings of v into one allocation (the vector of n pointers,
 * then the strings), so the copy is freed with a single free().
 * Returns the copy, or NULL when out of memory (or n is 0).
 */
char **rlock_strv_dup(const char *const *v, size_t n);

/*
 * rlock_channel_name(prefix, key) without the allocation: the length
 * (without the NUL) of the channel of key[0..key_len), and writing it plus a
 * NUL into out, which has room for that.
 */
size_t rlock_channel_len(const char *prefix, const char *key, size_t key_len);
void rlock_channel_write(char *out, const char *prefix, const char *key, size_t key_len);

/*
 * Returns the release channels of n simple-lock keys,
 * rlock_channel_name(RLOCK_RELEASE_CHANNEL_PREFIX, key) each, in one
 * allocation freed with free(); NULL when out of memory (or n is 0).
 */
char **rlock_release_channels(const char *const *keys, size_t n);

/* ---- internal.c: metrics every lock kind counts the same way ---- */

/*
 * Counts how an acquisition ended: acquired (and waited, when it did) on
 * RLOCK_OK, busy on RLOCK_BUSY; waited_ms into the wait time when it waited.
 */
void rlock_count_acquire(enum rlock_status st, int waited, int64_t waited_ms);

/* Counts a release: released on RLOCK_OK, release_refused on RLOCK_NOT_OWNER. */
void rlock_count_release(enum rlock_status st);

/* ---- lock.c: the simple lock, for fence.c and binding.c ---- */

/*
 * Empties l as rlock_clear() does (stops its watchdog, frees its keys) but
 * keeps l->err, which tells the caller why the lock ended up empty.
 */
void rlock_empty(struct rlock *l);

/* ---- reentrant.c: the Redisson hash lock, for fair.c and async.c ---- */

struct rlock_reentrant; /* rlock/reentrant.h */

/*
 * What reentrant.c needs of the fair lock to re-enter or release a struct
 * rlock_reentrant that rlock_fair_acquire() took (l->fair == 1).  fair.c
 * passes its ops with every fair hold it records, so reentrant.c reaches
 * the fair lock without including it: fair builds on reentrant, never the
 * other way round.
 */
struct rlock_fair_ops {
    /* rlock_fair_acquire() with default fair options: one more hold of l. */
    enum rlock_status (*reenter)(redisContext *c, struct rlock_reentrant *l, const char *key,
                                 const char *uuid, uint64_t thread_id, const struct rlock_opts *o);
    /* rlock_fair_release_hold(). */
    enum rlock_status (*release_hold)(redisContext *c, struct rlock_reentrant *l, int *freed);
};

/*
 * Parses an acquire script's reply {1, holds} / {0, busy ms}.  errstr is the
 * context's error for a NULL reply (may be NULL).  Returns RLOCK_OK or
 * RLOCK_BUSY with *n set, or RLOCK_ERR with "acquire: <why>" in err.
 */
enum rlock_status rlock_parse_acquire_reply(const redisReply *r, const char *errstr, long long *n,
                                            char *err, size_t errlen);

/*
 * Validates the arguments of a reentrant or fair acquire and formats the
 * owner field into owner (RLOCK_OWNER_MAX bytes).  Returns 0, or -1 with
 * l->err set.
 */
int rlock_reentrant_check_args(struct rlock_reentrant *l, const char *key, const char *uuid,
                               uint64_t thread_id, const struct rlock_opts *o, char *owner);

/*
 * Records one more hold in l, taken with a lease of lease ms requested at
 * start; the first hold copies key and owner and starts the watchdog when
 * o->ttl_ms == 0.  fair is NULL for a reentrant hold, the fair lock's ops
 * for a fair one.  Returns 0, or -1 when out of memory with l unchanged.
 */
int rlock_reentrant_record(struct rlock_reentrant *l, const char *key, const char *owner,
                           const struct rlock_opts *o, int lease, int64_t start,
                           const struct rlock_fair_ops *fair);

/* ---- registry.c: the library's Lua scripts ---- */

struct rlock_script; /* rlock/script.h */

/*
 * Every script of the library, named once: X(ID, file, flags) makes
 * lua/rlock/<file>.lua the script RLOCK_LUA_<ID>, with the RLOCK_FN_* flags
 * it has as the function rlock_<file> (registry.c says why).  Every one
 * may run over maxmemory: a lock is a few dozen bytes, and refusing one
 * would stop the holders whose work (a writer draining a stream) frees memory.  The build
 * embeds the files (service/tools/embed.c) as rlock_lua_<file>[] and _len.
 */
#define RLOCK_LUA_SCRIPTS(X)                                                                       \
    X(RELEASE, release, RLOCK_FN_ALLOW_OOM)                                                        \
    X(EXTEND, extend, RLOCK_FN_ALLOW_OOM)                                                          \
    X(MULTI_ACQUIRE, multi_acquire, RLOCK_FN_ALLOW_OOM)                                            \
    X(MULTI_RELEASE, multi_release, RLOCK_FN_ALLOW_OOM)                                            \
    X(REENTRANT_ACQUIRE, reentrant_acquire, RLOCK_FN_ALLOW_OOM)                                    \
    X(REENTRANT_RELEASE, reentrant_release, RLOCK_FN_ALLOW_OOM)                                    \
    X(REENTRANT_RENEW, reentrant_renew, RLOCK_FN_ALLOW_OOM)                                        \
    X(FAIR_ACQUIRE, fair_acquire, RLOCK_FN_ALLOW_OOM)                                              \
    X(FAIR_RELEASE, fair_release, RLOCK_FN_ALLOW_OOM)                                              \
    X(FAIR_CANCEL, fair_cancel, RLOCK_FN_ALLOW_OOM)                                                \
    X(FENCE_ACQUIRE, fence_acquire, RLOCK_FN_ALLOW_OOM)                                            \
    X(FENCE_FLOOR, fence_floor, RLOCK_FN_ALLOW_OOM)                                                \
    X(FENCE_RENEW, fence_renew, RLOCK_FN_ALLOW_OOM)

/* (clang-format cannot tell that the X-list expands to enumerators.) */
/* clang-format off */
enum rlock_lua {
#define RLOCK_LUA_ENUM(id, file, flags) RLOCK_LUA_##id,
    RLOCK_LUA_SCRIPTS(RLOCK_LUA_ENUM)
#undef RLOCK_LUA_ENUM
    RLOCK_LUA_COUNT
};
/* clang-format on */

/*
 * Returns the library's script id, ready for rlock_script_run() (its SHA1 is
 * computed on the first call, for the whole table at once, under one
 * pthread_once: no init call needed, safe from any thread).  The script is
 * static and immutable; never NULL for id < RLOCK_LUA_COUNT.
 */
const struct rlock_script *rlock_lua(enum rlock_lua id);

/* ---- internal.c: where a Sentinel watch says the master is ---- */

/*
 * The state a Sentinel watch (sentinel.c) publishes and URLs carrying it
 * (url.c) read: the first member of struct rlock_sentinel_watch, so that
 * url.c reads it through the watch's pointer without depending on
 * sentinel.c, which depends on url.c.
 */
struct rlock_master_seen {
    pthread_mutex_t mu;
    char host[256]; /* "" until known */
    int port;
    _Atomic uint64_t gen; /* bumped on every change of address */
};

void rlock_master_seen_init(struct rlock_master_seen *m);
void rlock_master_seen_destroy(struct rlock_master_seen *m);
/* Records host:port; returns 1 (and the former address in old_host, "" if
 * none, and old_port) when it changed, else 0. */
int rlock_master_seen_set(struct rlock_master_seen *m, const char *host, int port, char *old_host,
                          size_t cap, int *old_port);
/* Copies the address out; 0, or -1 while none is known. */
int rlock_master_seen_get(struct rlock_master_seen *m, char *host, size_t cap, int *port,
                          uint64_t *gen);
uint64_t rlock_master_seen_gen(struct rlock_master_seen *m);

/* ---- url.c: Sentinels ---- */

struct rlock_url;
struct rlock_url_node;

/*
 * Asks Sentinel s, authenticated with u's user and password, for the
 * address of u's master (SENTINEL GET-MASTER-ADDR-BY-NAME), every step
 * within timeout_ms.  Returns 0 with *n set, or -1 with err set.
 */
int rlock_sentinel_ask(const struct rlock_url *u, const struct rlock_url_node *s, int timeout_ms,
                       struct rlock_url_node *n, char *err, size_t errlen);

#pragma GCC visibility pop

#endif /* RLOCK_INTERNAL_H */
