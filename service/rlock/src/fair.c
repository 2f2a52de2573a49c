/*
 * fair: FIFO lock with server-clock waiter deadlines (see rlock/fair.h).
 */
#include "rlock/fair.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlock/notify.h"
#include "rlock/script.h"
#include "rlock/watch.h"

static enum rlock_status fair_reenter(redisContext *c, struct rlock_reentrant *l, const char *key,
                                      const char *uuid, uint64_t thread_id,
                                      const struct rlock_opts *o)
{
    return rlock_fair_acquire(c, l, key, uuid, thread_id, o, NULL);
}

/* How rlock_reentrant_acquire() and _release() handle a struct taken here. */
static const struct rlock_fair_ops fair_ops = {
    .reenter = fair_reenter,
    .release_hold = rlock_fair_release_hold,
};

/* The derived names of one fair lock; free with names_free(). */
struct fair_names {
    char *queue;
    char *timeout;
    char *prefix;   /* waiters' channel prefix, "rlock_fair__channel:{key}:" */
    char *redisson; /* Redisson's channel of the key */
};

static void names_free(struct fair_names *n)
{
    free(n->queue);
    free(n->timeout);
    free(n->prefix);
    free(n->redisson);
}

/* Returns 0, or -1 when out of memory (n then holds only NULLs or frees). */
static int names_make(struct fair_names *n, const char *key)
{
    memset(n, 0, sizeof *n);
    n->queue = rlock_channel_name(RLOCK_FAIR_QUEUE_PREFIX, key);
    n->timeout = rlock_channel_name(RLOCK_FAIR_TIMEOUT_PREFIX, key);
    n->redisson = rlock_channel_name(RLOCK_REDISSON_CHANNEL_PREFIX, key);
    char *base = rlock_channel_name(RLOCK_FAIR_CHANNEL_PREFIX, key);
    if (base) {
        size_t len = strlen(base) + 2;
        n->prefix = malloc(len);
        if (n->prefix)
            snprintf(n->prefix, len, "%s:", base);
        free(base);
    }
    if (!n->queue || !n->timeout || !n->prefix || !n->redisson) {
        names_free(n);
        memset(n, 0, sizeof *n);
        return -1;
    }
    return 0;
}

struct fair_try {
    redisContext *c;
    struct rlock_reentrant *l;
    const char *key;
    const char *owner;
    const char *ttl;
    const char *keep;
    const struct fair_names *names;
    int queued; /* an attempt left us in the queue */
    int64_t start;
};

static enum rlock_status fair_try_once(void *arg, int64_t *busy_ms)
{
    struct fair_try *t = arg;
    const char *argv[] = {t->key, t->names->queue, t->names->timeout, t->ttl, t->owner, t->keep};
    t->start = rlock_mono_ms();
    redisReply *r = rlock_script_run(t->c, rlock_lua(RLOCK_LUA_FAIR_ACQUIRE), 3, 3, argv, NULL);
    long long n = 0;
    enum rlock_status st =
        rlock_parse_acquire_reply(r, t->c->errstr, &n, t->l->err, sizeof t->l->err);
    freeReplyObject(r);
    if (st == RLOCK_BUSY) {
        t->queued = 1;
        *busy_ms = n;
    }
    return st;
}

enum rlock_status rlock_fair_acquire(redisContext *c, struct rlock_reentrant *l, const char *key,
                                     const char *uuid, uint64_t thread_id,
                                     const struct rlock_opts *o, const struct rlock_fair_opts *fo)
{
    char owner[RLOCK_OWNER_MAX];
    if (rlock_reentrant_check_args(l, key, uuid, thread_id, o, owner) < 0)
        return RLOCK_ERR;
    if (l->holds > 0 && !l->fair) {
        RLOCK_SET_ERR(l, "acquire: struct holds a non-fair lock");
        return RLOCK_ERR;
    }
    l->err[0] = '\0';

    struct fair_names names;
    if (names_make(&names, key) < 0) {
        RLOCK_SET_ERR(l, "acquire: out of memory");
        return RLOCK_ERR;
    }
    int retry = o->retry_ms > 0 ? o->retry_ms : RLOCK_DEFAULT_RETRY_MS;
    int64_t keep = fo && fo->keep_ms > 0 ? fo->keep_ms : RLOCK_FAIR_KEEP_MS;
    if (keep < 3 * (int64_t)retry)
        keep = 3 * (int64_t)retry;
    int lease = o->ttl_ms > 0 ? o->ttl_ms : rlock_watchdog_lease_ms(o->watchdog);
    char ttl[16], keeps[24];
    snprintf(ttl, sizeof ttl, "%d", lease);
    snprintf(keeps, sizeof keeps, "%lld", (long long)keep);

    /* Each waiter listens on its own channel: release wakes only the head. */
    size_t chlen = strlen(names.prefix) + strlen(owner) + 1;
    char *channel = malloc(chlen);
    if (channel)
        snprintf(channel, chlen, "%s%s", names.prefix, owner);

    struct fair_try t = {
        .c = c, .l = l, .key = key, .owner = owner, .ttl = ttl, .keep = keeps, .names = &names};
    const char *chv[] = {channel};
    enum rlock_status st = rlock_wait_acquire(o, chv, channel ? 1 : 0, fair_try_once, &t);
    free(channel);

    if (st == RLOCK_OK && rlock_reentrant_record(l, key, owner, o, lease, t.start, &fair_ops) < 0) {
        int freed;
        struct rlock_reentrant tmp = {.fair = 1, .ttl_ms = lease};
        snprintf(tmp.owner, sizeof tmp.owner, "%s", owner);
        tmp.key = (char *)key;
        (void)rlock_fair_release_hold(c, &tmp, &freed);
        RLOCK_SET_ERR(l, "acquire: out of memory");
        st = RLOCK_ERR;
    } else if (st != RLOCK_OK && t.queued && !(c->err)) {
        /* Give our place up now rather than making the waiters behind us
         * wait for our deadline to pass on the server. */
        const char *argv[] = {key, names.queue, names.timeout, owner, names.prefix};
        freeReplyObject(rlock_script_run(c, rlock_lua(RLOCK_LUA_FAIR_CANCEL), 3, 2, argv, NULL));
    }
    if (st == RLOCK_BUSY)
        RLOCK_SET_ERR(l, "acquire: still queued after waiting %d ms", o->wait_ms);
    names_free(&names);
    return st;
}

enum rlock_status rlock_fair_release_hold(redisContext *c, struct rlock_reentrant *l, int *freed)
{
    struct fair_names names;
    if (names_make(&names, l->key) < 0) {
        RLOCK_SET_ERR(l, "release: out of memory");
        return RLOCK_ERR;
    }
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", l->ttl_ms > 0 ? l->ttl_ms : RLOCK_WATCHDOG_LEASE_MS);
    const char *argv[] = {l->key, names.queue, names.timeout, names.redisson,
                          ttl,    l->owner,    names.prefix};
    redisReply *r = rlock_script_run(c, rlock_lua(RLOCK_LUA_FAIR_RELEASE), 4, 3, argv, NULL);
    names_free(&names);
    long long n = 0;
    enum rlock_status st = RLOCK_ERR;
    if (rlock_reply_int(c, r, "release", &n, l->err, sizeof l->err) < 0) {
        st = RLOCK_ERR;
    } else if (n < 0) {
        RLOCK_SET_ERR(l, "release: not held by %s (expired or another owner's)", l->owner);
        st = RLOCK_NOT_OWNER;
    } else {
        *freed = n == 1;
        st = RLOCK_OK;
    }
    freeReplyObject(r);
    rlock_count_release(st);
    return st;
}
