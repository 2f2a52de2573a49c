/*
 * fence: fenced acquisition, counter floor and replica check (see
 * rlock/fence.h for the design and the store-side contract).
 */
#include "rlock/fence.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlock/notify.h"
#include "rlock/resp.h"
#include "rlock/script.h"

int rlock_fence_key(char *out, size_t cap, const char *lock_key)
{
    if (!out || cap == 0 || !lock_key)
        return -1;
    /* Redis Cluster hashes only the part between the first '{' and the next
     * '}' when that part is non-empty, else the whole key. */
    const char *open = strchr(lock_key, '{');
    const char *close = open ? strchr(open + 1, '}') : NULL;
    int n;
    if (open && close && close > open + 1)
        n = snprintf(out, cap, "%s%s", lock_key, RLOCK_FENCE_SUFFIX);
    else if (!strpbrk(lock_key, "{}"))
        n = snprintf(out, cap, "{%s}%s", lock_key, RLOCK_FENCE_SUFFIX);
    else
        return -1;
    return n >= 0 && (size_t)n < cap ? 0 : -1;
}

/* Resolves the counter name of a lock into a fresh allocation.  Returns it,
 * or NULL with err set. */
static char *fence_name(const char *lock_key, const char *fence_key, char *err, size_t errlen)
{
    if (fence_key) {
        char *s = strdup(fence_key);
        if (!s)
            rlock_err_set(err, errlen, "out of memory");
        return s;
    }
    if (!lock_key) {
        rlock_err_set(err, errlen, "no lock key");
        return NULL;
    }
    size_t cap = strlen(lock_key) + sizeof RLOCK_FENCE_SUFFIX + 2;
    char *s = malloc(cap);
    if (!s) {
        rlock_err_set(err, errlen, "out of memory");
        return NULL;
    }
    if (rlock_fence_key(s, cap, lock_key) < 0) {
        rlock_err_set(err, errlen, "no fence key for \"%s\": it has a brace but no hash tag",
                      lock_key);
        free(s);
        return NULL;
    }
    return s;
}

/* Validates the arguments of a fenced acquire.  Returns 0, or -1 with l->err. */
static int check_args(struct rlock *l, const char *const *keys, size_t nkeys, const char *fence,
                      const struct rlock_opts *o)
{
    const char *why = NULL;
    if (l->keys || l->nkeys)
        why = "lock struct already in use (release or clear it first)";
    else if (!o || o->ttl_ms <= 0 || o->wait_ms < 0)
        why = "invalid options (need ttl_ms > 0, wait_ms >= 0)";
    else if (!keys || nkeys == 0 || nkeys > (size_t)INT_MAX - 8)
        why = "need at least one key";
    if (why) {
        RLOCK_SET_ERR(l, "acquire: %s", why);
        return -1;
    }
    for (size_t i = 0; i < nkeys; i++) {
        if (!keys[i]) {
            RLOCK_SET_ERR(l, "acquire: key %zu is NULL", i);
            return -1;
        }
        if (strcmp(keys[i], fence) == 0) {
            RLOCK_SET_ERR(l, "acquire: fence key \"%s\" is also a lock key", fence);
            return -1;
        }
        for (size_t j = i + 1; j < nkeys; j++) {
            if (keys[j] && strcmp(keys[i], keys[j]) == 0) {
                RLOCK_SET_ERR(l, "acquire: duplicate key \"%s\"", keys[i]);
                return -1;
            }
        }
    }
    return 0;
}

/*
 * One attempt: runs the fenced acquire script over l's keys plus the fence
 * key.  Returns RLOCK_OK with *fence set, RLOCK_BUSY, or RLOCK_ERR with l->err.
 */
static enum rlock_status try_fenced(redisContext *c, struct rlock *l, const char *fence_key,
                                    const char *ttl, int64_t *fence)
{
    size_t argc = l->nkeys + 3;
    const char **argv = malloc(argc * sizeof *argv);
    if (!argv) {
        RLOCK_SET_ERR(l, "acquire: out of memory");
        return RLOCK_ERR;
    }
    for (size_t i = 0; i < l->nkeys; i++)
        argv[i] = l->keys[i];
    argv[l->nkeys] = fence_key;
    argv[l->nkeys + 1] = l->token;
    argv[l->nkeys + 2] = ttl;
    redisReply *r =
        rlock_script_run(c, rlock_lua(RLOCK_LUA_FENCE_ACQUIRE), (int)l->nkeys + 1, 2, argv, NULL);
    free(argv);

    long long n = 0;
    enum rlock_status st = RLOCK_ERR;
    if (rlock_reply_int(c, r, "acquire", &n, l->err, sizeof l->err) < 0)
        st = RLOCK_ERR;
    else if (n < 0 || n >= RLOCK_FENCE_MAX)
        RLOCK_SET_ERR(l, "acquire: unexpected token %lld from %s", n,
                      rlock_lua(RLOCK_LUA_FENCE_ACQUIRE)->name);
    else if (n == 0)
        st = RLOCK_BUSY;
    else {
        *fence = n;
        st = RLOCK_OK;
    }
    freeReplyObject(r);
    return st;
}

