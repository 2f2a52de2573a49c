/*
 * async: locks on a libevent loop (see rlock/async.h).
 *
 * Three kinds of objects:
 *  - struct cmd: one script call in flight.  Its completion function runs
 *    exactly once: with the reply, or with an error when its timer fires, the
 *    connection drops, or the client is freed.  The cmd itself lives until
 *    hiredis hands it back (hiredis keeps privdata until it answers or is
 *    freed), so a reply after the timeout finds it and is ignored -- or, for
 *    an acquisition, undone.
 *  - struct acq: one acquisition, retrying on a timer and on notifier wake-ups.
 *  - struct rlock_async_lock: a held lock, reference counted: the user holds
 *    one reference until release/forget, every cmd about it holds one.
 */
#include "rlock/async.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlock/metrics.h"
#include "rlock/notify.h"
#include "rlock/reentrant.h"
#include "rlock/script.h"
#include "rlock/watch.h"

#define UUID_MAX 64
/* A failed renewal is retried after lease / this, while the lease lasts. */
#define RENEW_RETRY_DIVISOR 10

typedef void cmd_fn(void *owner, redisReply *r, const char *err);

struct cmd {
    struct cmd *prev, *next; /* in the client's list while attached */
    struct rlock_async *a;   /* NULL once detached (client freed) */
    struct event *timer;
    cmd_fn *fn;
    void *owner;
    int done; /* fn has run */
    /* An acquisition's cmd: what to release if a late reply took the lock. */
    int undo_reentrant;
    char *undo_key;
    char *undo_owner;
};

struct acq;

struct rlock_async {
    struct event_base *base;
    redisAsyncContext *ac;
    struct rlock_notifier *notifier;
    int op_timeout_ms;
    int lease_ms;
    char uuid[UUID_MAX];
    int closing;
    struct cmd *cmds;
    struct acq *acqs;
    struct rlock_async_lock *locks;
};

struct rlock_async_lock {
    struct rlock_async_lock *prev, *next; /* in the client's list */
    struct rlock_async *a;                /* NULL once the client is freed */
    int refs;
    int user;      /* the user still holds it (not released/forgotten) */
    int reentrant; /* Redisson hash format */
    char *key;
    char *channel;               /* release wake-up channel */
    char owner[RLOCK_OWNER_MAX]; /* token (simple) or owner field (reentrant) */
    int ttl_ms;
    int64_t acquired_mono_ms; /* the lease counts from here */
    int lost;
    int watched;
    int renew_inflight;
    struct event *renew_timer;
    rlock_lost_fn *on_lost;
    void *lost_arg;
};

struct acq {
    struct acq *prev, *next;
    struct rlock_async *a;
    struct rlock_async_lock *l; /* handed to the user on success */
    rlock_async_acquire_fn *fn;
    void *arg;
    int64_t start;
    int64_t deadline;
    int retry_ms;
    uint64_t seed;
    struct event *wake;
    struct rlock_notify_wait *w;
    struct cmd *inflight;
    int64_t sent_at;
    int again;  /* woken while a try was in flight: try again at once */
    int waited; /* found busy at least once */
};

/* ---- list helpers (doubly linked, head pointer) ---- */

#define LIST_ADD(head, x)                                                                          \
    do {                                                                                           \
        (x)->prev = NULL;                                                                          \
        (x)->next = (head);                                                                        \
        if (head)                                                                                  \
            (head)->prev = (x);                                                                    \
        (head) = (x);                                                                              \
    } while (0)

#define LIST_DEL(head, x)                                                                          \
    do {                                                                                           \
        if ((x)->prev)                                                                             \
            (x)->prev->next = (x)->next;                                                           \
        else                                                                                       \
            (head) = (x)->next;                                                                    \
        if ((x)->next)                                                                             \
            (x)->next->prev = (x)->prev;                                                           \
        (x)->prev = (x)->next = NULL;                                                              \
    } while (0)

