/*
 * async: locks on a libevent loop (see rlock/async.h).
 *
 * Three kinds of objects:
 *  - struct cmd: one command in flight.  Its completion function runs
 *    exactly once: with the reply, or with an error when its deadline
 *    passes, the connection drops, or the client is freed.  The cmd itself
 *    lives until hiredis hands it back (hiredis keeps privdata until it
 *    answers or is freed), so a reply after the deadline finds it and is
 *    ignored -- or, for an acquisition, undone.
 *  - struct acq: one acquisition, retrying on a timer and on notifier
 *    wake-ups; it lives inside the lock it acquires.
 *  - struct rlock_async_lock: a lock, reference counted: the acquisition
 *    holds one reference, the user one from success until release/forget,
 *    every cmd about it one until hiredis hands the cmd back.  Its key,
 *    release channel and owner are in the same allocation.
 *
 * What one acquire + release costs is what this file is about (the bench,
 * bench/rlock_bench.c, measures it): two allocations of ours (the lock, then
 * one cmd per command), commands written straight into the wire format
 * (redisAsyncFormattedCommand(): no hiredis argv formatting), a plain
 * SET NX PX for the simple lock, and no timer per command.
 *
 * Deadlines: every command gets the same op_timeout_ms, so commands sent
 * later time out later and the client's in-flight list, appended at the
 * tail, is always in deadline order.  One timer per client is armed for the
 * oldest command's deadline; when it fires it fails every command whose
 * deadline has passed (moving each to the "late" list, where it waits for
 * hiredis to hand it back) and re-arms itself for the new oldest.  Replies
 * never touch the timer: a timer that fires for a command already answered
 * just re-arms, about once per op_timeout_ms while commands flow.
 */
#include "rlock/async.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlock/metrics.h"
#include "rlock/notify.h"
#include "rlock/reentrant.h"
#include "rlock/resp.h"
#include "rlock/script.h"
#include "rlock/watch.h"

#define UUID_MAX 64
/* A failed renewal is retried after lease / this, while the lease lasts. */
#define RENEW_RETRY_DIVISOR 10
/* Commands up to this many bytes are formatted on the stack. */
#define CMD_STACK_BYTES 1024
/* Most arguments a command of this file has (SET's 6; a script's keys and arguments, 5). */
#define CMD_MAX_ARGS 8

enum op {
    OP_ACQUIRE, /* simple: SET NX PX; reentrant: reentrant_acquire.lua */
    OP_RELEASE, /* release.lua / reentrant_release.lua */
    OP_RENEW,   /* extend.lua / reentrant_renew.lua (watchdog and extend) */
};

struct cmd;
typedef void cmd_fn(struct cmd *c, redisReply *r, const char *err);

struct cmd {
    struct cmd *prev, *next;    /* in the client's pending or late list while attached */
    struct rlock_async *a;      /* NULL once detached (client freed) */
    struct rlock_async_lock *l; /* the lock it is about (a reference) */
    cmd_fn *fn;
    int64_t sent_at;  /* rlock_mono_ms() before it was sent */
    int64_t deadline; /* sent_at + op_timeout_ms */
    enum op op;
    int ttl_ms;   /* the ttl it sends (acquire, release of a reentrant lock, renew) */
    int watchdog; /* renew: sent by the watchdog rather than rlock_async_extend() */
    int done;     /* fn has run */
    int late;     /* in the late list (timed out or cancelled, still inside hiredis) */
    int retried;  /* NOSCRIPT answered: sent again as EVAL */
    rlock_async_done_fn *user_fn; /* release and extend */
    void *user_arg;
};

struct rlock_async {
    struct event_base *base;
    redisAsyncContext *ac;
    struct rlock_notifier *notifier;
    int op_timeout_ms;
    int lease_ms;
    char uuid[UUID_MAX];
    int closing;
    int in_timer;        /* the deadline timer's callback is running */
    int free_late;       /* rlock_async_free() ran inside it: the callback frees */
    struct event *timer; /* the one deadline timer */
    int timer_armed;     /* pending, for pending's head (or earlier) */
    struct cmd *pending; /* not done, oldest (earliest deadline) first */
    struct cmd *pending_tail;
    struct cmd *late; /* done, still inside hiredis */
    struct acq *acqs;
    struct rlock_async_lock *locks;
};

