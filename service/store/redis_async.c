#include "store/redis_async.h"

#include <adapters/libevent.h>
#include <async.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "store/redis_conn.h"

/* Scripts whose latency one client measures (the order path runs one). */
#define RA_HISTS 4

struct redis_async {
    struct event_base *base;
    struct rlock_url target;
    int timeout_ms, reconnect_ms;
    redisAsyncContext *ac; /* NULL while disconnected */
    struct event *reconnect_ev;
    int closing;
    int pending;           /* commands whose caller has not been answered */
    int stalled;           /* the connection answered nothing since a command that timed out */
    int64_t last_reply_ms; /* the latest reply */
    char *channel;         /* subscribed channel, or NULL */
    redis_async_late_fn *on_late;
    void *late_arg;
    redis_async_message_fn *on_message;
    void *message_arg;
    /* The latency histogram of each script run here (a handful of scripts:
     * found by pointer, made on its first run). */
    struct {
        const struct rlock_script *script;
        struct metrics_hist *hist;
    } hists[RA_HISTS];
};

enum ra_op_state {
    OP_WAITING, /* on the connection, timer armed */
    OP_ANSWERED /* caller told (timeout); hiredis holds it until a reply or the connection goes */
};

struct ra_op {
    struct redis_async *ra;
    redis_async_fn *fn;
    void *arg;
    struct event *timer;
    enum ra_op_state state;
    int64_t sent_ms, sent_us;
    struct metrics_hist *hist; /* seckill_redis_command_duration_seconds{command} */
};

/* The histogram of script s's runs (command="<script name>"); NULL (not
 * measured) for scripts beyond the first RA_HISTS this client runs. */
static struct metrics_hist *script_hist(struct redis_async *ra, const struct rlock_script *s)
{
    for (size_t i = 0; i < RA_HISTS; i++) {
        if (ra->hists[i].script == s)
            return ra->hists[i].hist;
        if (!ra->hists[i].script) {
            char labels[METRICS_LABELS_MAX];
            snprintf(labels, sizeof labels, "command=\"%s\"", s->name);
            ra->hists[i].script = s;
            ra->hists[i].hist = metrics_hist_get(MF_REDIS_COMMAND, labels);
            return ra->hists[i].hist;
        }
    }
    return NULL;
}

static void ra_connect(struct redis_async *ra);

static void schedule_reconnect(struct redis_async *ra)
{
    if (ra->closing || evtimer_pending(ra->reconnect_ev, NULL))
        return;
    struct timeval tv = {ra->reconnect_ms / 1000, (ra->reconnect_ms % 1000) * 1000};
    evtimer_add(ra->reconnect_ev, &tv);
}

static void on_reconnect_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ra_connect(arg);
}

/* Drops the connection; hiredis hands every command on it back with NULL.
 * Only called when no command on it is still inside its deadline. */
static void ra_drop(struct redis_async *ra)
{
    redisAsyncContext *ac = ra->ac;
    if (!ac)
        return;
    ra->ac = NULL;
    ra->stalled = 0;
    redisAsyncFree(ac);
    schedule_reconnect(ra);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct redis_async *ra = ac->data;
    if (status == REDIS_OK) {
        log_info("redis connected to %s:%d", ra->target.host, ra->target.port);
        return;
    }
    log_warn("redis connect to %s:%d failed: %s", ra->target.host, ra->target.port, ac->errstr);
    if (ra->ac == ac) /* hiredis frees ac after this callback */
        ra->ac = NULL;
    schedule_reconnect(ra);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct redis_async *ra = ac->data;
    if (status != REDIS_OK)
        log_warn("redis connection lost: %s", ac->errstr);
    if (ra->ac == ac)
        ra->ac = NULL;
    schedule_reconnect(ra);
}

static void on_handshake(redisAsyncContext *ac, void *r, void *priv)
{
    redisReply *reply = r;
    (void)priv;
    if (reply && reply->type == REDIS_REPLY_ERROR) {
        struct redis_async *ra = ac->data;
        log_warn("redis refused the handshake (AUTH as %s, SELECT %d): %s",
                 ra->target.user[0] ? ra->target.user : "the default user", ra->target.db,
                 reply->str);
        if (ra->ac == ac)
            redisAsyncDisconnect(ac);
    }
}

/* Every reply on the subscribed channel: ["subscribe", ch, n] once the
 * subscription holds, then ["message", ch, payload]; NULL when the connection
 * goes (it is re-made on reconnect). */
static void on_subscribed(redisAsyncContext *ac, void *r, void *priv)
{
    redisReply *reply = r;
    struct redis_async *ra = priv;
    (void)ac;
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
        reply->element[0]->type != REDIS_REPLY_STRING)
        return;
    const redisReply *kind = reply->element[0], *data = reply->element[2];
    if (strcmp(kind->str, "subscribe") == 0)
        ra->on_message(NULL, 0, ra->message_arg);
    else if (strcmp(kind->str, "message") == 0 && data->type == REDIS_REPLY_STRING)
        ra->on_message(data->str, data->len, ra->message_arg);
}