static struct timeval ms_tv(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* ---- commands ---- */

static void cmd_free(struct cmd *c)
{
    if (c->a)
        LIST_DEL(c->a->cmds, c);
    if (c->timer)
        event_free(c->timer);
    free(c->undo_key);
    free(c->undo_owner);
    free(c);
}

/* Runs c's completion once; later calls are no-ops. */
static void cmd_finish(struct cmd *c, redisReply *r, const char *err)
{
    if (c->done)
        return;
    c->done = 1;
    if (c->timer)
        event_del(c->timer);
    c->fn(c->owner, r, err);
}

static int reply_took_lock(const redisReply *r, int reentrant)
{
    if (!r)
        return 0;
    if (reentrant)
        return r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

static void ignore_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    (void)reply;
    (void)privdata;
}

/* Releases a lock whose acquisition was already reported as failed.
 * Best effort, no callback: if it cannot be sent, the lease expires it. */
static void undo_acquire(redisAsyncContext *ac, const struct cmd *c)
{
    char *channel = rlock_channel_name(c->undo_reentrant ? RLOCK_REDISSON_CHANNEL_PREFIX
                                                         : RLOCK_RELEASE_CHANNEL_PREFIX,
                                       c->undo_key);
    if (!channel)
        return;
    int rc;
    if (c->undo_reentrant) {
        char ttl[16];
        snprintf(ttl, sizeof ttl, "%d", RLOCK_WATCHDOG_LEASE_MS);
        const char *argv[] = {c->undo_key, channel, "0", ttl, c->undo_owner};
        rc = rlock_script_run_async(ac, rlock_lua(RLOCK_LUA_REENTRANT_RELEASE), ignore_reply, NULL,
                                    2, 3, argv, NULL);
    } else {
        const char *argv[] = {c->undo_key, c->undo_owner, channel};
        rc = rlock_script_run_async(ac, rlock_lua(RLOCK_LUA_RELEASE), ignore_reply, NULL, 1, 2,
                                    argv, NULL);
    }
    (void)rc; /* not sent: the lease expires it */
    free(channel);
}

static void cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct cmd *c = privdata;
    redisReply *r = reply;
    if (!c->done) {
        const char *err = NULL;
        if (!r)
            err = ac->errstr[0] ? ac->errstr : "connection lost";
        cmd_finish(c, r, err);
    } else if (c->undo_key && reply_took_lock(r, c->undo_reentrant)) {
        undo_acquire(ac, c);
    }
    cmd_free(c);
}

static void cmd_on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cmd *c = arg;
    char err[64];
    rlock_err_set(err, sizeof err, "timed out after %d ms", c->a ? c->a->op_timeout_ms : 0);
    cmd_finish(c, NULL, err);
}

/* Sends a script with a timeout.  Returns the cmd (owned by hiredis until it
 * answers), or NULL when nothing was sent (fn is then not called). */
static struct cmd *cmd_send(struct rlock_async *a, const struct rlock_script *s, int nkeys,
                            int nargs, const char **argv, cmd_fn *fn, void *owner)
{
    if (!a || a->closing || !a->ac)
        return NULL;
    struct cmd *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fn = fn;
    c->owner = owner;
    c->timer = evtimer_new(a->base, cmd_on_timeout, c);
    if (!c->timer) {
        free(c);
        return NULL;
    }
    if (rlock_script_run_async(a->ac, s, cmd_on_reply, c, nkeys, nargs, argv, NULL) != 0) {
        event_free(c->timer);
        free(c);
        return NULL;
    }
    c->a = a;
    LIST_ADD(a->cmds, c);
    struct timeval tv = ms_tv(a->op_timeout_ms);
    evtimer_add(c->timer, &tv);
    return c;
}

/* ---- locks ---- */

static void lock_unref(struct rlock_async_lock *l)
{
    if (--l->refs > 0)
        return;
    if (l->a)
        LIST_DEL(l->a->locks, l);
    if (l->renew_timer)
        event_free(l->renew_timer);
    free(l->key);
    free(l->channel);
    free(l);
}

static void lock_stop_watchdog(struct rlock_async_lock *l)
{
    l->watched = 0;
    if (l->renew_timer)
        event_del(l->renew_timer);
}

static void lock_mark_lost(struct rlock_async_lock *l)
{
    if (l->lost)
        return;
    l->lost = 1;
    lock_stop_watchdog(l);
    rlock_metrics_add(RLOCK_M_LOST, 1);
    if (l->on_lost)
        l->on_lost(l->key, l->lost_arg);
}

