/*
 * reentrant: Redisson-format reentrant lock (see rlock/reentrant.h).
 */
#include "rlock/reentrant.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "rlock/notify.h"
#include "rlock/script.h"
#include "rlock/watch.h"

/* ---- identity ---- */

int rlock_uuid_new(char out[RLOCK_UUID_LEN + 1])
{
    unsigned char b[16];
    if (rlock_random_bytes(b, sizeof b) < 0)
        return -1;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4: random */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    char hex[2 * sizeof b + 1];
    rlock_hex(hex, b, sizeof b);
    snprintf(out, RLOCK_UUID_LEN + 1, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16,
             hex + 20);
    return 0;
}

static pthread_mutex_t uuid_mu = PTHREAD_MUTEX_INITIALIZER;
static char uuid_buf[RLOCK_UUID_LEN + 1];
static pid_t uuid_pid;

const char *rlock_process_uuid(void)
{
    /* Keyed by pid: a forked child is another instance and must not share
     * its parent's identity (it would re-enter the parent's locks). */
    pid_t pid = getpid();
    const char *r = uuid_buf;
    pthread_mutex_lock(&uuid_mu);
    if (uuid_pid != pid) {
        if (rlock_uuid_new(uuid_buf) == 0)
            uuid_pid = pid;
        else
            r = NULL;
    }
    pthread_mutex_unlock(&uuid_mu);
    return r;
}

int rlock_owner_field(char out[RLOCK_OWNER_MAX], const char *uuid, uint64_t thread_id)
{
    if (!uuid)
        uuid = rlock_process_uuid();
    if (!uuid)
        return -1;
    if (thread_id == 0)
        thread_id = (uint64_t)syscall(SYS_gettid);
    int n = snprintf(out, RLOCK_OWNER_MAX, "%s:%" PRIu64, uuid, thread_id);
    return n > 0 && n < RLOCK_OWNER_MAX ? 0 : -1;
}

/* ---- lock ---- */

/* Resets l to empty, keeping err; stops the watchdog first. */
static void empty(struct rlock_reentrant *l)
{
    rlock_watch_stop(l->watch);
    l->watch = NULL;
    free(l->key);
    l->key = NULL;
    memset(l->owner, 0, sizeof l->owner);
    l->holds = 0;
    l->fair = 0;
    l->ttl_ms = 0;
    l->acquired_mono_ms = 0;
    l->held = 0;
}

void rlock_reentrant_clear(struct rlock_reentrant *l)
{
    empty(l);
    l->err[0] = '\0';
}

struct reentrant_try {
    redisContext *c;
    struct rlock_reentrant *l;
    const char *key;
    const char *owner;
    const char *ttl;
    int64_t start;
};

/* Parses a {1, holds} / {0, ms} reply of an acquire script.  Returns
 * RLOCK_OK or RLOCK_BUSY with *n set, or RLOCK_ERR with err filled. */
enum rlock_status rlock_parse_acquire_reply(const redisReply *r, const char *errstr, long long *n,
                                            char *err, size_t errlen)
{
    if (!r) {
        rlock_err_set(err, errlen, "acquire: %s", errstr && errstr[0] ? errstr : "I/O error");
        return RLOCK_ERR;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        rlock_err_set(err, errlen, "acquire: %s", r->str);
        return RLOCK_ERR;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
        rlock_err_set(err, errlen, "acquire: unexpected reply type %d", r->type);
        return RLOCK_ERR;
    }
    *n = r->element[1]->integer;
    return r->element[0]->integer == 1 ? RLOCK_OK : RLOCK_BUSY;
}

static enum rlock_status reentrant_try_once(void *arg, int64_t *busy_ms)
{
    struct reentrant_try *t = arg;
    const char *argv[] = {t->key, t->ttl, t->owner};
    t->start = rlock_mono_ms();
    redisReply *r =
        rlock_script_run(t->c, rlock_lua(RLOCK_LUA_REENTRANT_ACQUIRE), 1, 2, argv, NULL);
    long long n = 0;
    enum rlock_status st =
        rlock_parse_acquire_reply(r, t->c->errstr, &n, t->l->err, sizeof t->l->err);
    freeReplyObject(r);
    if (st == RLOCK_BUSY)
        *busy_ms = n;
    return st;
}

/* The fair lock's ops, set with its first hold (see rlock_reentrant_record):
 * a struct with l->fair == 1 exists only after that.  There is one fair lock
 * implementation, so every fair hold passes the same constant. */
static _Atomic(const struct rlock_fair_ops *) fair_ops;

/* Returns the fair lock's ops for l (l->fair == 1), or NULL with l->err set
 * if l claims to be fair without the fair lock having taken it. */