struct acq {
    struct acq *prev, *next;
    struct rlock_async *a;
    rlock_async_acquire_fn *fn;
    void *arg;
    int64_t start;
    int64_t deadline;
    int retry_ms;
    uint64_t seed;      /* 0 until the first busy answer */
    struct event *wake; /* created at the first busy answer */
    struct rlock_notify_wait *w;
    struct cmd *inflight;
    int again;  /* woken while a try was in flight: try again at once */
    int waited; /* found busy at least once */
};

struct rlock_async_lock {
    struct rlock_async_lock *prev, *next; /* in the client's list */
    struct rlock_async *a;                /* NULL until acquired and once the client is freed */
    int refs;
    int user;      /* the user still holds it (not released/forgotten) */
    int reentrant; /* Redisson hash format */
    char *key;     /* in this allocation, after the struct */
    char *channel; /* release wake-up channel, also in this allocation */
    size_t key_len, channel_len, owner_len;
    char owner[RLOCK_OWNER_MAX]; /* token (simple) or owner field (reentrant) */
    int ttl_ms;
    int64_t acquired_mono_ms; /* the lease counts from here */
    int lost;
    int watched;
    int renew_inflight;
    struct event *renew_timer; /* watched locks only */
    rlock_lost_fn *on_lost;
    void *lost_arg;
    struct acq acq; /* while acquiring */
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

/* ---- locks ---- */

static void lock_unref(struct rlock_async_lock *l)
{
    if (--l->refs > 0)
        return;
    if (l->a)
        LIST_DEL(l->a->locks, l);
    if (l->renew_timer)
        event_free(l->renew_timer);
    free(l);
}

/* ---- commands: the wire format ---- */

static void cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Sends c's command on ac: by EVALSHA (FCALL for a function), or by EVAL
 * when eval is set (the script was missing); the simple lock's acquire is a
 * plain SET NX PX.  Written straight into the wire format, on the stack
 * when it fits.  Returns REDIS_OK, or REDIS_ERR when it could not be queued
 * (or memory is short for a long command). */
static int cmd_write(redisAsyncContext *ac, struct cmd *c, int eval)
{
    struct rlock_async_lock *l = c->l;
    char ttl[RLOCK_RESP_DIGITS_MAX];
    size_t ttl_len = rlock_resp_u64(ttl, (uint64_t)(c->ttl_ms > 0 ? c->ttl_ms : 0));
    const char *v[CMD_MAX_ARGS];
    size_t n[CMD_MAX_ARGS];
    int argc = 0, nkeys = 1;
    const struct rlock_script *s = NULL;

#define ARG(str, len) (v[argc] = (str), n[argc] = (len), argc++)
    switch (c->op) {
    case OP_ACQUIRE:
        if (!l->reentrant) {
            /* Byte for byte what redsync and node-redlock send. */
            ARG("SET", 3);
            ARG(l->key, l->key_len);
            ARG(l->owner, l->owner_len);
            ARG("NX", 2);
            ARG("PX", 2);
            ARG(ttl, ttl_len);
            break;
        }
        s = rlock_lua(RLOCK_LUA_REENTRANT_ACQUIRE);
        ARG(l->key, l->key_len);
        ARG(ttl, ttl_len);
        ARG(l->owner, l->owner_len);
        break;
    case OP_RELEASE:
        if (l->reentrant) {
            s = rlock_lua(RLOCK_LUA_REENTRANT_RELEASE);
            nkeys = 2;
            ARG(l->key, l->key_len);
            ARG(l->channel, l->channel_len);
            ARG("0", 1);
            ARG(ttl, ttl_len);
            ARG(l->owner, l->owner_len);
        } else {
            s = rlock_lua(RLOCK_LUA_RELEASE);
            ARG(l->key, l->key_len);
            ARG(l->owner, l->owner_len);
            ARG(l->channel, l->channel_len);
        }
        break;
    case OP_RENEW:
    default:
        if (l->reentrant) {
            s = rlock_lua(RLOCK_LUA_REENTRANT_RENEW);
            ARG(l->key, l->key_len);
            ARG(ttl, ttl_len);
            ARG(l->owner, l->owner_len);
        } else {
            s = rlock_lua(RLOCK_LUA_EXTEND);
            ARG(l->key, l->key_len);
            ARG(l->owner, l->owner_len);
            ARG(ttl, ttl_len);
        }
        break;
    }
#undef ARG
    size_t total = s ? rlock_script_head_bytes(s, eval, argc) +
                           rlock_script_args_bytes(nkeys, argc - nkeys, v, n)
                     : rlock_resp_argv_bytes(argc, v, n);
    char stack[CMD_STACK_BYTES];
    char *buf = total <= sizeof stack ? stack : malloc(total);
    if (!buf)
        return REDIS_ERR;
    char *end = s ? rlock_script_write_args(rlock_script_write_head(buf, s, eval, argc), nkeys,
                                            argc - nkeys, v, n)
                  : rlock_resp_argv(buf, argc, v, n);
    int rc = redisAsyncFormattedCommand(ac, cmd_on_reply, c, buf, (size_t)(end - buf));
    if (buf != stack)
        free(buf);
    return rc;
}

/* ---- commands: lifetime and deadlines ---- */

static void cmd_unlink(struct cmd *c)
{
    struct rlock_async *a = c->a;
    if (!a)
        return;
    if (c->late) {
        LIST_DEL(a->late, c);
        return;
    }
    if (a->pending_tail == c)
        a->pending_tail = c->prev;
    LIST_DEL(a->pending, c);
}

static void cmd_free(struct cmd *c)
{
    cmd_unlink(c);
    lock_unref(c->l);
    free(c);
}

/* Runs c's completion once; later calls are no-ops. */
static void cmd_finish(struct cmd *c, redisReply *r, const char *err)
{
    if (c->done)
        return;
    c->done = 1;
    c->fn(c, r, err);
}

/* Ends c with err while hiredis still has it: it moves to the late list,
 * where its reply (if any) is ignored or undone. */
static void cmd_fail_early(struct cmd *c, const char *err)
{
    struct rlock_async *a = c->a;
    cmd_unlink(c);
    c->late = 1;
    LIST_ADD(a->late, c);
    cmd_finish(c, NULL, err);
}

static int reply_took_lock(const redisReply *r, int reentrant)
{
    if (!r)
        return 0;
    if (reentrant)
        return r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
    return r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0;
}

static void ignore_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    (void)reply;
    (void)privdata;
}