static void renew_schedule(struct rlock_async_lock *l, int64_t delay_ms)
{
    if (!l->watched || !l->renew_timer)
        return;
    struct timeval tv = ms_tv(delay_ms);
    evtimer_add(l->renew_timer, &tv);
}

struct renew_ctx {
    struct rlock_async_lock *l;
    int64_t sent_at;
    int ttl_ms;
    int watchdog;
    rlock_async_done_fn *fn; /* extend only */
    void *arg;
};

static void renew_done(void *owner, redisReply *r, const char *err)
{
    struct renew_ctx *x = owner;
    struct rlock_async_lock *l = x->l;
    enum rlock_status st = RLOCK_ERR;
    char msg[128] = "";
    if (err)
        rlock_err_set(msg, sizeof msg, "extend: %s", err);
    else if (r->type == REDIS_REPLY_ERROR)
        rlock_err_set(msg, sizeof msg, "extend: %s", r->str);
    else if (r->type != REDIS_REPLY_INTEGER)
        rlock_err_set(msg, sizeof msg, "extend: unexpected reply type %d", r->type);
    else if (r->integer == 1)
        st = RLOCK_OK;
    else {
        st = RLOCK_NOT_OWNER;
        rlock_err_set(msg, sizeof msg, "extend: the lock expired or has another owner");
    }

    if (x->watchdog)
        l->renew_inflight = 0;
    if (st == RLOCK_OK) {
        if (!l->lost) {
            l->ttl_ms = x->ttl_ms;
            l->acquired_mono_ms = x->sent_at;
        }
        if (x->watchdog) {
            rlock_metrics_add(RLOCK_M_RENEWED, 1);
            renew_schedule(l, x->ttl_ms / 3);
        }
    } else if (st == RLOCK_NOT_OWNER) {
        if (l->user)
            lock_mark_lost(l);
    } else if (x->watchdog && l->user && l->watched) {
        /* Redis did not answer: keep trying while the lease lasts. */
        if (rlock_async_remaining_ms(l) == 0)
            lock_mark_lost(l);
        else
            renew_schedule(l, l->ttl_ms / RENEW_RETRY_DIVISOR);
    }
    if (x->fn)
        x->fn(st, msg, x->arg);
    free(x);
    lock_unref(l);
}

/* Sends a renewal of l to ttl_ms.  Returns 0, or -1 if nothing was sent. */
static int renew_send(struct rlock_async_lock *l, int ttl_ms, int watchdog, rlock_async_done_fn *fn,
                      void *arg)
{
    struct renew_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return -1;
    x->l = l;
    x->ttl_ms = ttl_ms;
    x->watchdog = watchdog;
    x->fn = fn;
    x->arg = arg;
    x->sent_at = rlock_mono_ms();
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    struct cmd *c;
    if (l->reentrant) {
        const char *argv[] = {l->key, ttl, l->owner};
        c = cmd_send(l->a, rlock_lua(RLOCK_LUA_REENTRANT_RENEW), 1, 2, argv, renew_done, x);
    } else {
        const char *argv[] = {l->key, l->owner, ttl};
        c = cmd_send(l->a, rlock_lua(RLOCK_LUA_EXTEND), 1, 2, argv, renew_done, x);
    }
    if (!c) {
        free(x);
        return -1;
    }
    l->refs++;
    return 0;
}

static void renew_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rlock_async_lock *l = arg;
    if (!l->watched || l->lost || l->renew_inflight)
        return;
    if (renew_send(l, l->ttl_ms, 1, NULL, NULL) == 0) {
        l->renew_inflight = 1;
    } else if (rlock_async_remaining_ms(l) == 0) {
        lock_mark_lost(l);
    } else {
        renew_schedule(l, l->ttl_ms / RENEW_RETRY_DIVISOR);
    }
}

/* ---- acquisition ---- */

static void acq_try(struct acq *q);
static void acq_notified(void *arg);