static const struct rlock_fair_ops *fair_ops_for(struct rlock_reentrant *l, const char *op)
{
    const struct rlock_fair_ops *f = atomic_load_explicit(&fair_ops, memory_order_acquire);
    if (!f)
        RLOCK_SET_ERR(l, "%s: struct marked fair but never taken by rlock_fair_acquire()", op);
    return f;
}

int rlock_reentrant_check_args(struct rlock_reentrant *l, const char *key, const char *uuid,
                               uint64_t thread_id, const struct rlock_opts *o, char *owner)
{
    if (!key || !o || o->ttl_ms < 0 || (o->ttl_ms == 0 && !o->watchdog) || o->wait_ms < 0) {
        RLOCK_SET_ERR(
            l, "acquire: invalid arguments (need a key, ttl_ms > 0 or a watchdog, wait_ms >= 0)");
        return -1;
    }
    if (rlock_owner_field(owner, uuid, thread_id) < 0) {
        RLOCK_SET_ERR(l, "acquire: no instance uuid (getrandom failed or too long)");
        return -1;
    }
    if (l->holds > 0 && (strcmp(l->key, key) != 0 || strcmp(l->owner, owner) != 0)) {
        RLOCK_SET_ERR(l, "acquire: struct already holds another key or owner (release it first)");
        return -1;
    }
    return 0;
}

int rlock_reentrant_record(struct rlock_reentrant *l, const char *key, const char *owner,
                           const struct rlock_opts *o, int lease, int64_t start,
                           const struct rlock_fair_ops *fair)
{
    if (l->holds == 0) {
        char *k = strdup(key);
        if (!k)
            return -1;
        struct rlock_watch *w = NULL;
        if (o->ttl_ms == 0) {
            w = rlock_watch_owner(o->watchdog, key, owner, start, o->on_lost, o->lost_arg);
            if (!w) {
                free(k);
                return -1;
            }
        }
        l->key = k;
        snprintf(l->owner, sizeof l->owner, "%s", owner);
        l->watch = w;
        l->fair = fair != NULL;
        if (fair)
            atomic_store_explicit(&fair_ops, fair, memory_order_release);
    }
    l->holds++;
    l->ttl_ms = lease;
    l->acquired_mono_ms = start;
    l->held = 1;
    return 0;
}

enum rlock_status rlock_reentrant_acquire(redisContext *c, struct rlock_reentrant *l,
                                          const char *key, const char *uuid, uint64_t thread_id,
                                          const struct rlock_opts *o)
{
    char owner[RLOCK_OWNER_MAX];
    if (rlock_reentrant_check_args(l, key, uuid, thread_id, o, owner) < 0)
        return RLOCK_ERR;
    if (l->fair) {
        const struct rlock_fair_ops *f = fair_ops_for(l, "acquire");
        return f ? f->reenter(c, l, key, uuid, thread_id, o) : RLOCK_ERR;
    }
    l->err[0] = '\0';

    int lease = o->ttl_ms > 0 ? o->ttl_ms : rlock_watchdog_lease_ms(o->watchdog);
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", lease);
    char *channel = o->wait_ms > 0 ? rlock_channel_name(RLOCK_REDISSON_CHANNEL_PREFIX, key) : NULL;
    struct reentrant_try t = {.c = c, .l = l, .key = key, .owner = owner, .ttl = ttl};
    const char *chv[] = {channel};
    enum rlock_status st = rlock_wait_acquire(o, chv, channel ? 1 : 0, reentrant_try_once, &t);
    free(channel);
    if (st == RLOCK_BUSY) {
        RLOCK_SET_ERR(l, "acquire: held by another owner after waiting %d ms", o->wait_ms);
        return st;
    }
    if (st != RLOCK_OK)
        return st;
    if (rlock_reentrant_record(l, key, owner, o, lease, t.start, NULL) == 0)
        return RLOCK_OK;
    /* Cannot track (or renew) the hold: give it back rather than leak it. */
    const char *argv[] = {key, RLOCK_REDISSON_CHANNEL_PREFIX, "0", ttl, owner};
    char *ch = rlock_channel_name(RLOCK_REDISSON_CHANNEL_PREFIX, key);
    if (ch) {
        argv[1] = ch;
        freeReplyObject(
            rlock_script_run(c, rlock_lua(RLOCK_LUA_REENTRANT_RELEASE), 2, 3, argv, NULL));
        free(ch);
    }
    RLOCK_SET_ERR(l, "acquire: out of memory");
    return RLOCK_ERR;
}

/* Runs the release script for owner on key.  Returns RLOCK_OK with *freed
 * set (1 = lock deleted, 0 = holds remain), RLOCK_NOT_OWNER, or RLOCK_ERR
 * with err filled. */