/* Releases a lock whose acquisition was already reported as failed.
 * Best effort, no callback: if it cannot be sent, the lease expires it. */
static void undo_acquire(redisAsyncContext *ac, const struct rlock_async_lock *l)
{
    int rc;
    if (l->reentrant) {
        char ttl[16];
        snprintf(ttl, sizeof ttl, "%d", RLOCK_WATCHDOG_LEASE_MS);
        const char *argv[] = {l->key, l->channel, "0", ttl, l->owner};
        rc = rlock_script_run_async(ac, rlock_lua(RLOCK_LUA_REENTRANT_RELEASE), ignore_reply, NULL,
                                    2, 3, argv, NULL);
    } else {
        const char *argv[] = {l->key, l->owner, l->channel};
        rc = rlock_script_run_async(ac, rlock_lua(RLOCK_LUA_RELEASE), ignore_reply, NULL, 1, 2,
                                    argv, NULL);
    }
    (void)rc; /* not sent: the lease expires it */
}

static void cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct cmd *c = privdata;
    redisReply *r = reply;
    if (!c->done) {
        /* The script is missing (first use, restart, SCRIPT FLUSH): once,
         * the same call with the script's text, under the same deadline. */
        if (!c->retried && rlock_reply_kind(r) == RLOCK_REPLY_NOSCRIPT) {
            c->retried = 1;
            if (cmd_write(ac, c, 1) == REDIS_OK)
                return;
            r = NULL; /* cannot queue (disconnecting): as a cut-off command */
        }
        const char *err = NULL;
        if (!r)
            err = ac->errstr[0] ? ac->errstr : "connection lost";
        cmd_finish(c, r, err);
    } else if (c->op == OP_ACQUIRE && reply_took_lock(r, c->l->reentrant)) {
        undo_acquire(ac, c->l);
    }
    cmd_free(c);
}