static void acq_finish(struct acq *q, enum rlock_status st, const char *err)
{
    struct rlock_async *a = q->a;
    LIST_DEL(a->acqs, q);
    rlock_notify_unwatch(q->w); /* after this the notifier never touches q */
    q->w = NULL;
    event_free(q->wake);

    rlock_count_acquire(st, q->waited, q->waited ? rlock_mono_ms() - q->start : 0);
    struct rlock_async_lock *l = q->l;
    if (st == RLOCK_OK) {
        l->user = 1;
        l->refs++;
        LIST_ADD(a->locks, l);
        l->a = a;
        if (l->watched)
            renew_schedule(l, l->ttl_ms / 3);
    }
    rlock_async_acquire_fn *fn = q->fn;
    void *arg = q->arg;
    free(q);
    fn(st, st == RLOCK_OK ? l : NULL, err ? err : "", arg);
    lock_unref(l); /* the acquisition's reference */
}

static void acq_reply(void *owner, redisReply *r, const char *err)
{
    struct acq *q = owner;
    struct rlock_async_lock *l = q->l;
    q->inflight = NULL;
    char msg[160];
    if (err) {
        rlock_err_set(msg, sizeof msg, "acquire: %s", err);
        acq_finish(q, RLOCK_ERR, msg);
        return;
    }
    enum rlock_status st;
    long long busy_ms = -1;
    if (l->reentrant) {
        st = rlock_parse_acquire_reply(r, NULL, &busy_ms, msg, sizeof msg);
    } else if (r->type == REDIS_REPLY_INTEGER) {
        st = r->integer == 1 ? RLOCK_OK : RLOCK_BUSY;
    } else {
        st = RLOCK_ERR;
        if (r->type == REDIS_REPLY_ERROR)
            rlock_err_set(msg, sizeof msg, "acquire: %s", r->str);
        else
            rlock_err_set(msg, sizeof msg, "acquire: unexpected reply type %d", r->type);
    }
    if (st == RLOCK_OK) {
        l->acquired_mono_ms = q->sent_at;
        acq_finish(q, RLOCK_OK, NULL);
        return;
    }
    if (st != RLOCK_BUSY) {
        acq_finish(q, st, msg);
        return;
    }
    int64_t now = rlock_mono_ms();
    if (now >= q->deadline || q->a->closing) {
        acq_finish(q, RLOCK_BUSY, "acquire: held by another owner when the wait expired");
        return;
    }
    q->waited = 1;
    if (!q->w) {
        struct rlock_notifier *n = q->a->notifier ? q->a->notifier : rlock_notifier_default();
        const char *ch[] = {l->channel};
        if (n)
            q->w = rlock_notify_watch(n, ch, 1, acq_notified, q);
    }
    if (q->again) {
        q->again = 0;
        acq_try(q);
        return;
    }
    int64_t pause = rlock_jitter_pause(&q->seed, q->retry_ms);
    if (busy_ms >= 0 && busy_ms + 1 < pause)
        pause = busy_ms + 1;
    if (now + pause > q->deadline)
        pause = q->deadline - now;
    struct timeval tv = ms_tv(pause);
    evtimer_add(q->wake, &tv);
}

/* Sends one attempt; on failure to send ends the acquisition. */
static void acq_try(struct acq *q)
{
    struct rlock_async_lock *l = q->l;
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", l->ttl_ms);
    q->sent_at = rlock_mono_ms();
    struct cmd *c;
    if (l->reentrant) {
        const char *argv[] = {l->key, ttl, l->owner};
        c = cmd_send(q->a, rlock_lua(RLOCK_LUA_REENTRANT_ACQUIRE), 1, 2, argv, acq_reply, q);
    } else {
        const char *argv[] = {l->key, l->owner, ttl};
        c = cmd_send(q->a, rlock_lua(RLOCK_LUA_MULTI_ACQUIRE), 1, 2, argv, acq_reply, q);
    }
    if (!c) {
        acq_finish(q, RLOCK_ERR, "acquire: cannot send (disconnected or out of memory)");
        return;
    }
    c->undo_reentrant = l->reentrant;
    c->undo_key = strdup(l->key);
    c->undo_owner = strdup(l->owner);
    q->inflight = c;
}

/* The wake event: a timer, or activated by the notifier's thread. */
static void acq_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct acq *q = arg;
    event_del(q->wake); /* a wake-up by message supersedes the pending timer */
    if (q->inflight) {
        q->again = 1;
        return;
    }
    acq_try(q);
}

/* Notifier callback (notifier thread, its lock held): wake the loop.  The
 * event stays valid: acq_finish() unwatches before freeing it. */