static void ra_connect(struct redis_async *ra)
{
    if (ra->ac || ra->closing)
        return;
    redisAsyncContext *ac = redisAsyncConnect(ra->target.host, ra->target.port);
    if (!ac || ac->err) {
        log_warn("redis connect to %s:%d failed: %s", ra->target.host, ra->target.port,
                 ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        schedule_reconnect(ra);
        return;
    }
    ac->data = ra;
    if (redisLibeventAttach(ac, ra->base) != REDIS_OK) {
        redisAsyncFree(ac);
        schedule_reconnect(ra);
        return;
    }
    /* A peer cut off without a reset would otherwise hold the connection forever. */
    if (redisEnableKeepAlive(&ac->c) != REDIS_OK)
        log_warn("redis: cannot enable TCP keepalive");
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    ra->ac = ac;
    /* Queued before any command, so they run first on the new connection. */
    if (rlock_url_handshake_async(ac, &ra->target, on_handshake, NULL) != 0) {
        log_warn("redis: cannot queue the handshake on a new connection");
        ra_drop(ra);
        return;
    }
    if (ra->channel) {
        const char *argv[] = {"SUBSCRIBE", ra->channel};
        redisAsyncCommandArgv(ac, on_subscribed, ra, 2, argv, NULL);
    }
}

struct redis_async *redis_async_new(struct event_base *base, const struct cfg *c, char *err,
                                    size_t errlen)
{
    struct redis_async *ra = calloc(1, sizeof *ra);
    if (!ra)
        abort();
    if (rlock_url_parse(c->redis_url, &ra->target, err, errlen) != 0) {
        free(ra);
        return NULL;
    }
    ra->base = base;
    ra->timeout_ms = (int)c->redis_timeout_ms;
    ra->reconnect_ms = (int)c->redis_reconnect_ms;
    ra->reconnect_ev = evtimer_new(base, on_reconnect_timer, ra);
    if (!ra->reconnect_ev)
        abort();
    ra_connect(ra);
    return ra;
}

static void op_free(struct ra_op *op)
{
    event_free(op->timer);
    free(op);
}

/* Tells the caller (once) and forgets the command. */
static void op_answer(struct ra_op *op, redisReply *r, enum redis_async_status st)
{
    op->ra->pending--;
    op->fn(r, st, op->arg);
}

/* hiredis is done with op: a reply, or NULL when the connection went. */
static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct ra_op *op = priv;
    struct redis_async *ra = op->ra;
    (void)ac;
    if (r) {
        int64_t now_us = clock_mono_us();
        ra->last_reply_ms = now_us / 1000;
        ra->stalled = 0; /* Redis is answering again */
        metrics_hist_observe(op->hist, now_us - op->sent_us);
    }
    if (op->state == OP_WAITING)
        op_answer(op, r, r ? REDIS_ASYNC_REPLIED : REDIS_ASYNC_LOST);
    else if (r && ra->on_late)
        ra->on_late(r, ra->late_arg);
    op_free(op);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct ra_op *op = arg;
    struct redis_async *ra = op->ra;
    (void)fd;
    (void)what;
    metrics_add(M_REDIS_TIMEOUTS, 1);
    op->state = OP_ANSWERED; /* hiredis frees it: on a late reply, or when the connection goes */
    op_answer(op, NULL, REDIS_ASYNC_TIMEOUT);
    /* Nothing came back since this command was sent: the connection is
     * stalled (a frozen server, a partition).  It takes no new commands; it
     * is replaced once no command on it is inside its deadline any more,
     * because a reply still due must not be thrown away with it. */
    if (ra->ac && !ra->stalled && ra->last_reply_ms < op->sent_ms) {
        log_warn("redis answered nothing for %d ms; new commands wait for a new connection",
                 ra->timeout_ms);
        ra->stalled = 1;
    }
}

void redis_async_script(struct redis_async *ra, const struct rlock_script *s, int nkeys, int nargs,
                        const char **argv, const size_t *lens, redis_async_fn *fn, void *arg)
{
    if (ra->ac && ra->stalled && ra->pending == 0)
        ra_drop(ra); /* every command on it has had its answer: replace it */
    if (!ra->ac || ra->stalled) {
        fn(NULL, REDIS_ASYNC_NOT_SENT, arg);
        return;
    }
    struct ra_op *op = calloc(1, sizeof *op);
    if (!op)
        abort();
    op->ra = ra;
    op->fn = fn;
    op->arg = arg;
    op->timer = evtimer_new(ra->base, on_timeout, op);
    if (!op->timer)
        abort();
    op->sent_us = clock_mono_us();
    op->sent_ms = op->sent_us / 1000;
    op->hist = script_hist(ra, s);
    if (rlock_script_run_async(ra->ac, s, on_reply, op, nkeys, nargs, argv, lens) != 0) {
        op_free(op);
        fn(NULL, REDIS_ASYNC_NOT_SENT, arg);
        return;
    }
    struct timeval tv = {ra->timeout_ms / 1000, (ra->timeout_ms % 1000) * 1000};
    evtimer_add(op->timer, &tv);
    ra->pending++;
}

void redis_async_on_late(struct redis_async *ra, redis_async_late_fn *fn, void *arg)
{
    ra->on_late = fn;
    ra->late_arg = arg;
}

int redis_async_pending(const struct redis_async *ra)
{
    return ra ? ra->pending : 0;
}

void redis_async_subscribe(struct redis_async *ra, const char *channel, redis_async_message_fn *fn,
                           void *arg)
{
    ra->channel = strdup(channel);
    if (!ra->channel)
        abort();
    ra->on_message = fn;
    ra->message_arg = arg;
    if (ra->ac) { /* already connecting: subscribe on this connection too */
        const char *argv[] = {"SUBSCRIBE", ra->channel};
        redisAsyncCommandArgv(ra->ac, on_subscribed, ra, 2, argv, NULL);
    }
}

void redis_async_free(struct redis_async *ra)
{
    if (!ra)
        return;
    ra->closing = 1;
    event_del(ra->reconnect_ev);
    if (ra->ac) { /* commands still waiting learn that the connection went */
        redisAsyncContext *ac = ra->ac;
        ra->ac = NULL;
        redisAsyncFree(ac);
    }
    event_free(ra->reconnect_ev);
    free(ra->channel);
    free(ra);
}