/* What one attempt of the shared waiting loop needs. */
struct fenced_attempt {
    redisContext *c;
    struct rlock *l;
    const char *fence_key;
    const char *ttl;
    int64_t *fence;
    int64_t start; /* rlock_mono_ms() before the successful request was sent */
};

static enum rlock_status fenced_attempt(void *arg, int64_t *busy_ms)
{
    struct fenced_attempt *a = arg;
    (void)busy_ms; /* unknown: the script does not report the holder's ttl */
    /* The lease counts from before the request is sent (see lock.c). */
    a->start = rlock_mono_ms();
    return try_fenced(a->c, a->l, a->fence_key, a->ttl, a->fence);
}

enum rlock_status rlock_acquire_multi_fenced(redisContext *c, struct rlock *l,
                                             const char *const *keys, size_t nkeys,
                                             const char *fence_key, const struct rlock_opts *o,
                                             int64_t *fence)
{
    *fence = 0;
    l->err[0] = '\0';
    char *fname = fence_name(keys && nkeys ? keys[0] : NULL, fence_key, l->err, sizeof l->err);
    if (!fname)
        return RLOCK_ERR;
    if (check_args(l, keys, nkeys, fname, o) < 0) {
        free(fname);
        return RLOCK_ERR;
    }

    /* The struct is filled before the first attempt, so that once Redis has
     * the keys nothing can fail any more (no allocation after success). */
    char token[RLOCK_TOKEN_LEN + 1];
    if (rlock_token_new(token) < 0) {
        RLOCK_SET_ERR(l, "acquire: getrandom: %s", strerror(errno));
        free(fname);
        return RLOCK_ERR;
    }
    if (rlock_adopt(l, keys, nkeys, token, o->ttl_ms, 0) < 0) {
        free(fname);
        return RLOCK_ERR;
    }
    l->held = 0;

    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", o->ttl_ms);
    struct fenced_attempt a = {.c = c, .l = l, .fence_key = fname, .ttl = ttl, .fence = fence};
    /* A waiter is woken when the holder releases (rlock_release() publishes
     * on these); without them (out of memory) it only polls. */
    char **channels = rlock_release_channels(keys, nkeys);
    enum rlock_status st = rlock_wait_acquire(o, (const char *const *)channels,
                                              channels ? nkeys : 0, fenced_attempt, &a);
    free(channels);
    free(fname);
    if (st == RLOCK_OK) {
        l->acquired_mono_ms = a.start;
        l->held = 1;
        return RLOCK_OK;
    }
    if (st == RLOCK_BUSY)
        RLOCK_SET_ERR(l, "acquire: held by another owner after waiting %d ms", o->wait_ms);
    *fence = 0;
    rlock_empty(l);
    return st;
}

enum rlock_status rlock_acquire_fenced(redisContext *c, struct rlock *l, const char *key,
                                       const struct rlock_opts *o, int64_t *fence)
{
    return rlock_acquire_multi_fenced(c, l, &key, 1, NULL, o, fence);
}

enum rlock_status rlock_fence_floor(redisContext *c, const char *lock_key, const char *fence_key,
                                    int64_t seen, char *err, size_t errlen)
{
    rlock_err_set(err, errlen, "%s", "");
    if (seen < 0 || seen >= RLOCK_FENCE_MAX) {
        rlock_err_set(err, errlen, "fence floor: token %" PRId64 " out of range", seen);
        return RLOCK_ERR;
    }
    char *fname = fence_name(lock_key, fence_key, err, errlen);
    if (!fname)
        return RLOCK_ERR;

    char arg[24];
    snprintf(arg, sizeof arg, "%" PRId64, seen);
    const char *argv[] = {fname, arg};
    redisReply *r = rlock_script_run(c, rlock_lua(RLOCK_LUA_FENCE_FLOOR), 1, 1, argv, NULL);
    long long now = 0;
    enum rlock_status st = RLOCK_ERR;
    if (rlock_reply_int(c, r, "fence floor", &now, err, errlen) < 0)
        st = RLOCK_ERR;
    else if (now < seen)
        rlock_err_set(err, errlen, "fence floor: %s is still below %" PRId64, fname, seen);
    else
        st = RLOCK_OK;
    freeReplyObject(r);
    free(fname);
    return st;
}