static void acq_notified(void *arg)
{
    struct acq *q = arg;
    event_active(q->wake, EV_TIMEOUT, 1);
}

/* ---- public API ---- */

struct rlock_async *rlock_async_new(struct event_base *base, const struct rlock_async_opts *o)
{
    if (!base || !o || o->op_timeout_ms <= 0 || (o->lease_ms > 0 && o->lease_ms < 30))
        return NULL;
    const char *uuid = o->uuid ? o->uuid : rlock_process_uuid();
    if (!uuid || strlen(uuid) >= UUID_MAX)
        return NULL;
    struct rlock_async *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->base = base;
    a->notifier = o->notifier;
    a->op_timeout_ms = o->op_timeout_ms;
    a->lease_ms = o->lease_ms > 0 ? o->lease_ms : RLOCK_WATCHDOG_LEASE_MS;
    snprintf(a->uuid, sizeof a->uuid, "%s", uuid);
    return a;
}

void rlock_async_set_context(struct rlock_async *a, redisAsyncContext *ac)
{
    a->ac = ac;
}

void rlock_async_free(struct rlock_async *a)
{
    if (!a)
        return;
    a->closing = 1;
    /* Every pending completion runs now (acquisitions end, releases and
     * extends report RLOCK_ERR).  Completions may add or free objects, so
     * restart from the head each time. */
    for (;;) {
        struct cmd *c = a->cmds;
        while (c && c->done)
            c = c->next;
        if (!c)
            break;
        cmd_finish(c, NULL, "cancelled: client freed");
    }
    /* Acquisitions sleeping between tries. */
    while (a->acqs)
        acq_finish(a->acqs, RLOCK_ERR, "acquire: cancelled: client freed");
    /* Commands still inside hiredis: detach (their late replies are ignored
     * or undone without the client). */
    while (a->cmds) {
        struct cmd *c = a->cmds;
        LIST_DEL(a->cmds, c);
        c->a = NULL;
        if (c->timer) {
            event_free(c->timer);
            c->timer = NULL;
        }
    }
    /* Locks the user still holds: no more renewals; forget() frees them. */
    while (a->locks) {
        struct rlock_async_lock *l = a->locks;
        LIST_DEL(a->locks, l);
        lock_stop_watchdog(l);
        l->a = NULL;
    }
    free(a);
}

int rlock_async_acquire(struct rlock_async *a, const struct rlock_async_req *r,
                        rlock_async_acquire_fn *fn, void *arg)
{
    if (!a || a->closing || !a->ac || !r || !r->key || !fn || r->ttl_ms < 0 || r->wait_ms < 0 ||
        (r->reentrant && r->thread_id == 0))
        return -1;
    struct rlock_async_lock *l = calloc(1, sizeof *l);
    struct acq *q = calloc(1, sizeof *q);
    if (!l || !q)
        goto fail;
    l->refs = 1; /* the acquisition's */
    l->reentrant = r->reentrant ? 1 : 0;
    l->ttl_ms = r->ttl_ms > 0 ? r->ttl_ms : a->lease_ms;
    l->watched = r->ttl_ms == 0;
    l->on_lost = r->on_lost;
    l->lost_arg = r->lost_arg;
    l->key = strdup(r->key);
    l->channel = rlock_channel_name(
        l->reentrant ? RLOCK_REDISSON_CHANNEL_PREFIX : RLOCK_RELEASE_CHANNEL_PREFIX, r->key);
    if (!l->key || !l->channel)
        goto fail;
    if (l->reentrant) {
        if (rlock_owner_field(l->owner, a->uuid, r->thread_id) < 0)
            goto fail;
    } else if (rlock_token_new(l->owner) < 0) {
        goto fail;
    }
    l->renew_timer = evtimer_new(a->base, renew_timer_cb, l);
    q->wake = evtimer_new(a->base, acq_wake, q);
    if (!l->renew_timer || !q->wake)
        goto fail;

    q->a = a;
    q->l = l;
    q->fn = fn;
    q->arg = arg;
    q->start = rlock_mono_ms();
    q->deadline = q->start + r->wait_ms;
    q->retry_ms = r->retry_ms > 0 ? r->retry_ms : RLOCK_DEFAULT_RETRY_MS;
    q->seed = rlock_jitter_seed();

    struct cmd *c;
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", l->ttl_ms);
    q->sent_at = q->start;
    if (l->reentrant) {
        const char *argv[] = {l->key, ttl, l->owner};
        c = cmd_send(a, rlock_lua(RLOCK_LUA_REENTRANT_ACQUIRE), 1, 2, argv, acq_reply, q);
    } else {
        const char *argv[] = {l->key, l->owner, ttl};
        c = cmd_send(a, rlock_lua(RLOCK_LUA_MULTI_ACQUIRE), 1, 2, argv, acq_reply, q);
    }
    if (!c)
        goto fail;
    c->undo_reentrant = l->reentrant;
    c->undo_key = strdup(l->key);
    c->undo_owner = strdup(l->owner);
    q->inflight = c;
    LIST_ADD(a->acqs, q);
    return 0;

fail:
    if (q && q->wake)
        event_free(q->wake);
    free(q);
    if (l) {
        if (l->renew_timer)
            event_free(l->renew_timer);
        free(l->key);
        free(l->channel);
        free(l);
    }
    return -1;
}

