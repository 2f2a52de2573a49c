/*
 * lock: the simple and multi-key lease lock on Redis (see rlock/rlock.h for
 * the protocol and contract).
 */
#include "rlock/rlock.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlock/cluster.h"
#include "rlock/notify.h"
#include "rlock/resp.h"
#include "rlock/script.h"
#include "rlock/watch.h"

void rlock_empty(struct rlock *l)
{
    rlock_watch_stop(l->watch);
    l->watch = NULL;
    free(l->keys);
    l->keys = NULL;
    l->nkeys = 0;
    memset(l->token, 0, sizeof l->token);
    l->ttl_ms = 0;
    l->acquired_mono_ms = 0;
    l->held = 0;
}

void rlock_clear(struct rlock *l)
{
    rlock_empty(l);
    l->err[0] = '\0';
}

/* Copies keys into l in one allocation, freed with a single free().
 * Returns 0 or -1 on OOM. */
static int copy_keys(struct rlock *l, const char *const *keys, size_t nkeys)
{
    l->keys = rlock_strv_dup(keys, nkeys);
    if (!l->keys)
        return -1;
    l->nkeys = nkeys;
    return 0;
}

/*
 * Runs one of the lock scripts with KEYS = l's keys and ARGV = token, args...
 * Returns RLOCK_OK with *out set to the script's integer reply, or RLOCK_ERR
 * with l->err set (I/O error, error reply, unexpected reply type, OOM).
 */
static enum rlock_status run_lock_script(redisContext *c, struct rlock *l,
                                         const struct rlock_script *s, const char *const *args,
                                         size_t nargs_extra, const char *op, long long *out)
{
    int nargs = 1 + (int)nargs_extra;
    const char **argv = malloc((l->nkeys + 1 + nargs_extra) * sizeof *argv);
    if (!argv) {
        RLOCK_SET_ERR(l, "%s: out of memory", op);
        return RLOCK_ERR;
    }
    for (size_t i = 0; i < l->nkeys; i++)
        argv[i] = l->keys[i];
    argv[l->nkeys] = l->token;
    for (size_t i = 0; i < nargs_extra; i++)
        argv[l->nkeys + 1 + i] = args[i];

    redisReply *r = rlock_script_run(c, s, (int)l->nkeys, nargs, argv, NULL);
    free(argv);
    int rc = rlock_reply_int(c, r, op, out, l->err, sizeof l->err);
    freeReplyObject(r);
    return rc == 0 ? RLOCK_OK : RLOCK_ERR;
}

/* One attempt to take every key of l.  Returns RLOCK_OK, RLOCK_BUSY, or
 * RLOCK_ERR with l->err set. */
static enum rlock_status try_acquire(redisContext *c, struct rlock *l, const char *ttl)
{
    if (l->nkeys > 1) {
        long long n = 0;
        const char *arg[] = {ttl};
        enum rlock_status st =
            run_lock_script(c, l, rlock_lua(RLOCK_LUA_MULTI_ACQUIRE), arg, 1, "acquire", &n);
        if (st != RLOCK_OK)
            return st;
        return n == 1 ? RLOCK_OK : RLOCK_BUSY;
    }

    /* Plain SET NX PX, byte for byte what redsync and node-redlock send. */
    const char *argv[] = {"SET", l->keys[0], l->token, "NX", "PX", ttl};
    redisReply *r = redisCommandArgv(c, 6, argv, NULL);
    enum rlock_status st = RLOCK_ERR;
    if (!r)
        RLOCK_SET_ERR(l, "acquire: %s", c->errstr[0] ? c->errstr : "I/O error");
    else if (r->type == REDIS_REPLY_NIL)
        st = RLOCK_BUSY;
    else if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0)
        st = RLOCK_OK;
    else if (r->type == REDIS_REPLY_ERROR)
        RLOCK_SET_ERR(l, "acquire: %s", r->str);
    else
        RLOCK_SET_ERR(l, "acquire: unexpected reply type %d to SET", r->type);
    freeReplyObject(r);
    return st;
}

struct simple_try {
    redisContext *c;
    struct rlock *l;
    const char *ttl;
    int64_t start; /* when the successful attempt was sent */
};

static enum rlock_status simple_try_once(void *arg, int64_t *busy_ms)
{
    struct simple_try *t = arg;
    (void)busy_ms; /* SET NX does not say how long the holder has left */
    /* The lease may start as soon as Redis sees the request, so its
     * validity counts from before sending, never from the reply. */
    t->start = rlock_mono_ms();
    return try_acquire(t->c, t->l, t->ttl);
}