static void deadline_arm(struct rlock_async *a, int64_t now)
{
    if (a->timer_armed || !a->pending || a->free_late)
        return;
    struct timeval tv = rlock_ms_tv(a->pending->deadline - now);
    if (evtimer_add(a->timer, &tv) == 0)
        a->timer_armed = 1;
}

static void deadline_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rlock_async *a = arg;
    a->timer_armed = 0;
    a->in_timer = 1;
    int64_t now = rlock_mono_ms();
    char err[64];
    rlock_err_set(err, sizeof err, "timed out after %d ms", a->op_timeout_ms);
    /* Completions may send (appended, later deadlines) or free the client. */
    while (!a->closing && a->pending && a->pending->deadline <= now)
        cmd_fail_early(a->pending, err);
    a->in_timer = 0;
    if (a->free_late) {
        event_free(a->timer);
        free(a);
        return;
    }
    deadline_arm(a, rlock_mono_ms());
}

/* Sends op about l with a deadline.  Returns the cmd (owned by hiredis until
 * it answers), or NULL when nothing was sent (fn is then not called). */
static struct cmd *cmd_send(struct rlock_async *a, struct rlock_async_lock *l, enum op op,
                            int ttl_ms, cmd_fn *fn)
{
    if (!a || a->closing || !a->ac)
        return NULL;
    struct cmd *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->a = a;
    c->l = l;
    c->fn = fn;
    c->op = op;
    c->ttl_ms = ttl_ms;
    c->sent_at = rlock_mono_ms();
    c->deadline = c->sent_at + a->op_timeout_ms;
    if (cmd_write(a->ac, c, 0) != REDIS_OK) {
        free(c);
        return NULL;
    }
    l->refs++; /* the cmd's */
    /* Appended: the list stays in deadline order. */
    c->prev = a->pending_tail;
    c->next = NULL;
    if (a->pending_tail)
        a->pending_tail->next = c;
    else
        a->pending = c;
    a->pending_tail = c;
    deadline_arm(a, c->sent_at);
    return c;
}

/* ---- the watchdog ---- */

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
    struct timeval tv = rlock_ms_tv(delay_ms);
    evtimer_add(l->renew_timer, &tv);
}

static void renew_done(struct cmd *c, redisReply *r, const char *err)
{
    struct rlock_async_lock *l = c->l;
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

    if (c->watchdog)
        l->renew_inflight = 0;
    if (st == RLOCK_OK) {
        if (!l->lost) {
            l->ttl_ms = c->ttl_ms;
            l->acquired_mono_ms = c->sent_at;
        }
        if (c->watchdog) {
            rlock_metrics_add(RLOCK_M_RENEWED, 1);
            renew_schedule(l, c->ttl_ms / 3);
        }
    } else if (st == RLOCK_NOT_OWNER) {
        if (l->user)
            lock_mark_lost(l);
    } else if (c->watchdog && l->user && l->watched) {
        /* Redis did not answer: keep trying while the lease lasts. */
        if (rlock_async_remaining_ms(l) == 0)
            lock_mark_lost(l);
        else
            renew_schedule(l, l->ttl_ms / RENEW_RETRY_DIVISOR);
    }
    if (c->user_fn)
        c->user_fn(st, msg, c->user_arg);
}