struct release_ctx {
    struct rlock_async_lock *l;
    rlock_async_done_fn *fn;
    void *arg;
};

static void release_done(void *owner, redisReply *r, const char *err)
{
    struct release_ctx *x = owner;
    struct rlock_async_lock *l = x->l;
    enum rlock_status st = RLOCK_ERR;
    char msg[160] = "";
    if (err)
        rlock_err_set(msg, sizeof msg, "release: %s", err);
    else if (r->type == REDIS_REPLY_ERROR)
        rlock_err_set(msg, sizeof msg, "release: %s", r->str);
    else if (r->type != REDIS_REPLY_INTEGER)
        rlock_err_set(msg, sizeof msg, "release: unexpected reply type %d", r->type);
    else if (l->reentrant ? r->integer >= 0 : r->integer == 1)
        st = RLOCK_OK;
    else {
        st = RLOCK_NOT_OWNER;
        rlock_err_set(msg, sizeof msg, "release: not held any more (expired or another owner's)");
    }
    rlock_count_release(st);
    if (x->fn)
        x->fn(st, msg, x->arg);
    free(x);
    lock_unref(l);
}

int rlock_async_release(struct rlock_async_lock *l, rlock_async_done_fn *fn, void *arg)
{
    if (!l || !l->user || !l->a)
        return -1;
    struct release_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return -1;
    x->l = l;
    x->fn = fn;
    x->arg = arg;
    struct cmd *c;
    if (l->reentrant) {
        char ttl[16];
        snprintf(ttl, sizeof ttl, "%d", l->ttl_ms);
        const char *argv[] = {l->key, l->channel, "0", ttl, l->owner};
        c = cmd_send(l->a, rlock_lua(RLOCK_LUA_REENTRANT_RELEASE), 2, 3, argv, release_done, x);
    } else {
        const char *argv[] = {l->key, l->owner, l->channel};
        c = cmd_send(l->a, rlock_lua(RLOCK_LUA_RELEASE), 1, 2, argv, release_done, x);
    }
    if (!c) {
        free(x);
        return -1;
    }
    l->refs++; /* the cmd's */
    lock_stop_watchdog(l);
    l->user = 0;
    lock_unref(l); /* the user's */
    return 0;
}

int rlock_async_extend(struct rlock_async_lock *l, int ttl_ms, rlock_async_done_fn *fn, void *arg)
{
    if (!l || !l->user || !l->a || ttl_ms <= 0)
        return -1;
    return renew_send(l, ttl_ms, 0, fn, arg);
}

int rlock_async_lost(const struct rlock_async_lock *l)
{
    return rlock_async_remaining_ms(l) == 0;
}

int64_t rlock_async_remaining_ms(const struct rlock_async_lock *l)
{
    if (l->lost)
        return 0;
    return rlock_lease_left_ms(l->ttl_ms, l->acquired_mono_ms);
}

const char *rlock_async_key(const struct rlock_async_lock *l)
{
    return l->key;
}

void rlock_async_forget(struct rlock_async_lock *l)
{
    if (!l || !l->user)
        return;
    lock_stop_watchdog(l);
    l->user = 0;
    lock_unref(l);
}