/* Validates the arguments shared by both acquire calls.  Returns 0, or -1
 * with l->err set. */
static int check_acquire_args(struct rlock *l, const char *const *keys, size_t nkeys,
                              const struct rlock_opts *o)
{
    if (l->keys || l->nkeys) {
        RLOCK_SET_ERR(l, "acquire: lock struct already in use (release or clear it first)");
        return -1;
    }
    if (!o || o->ttl_ms < 0 || (o->ttl_ms == 0 && !o->watchdog) || o->wait_ms < 0) {
        RLOCK_SET_ERR(l, "acquire: invalid options (need ttl_ms > 0 or a watchdog, wait_ms >= 0)");
        return -1;
    }
    /* A script call sends nkeys + 5 words and hiredis counts them in an int. */
    if (!keys || nkeys == 0 || nkeys > (size_t)INT_MAX - 5) {
        RLOCK_SET_ERR(l, "acquire: need between 1 and INT_MAX-5 keys");
        return -1;
    }
    for (size_t i = 0; i < nkeys; i++) {
        if (!keys[i]) {
            RLOCK_SET_ERR(l, "acquire: key %zu is NULL", i);
            return -1;
        }
    }
    /* Duplicates would make release count fewer deletions than keys and
     * report a lost lease that never happened.  Multi-locks are small, so
     * the quadratic check is cheap. */
    for (size_t i = 0; i < nkeys; i++) {
        for (size_t j = i + 1; j < nkeys; j++) {
            if (strcmp(keys[i], keys[j]) == 0) {
                RLOCK_SET_ERR(l, "acquire: duplicate key \"%s\"", keys[i]);
                return -1;
            }
        }
    }
    return 0;
}

enum rlock_status rlock_acquire_multi(redisContext *c, struct rlock *l, const char *const *keys,
                                      size_t nkeys, const struct rlock_opts *o)
{
    if (check_acquire_args(l, keys, nkeys, o) < 0)
        return RLOCK_ERR;
    l->err[0] = '\0';

    if (rlock_token_new(l->token) < 0) {
        RLOCK_SET_ERR(l, "acquire: getrandom: %s", strerror(errno));
        return RLOCK_ERR;
    }

    if (copy_keys(l, keys, nkeys) < 0) {
        rlock_empty(l);
        RLOCK_SET_ERR(l, "acquire: out of memory");
        return RLOCK_ERR;
    }

    int lease = o->ttl_ms > 0 ? o->ttl_ms : rlock_watchdog_lease_ms(o->watchdog);
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", lease);
    /* Release channels are only needed by a waiter; without them (out of
     * memory) it still polls. */
    char **channels =
        o->wait_ms > 0 ? rlock_release_channels((const char *const *)l->keys, l->nkeys) : NULL;
    struct simple_try t = {.c = c, .l = l, .ttl = ttl};
    enum rlock_status st = rlock_wait_acquire(o, (const char *const *)channels,
                                              channels ? l->nkeys : 0, simple_try_once, &t);
    free(channels);
    if (st == RLOCK_OK) {
        l->ttl_ms = lease;
        l->acquired_mono_ms = t.start;
        l->held = 1;
        if (o->ttl_ms > 0)
            return RLOCK_OK;
        l->watch = rlock_watch_tokens(o->watchdog, (const char *const *)l->keys, l->nkeys, l->token,
                                      t.start, o->on_lost, o->lost_arg);
        if (l->watch)
            return RLOCK_OK;
        /* Unrenewed, the lock would silently expire under its holder. */
        (void)rlock_release(c, l);
        RLOCK_SET_ERR(l, "acquire: cannot start the watchdog (out of memory)");
        return RLOCK_ERR;
    }
    if (st == RLOCK_BUSY)
        RLOCK_SET_ERR(l, "acquire: held by another owner after waiting %d ms", o->wait_ms);
    rlock_empty(l);
    return st;
}

enum rlock_status rlock_acquire(redisContext *c, struct rlock *l, const char *key,
                                const struct rlock_opts *o)
{
    return rlock_acquire_multi(c, l, &key, 1, o);
}

/* The release itself: the keys still holding l's token deleted, l left as
 * it was (err aside), so that a cluster's redirect can send it again. */