/* Sends a renewal of l to ttl_ms.  Returns 0, or -1 if nothing was sent. */
static int renew_send(struct rlock_async_lock *l, int ttl_ms, int watchdog, rlock_async_done_fn *fn,
                      void *arg)
{
    struct cmd *c = cmd_send(l->a, l, OP_RENEW, ttl_ms, renew_done);
    if (!c)
        return -1;
    c->watchdog = watchdog;
    c->user_fn = fn;
    c->user_arg = arg;
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

static void acq_wake(evutil_socket_t fd, short what, void *arg);
static void acq_notified(void *arg);
static void acq_reply(struct cmd *c, redisReply *r, const char *err);

static struct rlock_async_lock *acq_lock(struct acq *q)
{
    return (struct rlock_async_lock *)((char *)q - offsetof(struct rlock_async_lock, acq));
}

static void acq_finish(struct acq *q, enum rlock_status st, const char *err)
{
    struct rlock_async *a = q->a;
    struct rlock_async_lock *l = acq_lock(q);
    LIST_DEL(a->acqs, q);
    rlock_notify_unwatch(q->w); /* after this the notifier never touches q */
    q->w = NULL;
    if (q->wake) {
        event_free(q->wake);
        q->wake = NULL;
    }

    rlock_count_acquire(st, q->waited, q->waited ? rlock_mono_ms() - q->start : 0);
    if (st == RLOCK_OK) {
        l->user = 1;
        l->refs++;
        LIST_ADD(a->locks, l);
        l->a = a;
        if (l->watched)
            renew_schedule(l, l->ttl_ms / 3);
    }
    q->fn(st, st == RLOCK_OK ? l : NULL, err ? err : "", q->arg);
    lock_unref(l); /* the acquisition's reference */
}

/* Sends one attempt.  Returns 0, or -1 when nothing could be sent. */
static int acq_send(struct acq *q)
{
    struct rlock_async_lock *l = acq_lock(q);
    q->inflight = cmd_send(q->a, l, OP_ACQUIRE, l->ttl_ms, acq_reply);
    return q->inflight ? 0 : -1;
}

/* Sends one attempt; on failure to send ends the acquisition. */
static void acq_try(struct acq *q)
{
    if (acq_send(q) != 0)
        acq_finish(q, RLOCK_ERR, "acquire: cannot send (disconnected or out of memory)");
}

static void acq_reply(struct cmd *c, redisReply *r, const char *err)
{
    struct rlock_async_lock *l = c->l;
    struct acq *q = &l->acq;
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
    } else if (reply_took_lock(r, 0)) {
        st = RLOCK_OK;
    } else if (r->type == REDIS_REPLY_NIL) {
        st = RLOCK_BUSY; /* the key exists, whatever its type */
    } else {
        st = RLOCK_ERR;
        if (r->type == REDIS_REPLY_ERROR)
            rlock_err_set(msg, sizeof msg, "acquire: %s", r->str);
        else
            rlock_err_set(msg, sizeof msg, "acquire: unexpected reply type %d", r->type);
    }
    if (st == RLOCK_OK) {
        l->acquired_mono_ms = c->sent_at;
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
    /* Waiting from here on: what the uncontended path never needs. */
    if (!q->wake) {
        q->wake = evtimer_new(q->a->base, acq_wake, q);
        if (!q->wake) {
            acq_finish(q, RLOCK_ERR, "acquire: out of memory");
            return;
        }
        q->seed = rlock_jitter_seed();
    }
    q->waited = 1;
    if (!q->w) {
        struct rlock_notifier *nf = q->a->notifier ? q->a->notifier : rlock_notifier_default();
        const char *ch[] = {l->channel};
        if (nf)
            q->w = rlock_notify_watch(nf, ch, 1, acq_notified, q);
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
    struct timeval tv = rlock_ms_tv(pause);
    evtimer_add(q->wake, &tv);
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
    a->timer = evtimer_new(base, deadline_timer_cb, a);
    if (!a->timer) {
        free(a);
        return NULL;
    }
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
    if (!a || a->closing)
        return;
    a->closing = 1;
    /* Every pending completion runs now (acquisitions end, releases and
     * extends report RLOCK_ERR).  Completions send nothing more (closing). */
    while (a->pending)
        cmd_fail_early(a->pending, "cancelled: client freed");
    /* Acquisitions sleeping between tries. */
    while (a->acqs)
        acq_finish(a->acqs, RLOCK_ERR, "acquire: cancelled: client freed");
    /* Commands still inside hiredis: detach (their late replies are ignored
     * or undone without the client). */
    while (a->late) {
        struct cmd *c = a->late;
        LIST_DEL(a->late, c);
        c->a = NULL;
    }
    /* Locks the user still holds: no more renewals; forget() frees them. */
    while (a->locks) {
        struct rlock_async_lock *l = a->locks;
        LIST_DEL(a->locks, l);
        lock_stop_watchdog(l);
        l->a = NULL;
    }
    if (a->in_timer) {
        a->free_late = 1; /* the timer's callback is still using a */
        return;
    }
    event_free(a->timer);
    free(a);
}

int rlock_async_acquire(struct rlock_async *a, const struct rlock_async_req *r,
                        rlock_async_acquire_fn *fn, void *arg)
{
    if (!a || a->closing || !a->ac || !r || !r->key || !fn || r->ttl_ms < 0 || r->wait_ms < 0 ||
        (r->reentrant && r->thread_id == 0))
        return -1;
    int reentrant = r->reentrant ? 1 : 0;
    const char *prefix = reentrant ? RLOCK_REDISSON_CHANNEL_PREFIX : RLOCK_RELEASE_CHANNEL_PREFIX;
    size_t key_len = strlen(r->key);
    size_t channel_len = rlock_channel_len(prefix, r->key, key_len);
    if (key_len > SIZE_MAX / 4 || channel_len > SIZE_MAX / 4)
        return -1;
    /* The lock, its key and its channel in one allocation. */
    struct rlock_async_lock *l = malloc(sizeof *l + key_len + 1 + channel_len + 1);
    if (!l)
        return -1;
    memset(l, 0, sizeof *l);
    l->key = (char *)(l + 1);
    memcpy(l->key, r->key, key_len + 1);
    l->key_len = key_len;
    l->channel = l->key + key_len + 1;
    rlock_channel_write(l->channel, prefix, r->key, key_len);
    l->channel_len = channel_len;
    l->refs = 1; /* the acquisition's */
    l->reentrant = reentrant;
    l->ttl_ms = r->ttl_ms > 0 ? r->ttl_ms : a->lease_ms;
    l->watched = r->ttl_ms == 0;
    l->on_lost = r->on_lost;
    l->lost_arg = r->lost_arg;
    if (l->reentrant) {
        if (rlock_owner_field(l->owner, a->uuid, r->thread_id) < 0)
            goto fail;
    } else if (rlock_token_new(l->owner) < 0) {
        goto fail;
    }
    l->owner_len = strlen(l->owner);
    if (l->watched) {
        l->renew_timer = evtimer_new(a->base, renew_timer_cb, l);
        if (!l->renew_timer)
            goto fail;
    }

    struct acq *q = &l->acq;
    q->a = a;
    q->fn = fn;
    q->arg = arg;
    q->retry_ms = r->retry_ms > 0 ? r->retry_ms : RLOCK_DEFAULT_RETRY_MS;
    if (acq_send(q) != 0)
        goto fail;
    q->start = q->inflight->sent_at;
    q->deadline = q->start + r->wait_ms;
    LIST_ADD(a->acqs, q);
    return 0;

fail:
    if (l->renew_timer)
        event_free(l->renew_timer);
    free(l);
    return -1;
}

static void release_done(struct cmd *c, redisReply *r, const char *err)
{
    struct rlock_async_lock *l = c->l;
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
    if (c->user_fn)
        c->user_fn(st, msg, c->user_arg);
}

int rlock_async_release(struct rlock_async_lock *l, rlock_async_done_fn *fn, void *arg)
{
    if (!l || !l->user || !l->a)
        return -1;
    struct cmd *c = cmd_send(l->a, l, OP_RELEASE, l->ttl_ms, release_done);
    if (!c)
        return -1;
    c->user_fn = fn;
    c->user_arg = arg;
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