enum rlock_status rlock_fence_renew(redisContext *c, struct rlock *l, const char *fence_key,
                                    int64_t floor, int64_t *fence)
{
    *fence = 0;
    if (!l->held || l->nkeys == 0 || floor < 0 || floor >= RLOCK_FENCE_MAX) {
        RLOCK_SET_ERR(l, "fence renew: lock not held or floor out of range");
        return RLOCK_ERR;
    }
    char *fname = fence_name(l->keys[0], fence_key, l->err, sizeof l->err);
    if (!fname)
        return RLOCK_ERR;
    const char **argv = calloc(l->nkeys + 3, sizeof *argv);
    if (!argv) {
        free(fname);
        RLOCK_SET_ERR(l, "fence renew: out of memory");
        return RLOCK_ERR;
    }
    char floor_s[24];
    snprintf(floor_s, sizeof floor_s, "%" PRId64, floor);
    for (size_t i = 0; i < l->nkeys; i++)
        argv[i] = l->keys[i];
    argv[l->nkeys] = fname;
    argv[l->nkeys + 1] = l->token;
    argv[l->nkeys + 2] = floor_s;
    redisReply *r =
        rlock_script_run(c, rlock_lua(RLOCK_LUA_FENCE_RENEW), (int)l->nkeys + 1, 2, argv, NULL);
    long long n = 0;
    enum rlock_status st = RLOCK_ERR;
    if (rlock_reply_int(c, r, "fence renew", &n, l->err, sizeof l->err) < 0)
        st = RLOCK_ERR;
    else if (n == 0)
        st = RLOCK_NOT_OWNER;
    else {
        *fence = n;
        st = RLOCK_OK;
    }
    freeReplyObject(r);
    free(argv);
    free(fname);
    return st;
}

enum rlock_status rlock_require_replicas(redisContext *c, struct rlock *l, int numreplicas,
                                         int timeout_ms)
{
    l->err[0] = '\0';
    if (numreplicas <= 0)
        return RLOCK_OK;
    if (!l->held || l->nkeys == 0) {
        RLOCK_SET_ERR(l, "replicas: lock is not held");
        return RLOCK_ERR;
    }
    if (timeout_ms <= 0) {
        /* WAIT 0 would never return without replicas: refuse, and keep the
         * promise that a failed check leaves no lock behind. */
        (void)rlock_release(c, l);
        RLOCK_SET_ERR(l, "replicas: timeout_ms must be > 0; lock released");
        return RLOCK_ERR;
    }
    redisReply *r = redisCommand(c, "WAIT %d %d", numreplicas, timeout_ms);
    if (!r) {
        RLOCK_SET_ERR(l, "replicas: %s", c->errstr[0] ? c->errstr : "I/O error");
        rlock_empty(l);
        return RLOCK_ERR;
    }
    char why[sizeof l->err];
    why[0] = '\0';
    if (r->type == REDIS_REPLY_ERROR)
        rlock_err_set(why, sizeof why, "replicas: %s", r->str);
    else if (r->type != REDIS_REPLY_INTEGER)
        rlock_err_set(why, sizeof why, "replicas: unexpected reply type %d to WAIT", r->type);
    else if (r->integer < numreplicas)
        rlock_err_set(why, sizeof why, "replicas: %lld of %d acknowledged within %d ms", r->integer,
                      numreplicas, timeout_ms);
    freeReplyObject(r);
    if (!why[0])
        return RLOCK_OK;

    /* Too few copies: a failover could hand the lock to someone else, so we
     * give it up rather than work under it. */
    enum rlock_status st = rlock_release(c, l);
    RLOCK_SET_ERR(l, "%.100s; lock %s", why, st == RLOCK_OK ? "released" : "release failed");
    return RLOCK_ERR;
}

/* The reply of one pipelined fenced attempt of l: RLOCK_OK with *fence set,
 * RLOCK_BUSY, or RLOCK_ERR with l->err. */