static enum rlock_status release_keys(redisContext *c, struct rlock *l)
{
    const struct rlock_script *s =
        l->nkeys == 1 ? rlock_lua(RLOCK_LUA_RELEASE) : rlock_lua(RLOCK_LUA_MULTI_RELEASE);
    char **channels = rlock_release_channels((const char *const *)l->keys, l->nkeys);
    long long deleted = 0;
    enum rlock_status st;
    if (!channels) {
        RLOCK_SET_ERR(l, "release: out of memory");
        st = RLOCK_ERR;
    } else {
        st = run_lock_script(c, l, s, (const char *const *)channels, l->nkeys, "release", &deleted);
    }
    free(channels);
    if (st == RLOCK_OK && (deleted < 0 || (unsigned long long)deleted != l->nkeys)) {
        RLOCK_SET_ERR(l, "release: only %lld of %zu keys still held our token", deleted, l->nkeys);
        st = RLOCK_NOT_OWNER;
    }
    return st;
}

/* What both releases do first: 0, or -1 (l empty: RLOCK_NOT_OWNER). */
static int release_start(struct rlock *l)
{
    l->err[0] = '\0';
    if (l->nkeys == 0) {
        RLOCK_SET_ERR(l, "release: lock is not held");
        rlock_count_release(RLOCK_NOT_OWNER);
        return -1;
    }
    /* Stop renewing before deleting: a renewal racing the release would be
     * refused anyway, but then report a loss that never happened. */
    rlock_watch_stop(l->watch);
    l->watch = NULL;
    return 0;
}

enum rlock_status rlock_release(redisContext *c, struct rlock *l)
{
    if (release_start(l) != 0)
        return RLOCK_NOT_OWNER;
    enum rlock_status st = release_keys(c, l);
    rlock_count_release(st);
    rlock_empty(l);
    return st;
}

/* The reply of one pipelined release of l (deleted keys), as
 * release_keys() reads it. */
static enum rlock_status release_reply(redisContext *c, struct rlock *l, const redisReply *r)
{
    long long deleted = 0;
    if (rlock_reply_int(c, r, "release", &deleted, l->err, sizeof l->err) < 0)
        return RLOCK_ERR;
    if (deleted < 0 || (unsigned long long)deleted != l->nkeys) {
        RLOCK_SET_ERR(l, "release: only %lld of %zu keys still held our token", deleted, l->nkeys);
        return RLOCK_NOT_OWNER;
    }
    return RLOCK_OK;
}

int rlock_release_each(redisContext *c, struct rlock *const *ls, size_t n, enum rlock_status *st)
{
    /* Each lock's command: EVALSHA sha (or FCALL name) nkeys keys... token channels... */
    const char ***argv = calloc(n ? n : 1, sizeof *argv);
    char ***channels = calloc(n ? n : 1, sizeof *channels);
    /* a server that lost the script (it did not run) is asked again once
     * every reply is read, alone */
    unsigned char *noscript = calloc(n ? n : 1, 1);
    int io = !argv || !channels || !noscript; /* nothing is sent then */
    for (size_t i = 0; i < n; i++) {
        st[i] = RLOCK_ERR;
        if (release_start(ls[i]) != 0) {
            st[i] = RLOCK_NOT_OWNER;
            continue;
        }
        if (io)
            continue;
        struct rlock *l = ls[i];
        const struct rlock_script *s =
            l->nkeys == 1 ? rlock_lua(RLOCK_LUA_RELEASE) : rlock_lua(RLOCK_LUA_MULTI_RELEASE);
        channels[i] = rlock_release_channels((const char *const *)l->keys, l->nkeys);
        argv[i] = malloc((4 + 2 * l->nkeys) * sizeof *argv[i]);
        if (!channels[i] || !argv[i]) {
            RLOCK_SET_ERR(l, "release: out of memory");
            continue;
        }
        char num[24];
        snprintf(num, sizeof num, "%zu", l->nkeys);
        const char *head[2];
        size_t head_len[2];
        rlock_script_head(s, head, head_len);
        int k = 0;
        argv[i][k++] = head[0];
        argv[i][k++] = head[1];
        argv[i][k++] = num;
        for (size_t j = 0; j < l->nkeys; j++)
            argv[i][k++] = l->keys[j];
        argv[i][k++] = l->token;
        for (size_t j = 0; j < l->nkeys; j++)
            argv[i][k++] = channels[i][j];
        /* hiredis copies the arguments into its buffer now */
        if (redisAppendCommandArgv(c, k, argv[i], NULL) != REDIS_OK)
            io = 1;
        else
            st[i] = RLOCK_BUSY; /* sent: its reply is due */
    }
    for (size_t i = 0; i < n; i++) {
        if (st[i] != RLOCK_BUSY)
            continue;
        redisReply *r = NULL;
        if (io || redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
            io = 1;
            RLOCK_SET_ERR(ls[i], "release: %s", c->errstr[0] ? c->errstr : "I/O error");
            st[i] = RLOCK_ERR;
        } else if (rlock_reply_kind(r) == RLOCK_REPLY_NOSCRIPT) {
            noscript[i] = 1;
        } else {
            st[i] = release_reply(c, ls[i], r);
        }
        if (r)
            freeReplyObject(r);
    }
    int released = 0;
    for (size_t i = 0; i < n; i++) {
        if (st[i] == RLOCK_NOT_OWNER && !ls[i]->keys)
            continue; /* was not held: counted by release_start */
        if (noscript && noscript[i])
            st[i] = io ? RLOCK_ERR : release_keys(c, ls[i]);
        rlock_count_release(st[i]);
        released += st[i] == RLOCK_OK;
        rlock_empty(ls[i]);
    }
    free(noscript);
    for (size_t i = 0; argv && channels && i < n; i++) {
        free(argv[i]);
        free(channels[i]);
    }
    free(argv);
    free(channels);
    return released;
}