static enum rlock_status release_script(redisContext *c, const char *key, const char *owner,
                                        int lease, int *freed, char *err, size_t errlen)
{
    char *channel = rlock_channel_name(RLOCK_REDISSON_CHANNEL_PREFIX, key);
    if (!channel) {
        rlock_err_set(err, errlen, "release: out of memory");
        return RLOCK_ERR;
    }
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", lease > 0 ? lease : RLOCK_WATCHDOG_LEASE_MS);
    const char *argv[] = {key, channel, "0", ttl, owner};
    redisReply *r = rlock_script_run(c, rlock_lua(RLOCK_LUA_REENTRANT_RELEASE), 2, 3, argv, NULL);
    free(channel);
    long long n = 0;
    enum rlock_status st = RLOCK_ERR;
    if (rlock_reply_int(c, r, "release", &n, err, errlen) < 0) {
        st = RLOCK_ERR;
    } else if (n < 0) {
        rlock_err_set(err, errlen, "release: not held by %s (expired or another owner's)", owner);
        st = RLOCK_NOT_OWNER;
    } else {
        *freed = n == 1;
        st = RLOCK_OK;
    }
    freeReplyObject(r);
    rlock_count_release(st);
    return st;
}

enum rlock_status rlock_reentrant_release(redisContext *c, struct rlock_reentrant *l)
{
    l->err[0] = '\0';
    if (l->holds <= 0 || !l->key) {
        RLOCK_SET_ERR(l, "release: lock is not held");
        rlock_count_release(RLOCK_NOT_OWNER);
        return RLOCK_NOT_OWNER;
    }
    /* The last hold: stop renewing before the delete, so no renewal races
     * it and reports a loss that never happened. */
    if (l->holds == 1) {
        rlock_watch_stop(l->watch);
        l->watch = NULL;
    }
    int freed = 0;
    enum rlock_status st;
    if (l->fair) {
        const struct rlock_fair_ops *f = fair_ops_for(l, "release");
        st = f ? f->release_hold(c, l, &freed) : RLOCK_ERR;
    } else {
        st = release_script(c, l->key, l->owner, l->ttl_ms, &freed, l->err, sizeof l->err);
    }
    if (st == RLOCK_OK && --l->holds > 0)
        return RLOCK_OK;
    empty(l);
    return st;
}

enum rlock_status rlock_reentrant_release_owner(redisContext *c, const char *key, const char *uuid,
                                                uint64_t thread_id, char *err, size_t errlen)
{
    char owner[RLOCK_OWNER_MAX];
    if (!key || rlock_owner_field(owner, uuid, thread_id) < 0) {
        rlock_err_set(err, errlen, "release: invalid key or owner");
        return RLOCK_ERR;
    }
    rlock_err_set(err, errlen, "%s", "");
    int freed = 0;
    return release_script(c, key, owner, 0, &freed, err, errlen);
}

enum rlock_status rlock_reentrant_extend(redisContext *c, struct rlock_reentrant *l, int ttl_ms)
{
    l->err[0] = '\0';
    if (ttl_ms <= 0) {
        RLOCK_SET_ERR(l, "extend: ttl_ms must be > 0");
        return RLOCK_ERR;
    }
    if (!l->held || !l->key) {
        RLOCK_SET_ERR(l, "extend: lock is not held");
        return RLOCK_NOT_OWNER;
    }
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *argv[] = {l->key, ttl, l->owner};
    int64_t start = rlock_mono_ms();
    redisReply *r = rlock_script_run(c, rlock_lua(RLOCK_LUA_REENTRANT_RENEW), 1, 2, argv, NULL);
    long long ok = 0;
    enum rlock_status st = RLOCK_ERR;
    if (rlock_reply_int(c, r, "extend", &ok, l->err, sizeof l->err) < 0) {
        st = RLOCK_ERR;
    } else if (ok != 1) {
        RLOCK_SET_ERR(l, "extend: the lock expired or has another owner");
        l->held = 0;
        st = RLOCK_NOT_OWNER;
    } else {
        l->ttl_ms = ttl_ms;
        l->acquired_mono_ms = start;
        st = RLOCK_OK;
    }
    freeReplyObject(r);
    return st;
}

int64_t rlock_reentrant_remaining_ms(const struct rlock_reentrant *l)
{
    if (!l->held)
        return 0;
    if (l->watch)
        return rlock_watch_remaining_ms(l->watch);
    return rlock_lease_left_ms(l->ttl_ms, l->acquired_mono_ms);
}

int rlock_reentrant_lost(const struct rlock_reentrant *l)
{
    if (!l->held)
        return 1;
    if (l->watch)
        return rlock_watch_lost(l->watch);
    return rlock_reentrant_remaining_ms(l) == 0;
}