static enum rlock_status each_reply(redisContext *c, struct rlock *l, redisReply *r, int64_t *fence)
{
    long long n = 0;
    if (rlock_reply_int(c, r, "acquire", &n, l->err, sizeof l->err) < 0)
        return RLOCK_ERR;
    if (n < 0 || n >= RLOCK_FENCE_MAX) {
        RLOCK_SET_ERR(l, "acquire: unexpected token %lld from %s", n,
                      rlock_lua(RLOCK_LUA_FENCE_ACQUIRE)->name);
        return RLOCK_ERR;
    }
    if (n == 0)
        return RLOCK_BUSY;
    *fence = n;
    return RLOCK_OK;
}

int rlock_try_fenced_each(redisContext *c, struct rlock *const *ls, const char *const *keys,
                          const char *const *fence_keys, size_t n, int ttl_ms, int64_t *fences,
                          enum rlock_status *st)
{
    if (!c || !ls || !keys || !fences || !st || ttl_ms <= 0)
        return -1;
    /* What became of each lock: REFUSED before sending (l as it was, its err
     * set), SENT, or NOSCRIPT (the server lost the script, which did not run:
     * asked again alone, by text, once every pipelined reply is read). */
    enum { REFUSED, SENT, NOSCRIPT };
    char **fname = calloc(n ? n : 1, sizeof *fname);
    unsigned char *phase = calloc(n ? n : 1, 1);
    if (!fname || !phase) {
        free(fname);
        free(phase);
        return -1;
    }
    struct rlock_opts o = {.ttl_ms = ttl_ms};
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    /* Every lock is made ready (token, keys copied) before anything is sent,
     * so that once Redis has a key nothing can fail for want of memory. */
    for (size_t i = 0; i < n; i++) {
        fences[i] = 0;
        st[i] = RLOCK_ERR;
        ls[i]->err[0] = '\0';
        fname[i] =
            fence_name(keys[i], fence_keys ? fence_keys[i] : NULL, ls[i]->err, sizeof ls[i]->err);
        char token[RLOCK_TOKEN_LEN + 1];
        if (!fname[i] || check_args(ls[i], &keys[i], 1, fname[i], &o) < 0)
            continue;
        if (rlock_token_new(token) < 0) {
            RLOCK_SET_ERR(ls[i], "acquire: getrandom: %s", strerror(errno));
            continue;
        }
        if (rlock_adopt(ls[i], &keys[i], 1, token, ttl_ms, 0) < 0)
            continue;
        ls[i]->held = 0;
        phase[i] = SENT;
    }
    /* The lease counts from before the request is sent (see lock.c). */
    int64_t start = rlock_mono_ms();
    const struct rlock_script *s = rlock_lua(RLOCK_LUA_FENCE_ACQUIRE);
    const char *head[2];
    size_t head_len[2];
    rlock_script_head(s, head, head_len);
    int io = 0;
    for (size_t i = 0; i < n && !io; i++) {
        if (phase[i] != SENT)
            continue;
        const char *argv[] = {head[0], head[1], "2", ls[i]->keys[0], fname[i], ls[i]->token, ttl};
        /* fails only when memory is short: c->err is set, nothing was sent */
        io = redisAppendCommandArgv(c, 7, argv, NULL) != REDIS_OK;
    }
    for (size_t i = 0; i < n; i++) {
        if (phase[i] != SENT)
            continue;
        redisReply *r = NULL;
        if (io || redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
            io = 1;
            RLOCK_SET_ERR(ls[i], "acquire: %s", c->errstr[0] ? c->errstr : "I/O error");
        } else if (rlock_reply_kind(r) == RLOCK_REPLY_NOSCRIPT) {
            phase[i] = NOSCRIPT;
        } else {
            st[i] = each_reply(c, ls[i], r, &fences[i]);
        }
        if (r)
            freeReplyObject(r);
    }
    int taken = 0;
    for (size_t i = 0; i < n; i++) {
        if (phase[i] == REFUSED)
            continue;
        if (phase[i] == NOSCRIPT) {
            if (io)
                RLOCK_SET_ERR(ls[i], "acquire: %s", c->errstr[0] ? c->errstr : "I/O error");
            else
                st[i] = try_fenced(c, ls[i], fname[i], ttl, &fences[i]);
        }
        rlock_count_acquire(st[i], 0, 0);
        if (st[i] == RLOCK_OK) {
            ls[i]->acquired_mono_ms = start;
            ls[i]->held = 1;
            taken++;
        } else {
            fences[i] = 0;
            rlock_empty(ls[i]);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(fname[i]);
    free(fname);
    free(phase);
    return taken;
}