static enum rlock_status release_on(redisContext *node, void *arg, const char **why)
{
    struct rlock *l = arg;
    enum rlock_status st = release_keys(node, l);
    *why = l->err;
    return st;
}

enum rlock_status rlock_cluster_release(struct rlock_cluster *c, struct rlock *l)
{
    if (release_start(l) != 0)
        return RLOCK_NOT_OWNER;
    enum rlock_status st =
        rlock_cluster_lock(c, l->keys[0], 0, release_on, l, l->err, sizeof l->err);
    rlock_count_release(st);
    rlock_empty(l);
    return st;
}

enum rlock_status rlock_extend(redisContext *c, struct rlock *l, int ttl_ms)
{
    l->err[0] = '\0';
    if (ttl_ms <= 0) {
        RLOCK_SET_ERR(l, "extend: ttl_ms must be > 0");
        return RLOCK_ERR;
    }
    if (!l->held || l->nkeys == 0) {
        RLOCK_SET_ERR(l, "extend: lock is not held");
        return RLOCK_NOT_OWNER;
    }

    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    int64_t start = rlock_mono_ms();
    const char *arg[] = {ttl};
    long long ok = 0;
    enum rlock_status st =
        run_lock_script(c, l, rlock_lua(RLOCK_LUA_EXTEND), arg, 1, "extend", &ok);
    if (st != RLOCK_OK)
        return st;
    if (ok != 1) {
        RLOCK_SET_ERR(l, "extend: a key expired or is held by another owner");
        l->held = 0;
        return RLOCK_NOT_OWNER;
    }
    l->ttl_ms = ttl_ms;
    l->acquired_mono_ms = start;
    return RLOCK_OK;
}

int64_t rlock_remaining_ms(const struct rlock *l)
{
    if (l->watch)
        return l->held ? rlock_watch_remaining_ms(l->watch) : 0;
    if (!l->held)
        return 0;
    return rlock_lease_left_ms(l->ttl_ms, l->acquired_mono_ms);
}

/* ---- building blocks for the other lock kinds ---- */

int rlock_adopt(struct rlock *l, const char *const *keys, size_t nkeys, const char *token,
                int ttl_ms, int64_t acquired_mono_ms)
{
    if (l->keys || l->nkeys) {
        RLOCK_SET_ERR(l, "adopt: lock struct already in use (release or clear it first)");
        return -1;
    }
    if (!keys || nkeys == 0 || nkeys > (size_t)INT_MAX - 5 || !token ||
        strlen(token) != RLOCK_TOKEN_LEN || ttl_ms <= 0) {
        RLOCK_SET_ERR(l, "adopt: invalid arguments");
        return -1;
    }
    for (size_t i = 0; i < nkeys; i++) {
        if (!keys[i]) {
            RLOCK_SET_ERR(l, "adopt: key %zu is NULL", i);
            return -1;
        }
    }
    if (copy_keys(l, keys, nkeys) < 0) {
        RLOCK_SET_ERR(l, "adopt: out of memory");
        return -1;
    }
    memcpy(l->token, token, RLOCK_TOKEN_LEN + 1);
    l->ttl_ms = ttl_ms;
    l->acquired_mono_ms = acquired_mono_ms;
    l->held = 1;
    l->err[0] = '\0';
    return 0;
}

int rlock_lost(const struct rlock *l)
{
    if (!l->held)
        return 1;
    if (l->watch)
        return rlock_watch_lost(l->watch);
    return rlock_remaining_ms(l) == 0;
}
