#include "store/redis_async.h"

#include <adapters/libevent.h>
#include <async.h>
#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "store/redis_conn.h"
#include <rlock/cluster.h>
#include <rlock/resp.h>

struct ra_redirect;

/* Scripts whose latency one client measures (the order path runs one). */
#define RA_HISTS 4

struct redis_async {
    struct event_base *base;
    struct rlock_url target;
    int timeout_ms, reconnect_ms, connect_timeout_ms;
    redisAsyncContext *ac; /* NULL while disconnected */
    uint64_t gen;          /* the Sentinel watch's generation when ac was made */
    /* The connection to a master the Sentinels replaced: no new command goes
     * on it; it goes once the commands on it are answered. */
    redisAsyncContext *retiring;
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
    struct ra_op *free_ops; /* for reuse: no allocation per command */
    int nfree;
    /* redis-cluster:// only: this client routes each script to the client
     * of its slot's master (a plain one per master, made from the map). */
    struct rlock_cluster *map; /* the slot map, read with blocking I/O */
    struct redis_async *node[RLOCK_CLUSTER_MAX_NODES];
    int nnodes;
    int64_t map_read_ms; /* when a dead master last made the map be read again */
    const struct cfg *cfg;
    /* A subscriber on a cluster: the node client that holds the
     * subscription; when it loses its connection the subscription moves to
     * another master (every node hears every PUBLISH). */
    struct redis_async *parent;   /* of a node client: its cluster client */
    struct redis_async *sub_node; /* of a cluster client: the subscribed node */
    struct event *resub_ev;
    struct ra_redirect *paused; /* of a cluster client: scripts waiting out a TRYAGAIN */
};

enum ra_op_state {
    OP_WAITING, /* on the connection, timer armed */
    OP_ANSWERED /* caller told (timeout); hiredis holds it until a reply or the connection goes */
};

/* Commands at most this long (RESP) reuse a pooled op; a reserve call is
 * about 700 bytes. */
#define RA_OP_POOLED_BYTES 1536
/* Ops kept for reuse per client: about the commands in flight at once. */
#define RA_OP_POOL_MAX 256

struct ra_op {
    struct redis_async *ra;
    struct ra_op *next_free; /* in ra->free_ops */
    redis_async_fn *fn;
    void *arg;
    struct event timer;
    enum ra_op_state state;
    int64_t sent_ms, sent_us;
    struct metrics_hist *hist; /* seckill_redis_command_duration_seconds{command} */
    /* The script's EVALSHA or FCALL in RESP, kept for the EVAL fallback after NOSCRIPT:
     * its numkeys, keys and arguments (nuser of them) start at cmd + tail. */
    const struct rlock_script *script;
    int nuser, retried;
    size_t cap, len, tail;
    char cmd[]; /* cap bytes */
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
static void sub_lost(struct redis_async *ra);

static void schedule_reconnect(struct redis_async *ra)
{
    if (ra->closing || evtimer_pending(ra->reconnect_ev, NULL))
        return;
    struct timeval tv = rlock_ms_tv(ra->reconnect_ms);
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
        log_info("redis connected to %s:%d", ac->c.tcp.host, ac->c.tcp.port);
        return;
    }
    log_warn("redis connect to %s:%d failed: %s", ac->c.tcp.host, ac->c.tcp.port, ac->errstr);
    if (ra->ac == ac) /* hiredis frees ac after this callback */
        ra->ac = NULL;
    schedule_reconnect(ra);
    sub_lost(ra);
}

/* A node client holding a cluster's subscription lost its connection: the
 * cluster client moves the subscription, from its own loop turn. */
static void sub_lost(struct redis_async *ra)
{
    struct redis_async *p = ra->parent;
    if (p && p->sub_node == ra && p->resub_ev && !p->closing) {
        struct timeval now = {0, 0};
        evtimer_add(p->resub_ev, &now);
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct redis_async *ra = ac->data;
    if (ra->retiring == ac) {
        ra->retiring = NULL;
        return;
    }
    if (status != REDIS_OK)
        log_warn("redis connection lost: %s", ac->errstr);
    if (ra->ac == ac)
        ra->ac = NULL;
    schedule_reconnect(ra);
    sub_lost(ra);
}

/* The Sentinels named a new master: new commands go to it at once, on a new
 * connection; those sent to the old one get their replies (a demoted master
 * refuses writes: READONLY) or their deadline. */
static void ra_retire(struct redis_async *ra)
{
    redisAsyncContext *ac = ra->ac;
    log_info("redis: the Sentinels moved the master away from %s:%d; reconnecting", ac->c.tcp.host,
             ac->c.tcp.port);
    if (ra->retiring) { /* two moves in a row: the oldest goes now */
        redisAsyncContext *old = ra->retiring;
        ra->retiring = NULL;
        redisAsyncFree(old);
    }
    ra->ac = NULL;
    ra->stalled = 0;
    ra->retiring = ac;
    redisAsyncDisconnect(ac); /* may free it at once (nothing pending): on_disconnect */
    ra_connect(ra);
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
    /* Behind Sentinels, the master the process's watch knows (no question
     * asked); before it knows one, a blocking question of at most
     * connect_timeout_ms per Sentinel. */
    struct rlock_url t = ra->target;
    char err[320];
    ra->gen = rlock_url_generation(&t);
    if (rlock_url_resolve(&t, ra->connect_timeout_ms, err, sizeof err) != 0) {
        log_warn("redis: %s", err);
        schedule_reconnect(ra);
        return;
    }
    redisAsyncContext *ac = redisAsyncConnect(t.host, t.port);
    if (!ac || ac->err) {
        log_warn("redis connect to %s:%d failed: %s", t.host, t.port,
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
    if (rlock_url_handshake_async(ac, &t, on_handshake, NULL) != 0) {
        log_warn("redis: cannot queue the handshake on a new connection");
        ra_drop(ra);
        return;
    }
    if (ra->channel) {
        const char *argv[] = {"SUBSCRIBE", ra->channel};
        redisAsyncCommandArgv(ac, on_subscribed, ra, 2, argv, NULL);
    }
}

/* A client of the one server (or Sentinel-named master) that target names. */
static struct redis_async *ra_new(struct event_base *base, const struct cfg *c,
                                  const struct rlock_url *target)
{
    struct redis_async *ra = xcalloc(1, sizeof *ra);
    ra->target = *target;
    if (ra->target.nsentinels > 0)
        ra->target.watch = redis_conn_followed();
    ra->base = base;
    ra->cfg = c;
    ra->timeout_ms = (int)c->redis_timeout_ms;
    ra->reconnect_ms = (int)c->redis_reconnect_ms;
    ra->connect_timeout_ms = (int)c->redis_connect_timeout_ms;
    ra->reconnect_ev = evtimer_new(base, on_reconnect_timer, ra);
    if (!ra->reconnect_ev)
        abort();
    return ra;
}

/* The client of the master at host:port, made (and connecting) if new; NULL
 * when the table is full. */
static struct redis_async *cluster_node(struct redis_async *ra, const char *host, int port)
{
    for (int i = 0; i < ra->nnodes; i++)
        if (ra->node[i]->target.port == port && strcmp(ra->node[i]->target.host, host) == 0)
            return ra->node[i];
    if (ra->nnodes == RLOCK_CLUSTER_MAX_NODES)
        return NULL;
    struct rlock_url u = ra->target;
    u.nseeds = 0;
    snprintf(u.host, sizeof u.host, "%s", host);
    u.port = port;
    struct redis_async *n = ra_new(ra->base, ra->cfg, &u);
    n->on_late = ra->on_late;
    n->late_arg = ra->late_arg;
    ra->node[ra->nnodes++] = n;
    ra_connect(n);
    return n;
}

/* The client of slot's master; NULL (logged) when no map says.  A master
 * whose client is not connected may have failed over without a redirect to
 * say so: the map is read again, at most once per redis_reconnect_ms. */
static struct redis_async *cluster_route(struct redis_async *ra, unsigned slot)
{
    char host[256], err[320];
    int port;
    for (int again = 0;; again++) {
        if (rlock_cluster_slot_addr(ra->map, slot, host, sizeof host, &port, err, sizeof err) !=
            0) {
            log_warn("redis cluster: %s", err);
            return NULL;
        }
        struct redis_async *n = cluster_node(ra, host, port);
        int64_t now = clock_mono_ms();
        if (!n || n->ac || again || now - ra->map_read_ms < ra->reconnect_ms)
            return n;
        ra->map_read_ms = now;
        rlock_cluster_invalidate(ra->map);
    }
}

struct redis_async *redis_async_new(struct event_base *base, const struct cfg *c, char *err,
                                    size_t errlen)
{
    struct rlock_url u;
    if (rlock_url_parse(c->redis_url, &u, err, errlen) != 0)
        return NULL;
    struct redis_async *ra = ra_new(base, c, &u);
    if (u.nseeds == 0) {
        ra_connect(ra);
        return ra;
    }
    struct rlock_cluster_opts o = {.connect_timeout_ms = ra->connect_timeout_ms,
                                   .io_timeout_ms = ra->timeout_ms,
                                   .tryagain_ms = 0};
    ra->map = rlock_cluster_new(&u, &o, err, errlen);
    if (!ra->map) {
        redis_async_free(ra);
        return NULL;
    }
    /* A client per master now, so that the first orders find them connected. */
    for (unsigned slot = 0; slot < RLOCK_CLUSTER_SLOTS; slot += RLOCK_CLUSTER_SLOTS / 64)
        (void)cluster_route(ra, slot);
    return ra;
}

/* An op whose cmd holds at least 'len' bytes: a pooled one when it fits. */
static struct ra_op *op_get(struct redis_async *ra, size_t len)
{
    struct ra_op *op = ra->free_ops;
    if (op && len <= op->cap) {
        ra->free_ops = op->next_free;
        ra->nfree--;
    } else {
        size_t cap = len <= RA_OP_POOLED_BYTES ? RA_OP_POOLED_BYTES : len;
        op = xmalloc(sizeof *op + cap);
        op->cap = cap;
    }
    return op;
}

static void op_free(struct ra_op *op)
{
    struct redis_async *ra = op->ra;
    evtimer_del(&op->timer);
    if (op->cap == RA_OP_POOLED_BYTES && ra->nfree < RA_OP_POOL_MAX) {
        op->next_free = ra->free_ops;
        ra->free_ops = op;
        ra->nfree++;
        return;
    }
    free(op);
}

/* Tells the caller (once) and forgets the command. */
static void op_answer(struct ra_op *op, redisReply *r, enum redis_async_status st)
{
    op->ra->pending--;
    op->fn(r, st, op->arg);
}

/* Redis does not hold op's script (restarted, SCRIPT FLUSH): sends it once
 * as EVAL with the same keys and arguments.  Returns 0 when queued. */
static int resend_as_eval(redisAsyncContext *ac, struct ra_op *op);

/* hiredis is done with op: a reply, or NULL when the connection went. */
static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct ra_op *op = priv;
    struct redis_async *ra = op->ra;
    int64_t now_us = 0;
    if (r) {
        now_us = clock_mono_us();
        ra->last_reply_ms = now_us / 1000;
        ra->stalled = 0; /* Redis is answering again */
    }
    if (op->script && !op->retried && rlock_reply_kind(r) == RLOCK_REPLY_NOSCRIPT) {
        op->retried = 1;
        if (resend_as_eval(ac, op) == 0)
            return; /* one run, measured once: when the EVAL answers */
        r = NULL;   /* could not queue (disconnecting): as a command cut off */
    }
    if (r)
        metrics_hist_observe(op->hist, now_us - op->sent_us);
    /* A failover demoted this server: the commands still queued get their
     * answers (a replica refuses every write), and the connection goes; the
     * next one asks the Sentinels again. */
    if (rlock_reply_kind(r) == RLOCK_REPLY_READONLY && ra->ac == ac &&
        !(ac->c.flags & REDIS_DISCONNECTING)) {
        log_warn("redis: the server is a replica now (%s); reconnecting", ((redisReply *)r)->str);
        redisAsyncDisconnect(ac);
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

static int resend_as_eval(redisAsyncContext *ac, struct ra_op *op)
{
    size_t rest = op->len - op->tail;
    char *b = xmalloc(rlock_script_head_bytes(op->script, 1, op->nuser) + rest);
    char *p = rlock_script_write_head(b, op->script, 1, op->nuser);
    memcpy(p, op->cmd + op->tail, rest);
    p += rest;
    int rc = redisAsyncFormattedCommand(ac, on_reply, op, b, (size_t)(p - b)) == REDIS_OK ? 0 : -1;
    free(b);
    return rc;
}

/* A script on a cluster: the call kept until its master answered anything
 * but a redirect.  MOVED: the map was wrong, the script goes to the master
 * named and the map is read again before the next route; ASK: once to the
 * importing master, after ASKING; TRYAGAIN (its keys split by a migration):
 * routed again after REDIS_CONN_TRYAGAIN_MS, as long as that ends within
 * redis_timeout_ms of the first send (rlock_cluster_follow(), the rule every
 * cluster client shares).  A redirected script did not run. */
struct ra_redirect {
    struct redis_async *ra;
    const struct rlock_script *s;
    int nkeys, nargs;
    unsigned slot;
    struct rlock_cluster_redirects follow; /* its deadline on clock_mono_ms() */
    redis_async_fn *fn;
    void *arg;
    const char **argv;
    size_t *lens;
    struct event pause;              /* the pause after a TRYAGAIN */
    struct ra_redirect *prev, *next; /* in ra->paused during it */
    char data[];                     /* the arguments' bytes */
};

static void script_on(struct redis_async *n, struct ra_redirect *rd, int asking);

static void rd_free(struct ra_redirect *rd)
{
    free(rd->argv);
    free(rd->lens);
    free(rd);
}

static void on_pause_end(evutil_socket_t fd, short what, void *arg)
{
    struct ra_redirect *rd = arg;
    struct redis_async *ra = rd->ra;
    (void)fd;
    (void)what;
    *(rd->prev ? &rd->prev->next : &ra->paused) = rd->next;
    if (rd->next)
        rd->next->prev = rd->prev;
    ra->pending--;
    struct redis_async *n = cluster_route(ra, rd->slot);
    if (!n) {
        rd->fn(NULL, REDIS_ASYNC_NOT_SENT, rd->arg);
        rd_free(rd);
        return;
    }
    script_on(n, rd, 0);
}

/* TRYAGAIN: the script goes again, routed afresh, after a pause; it counts
 * as pending meanwhile. */
static void pause_then_retry(struct ra_redirect *rd)
{
    struct redis_async *ra = rd->ra;
    rd->prev = NULL;
    rd->next = ra->paused;
    if (ra->paused)
        ra->paused->prev = rd;
    ra->paused = rd;
    ra->pending++;
    evtimer_assign(&rd->pause, ra->base, on_pause_end, rd);
    struct timeval tv = rlock_ms_tv(REDIS_CONN_TRYAGAIN_MS);
    evtimer_add(&rd->pause, &tv);
}

static void on_cluster_reply(redisReply *r, enum redis_async_status st, void *arg)
{
    struct ra_redirect *rd = arg;
    struct redis_async *ra = rd->ra;
    struct rlock_cluster_redirect to;
    enum rlock_cluster_step step =
        ra->closing ? RLOCK_CLUSTER_DELIVER
                    : rlock_cluster_follow(&rd->follow, rlock_reply_kind(r),
                                           r && r->type == REDIS_REPLY_ERROR ? r->str : NULL,
                                           clock_mono_ms(), &to);
    if (step == RLOCK_CLUSTER_TRYAGAIN) {
        pause_then_retry(rd);
        return;
    }
    if (step == RLOCK_CLUSTER_MOVED || step == RLOCK_CLUSTER_ASK) {
        if (step == RLOCK_CLUSTER_MOVED)
            rlock_cluster_invalidate(ra->map);
        struct redis_async *n = cluster_node(ra, to.host, to.port);
        if (n) {
            script_on(n, rd, step == RLOCK_CLUSTER_ASK);
            return;
        }
    }
    rd->fn(r, st, rd->arg);
    rd_free(rd);
}

static void script_on(struct redis_async *n, struct ra_redirect *rd, int asking)
{
    if (asking && n->ac && !n->stalled) {
        const char *argv[] = {"ASKING"};
        redisAsyncCommandArgv(n->ac, NULL, NULL, 1, argv, NULL);
    }
    redis_async_script(n, rd->s, rd->nkeys, rd->nargs, rd->argv, rd->lens, on_cluster_reply, rd);
}

static void cluster_script(struct redis_async *ra, const struct rlock_script *s, int nkeys,
                           int nargs, const char **argv, const size_t *lens, redis_async_fn *fn,
                           void *arg)
{
    int n = nkeys + nargs;
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += lens ? lens[i] : strlen(argv[i]);
    struct ra_redirect *rd = xmalloc(sizeof *rd + bytes + 1);
    const char **av = xmalloc(sizeof *av * (size_t)(n ? n : 1));
    size_t *al = xmalloc(sizeof *al * (size_t)(n ? n : 1));
    *rd = (struct ra_redirect){.ra = ra,
                               .s = s,
                               .nkeys = nkeys,
                               .nargs = nargs,
                               .fn = fn,
                               .arg = arg,
                               .argv = av,
                               .lens = al};
    char *p = rd->data; /* after the assignment, which may write trailing padding */
    for (int i = 0; i < n; i++) {
        al[i] = lens ? lens[i] : strlen(argv[i]);
        memcpy(p, argv[i], al[i]);
        av[i] = p;
        p += al[i];
    }
    rd->slot = nkeys > 0 ? rlock_cluster_slot(av[0], al[0]) : 0;
    rd->follow = (struct rlock_cluster_redirects){.deadline_ms = clock_mono_ms() + ra->timeout_ms,
                                                  .tryagain_ms = REDIS_CONN_TRYAGAIN_MS};
    struct redis_async *node = cluster_route(ra, rd->slot);
    if (!node) {
        free(av);
        free(al);
        free(rd);
        fn(NULL, REDIS_ASYNC_NOT_SENT, arg);
        return;
    }
    script_on(node, rd, 0);
}

/* EVALSHA (FCALL for a function), as rlock_script_run_async sends it, but
 * written in RESP by the library's writers (rlock_script_write_head() and
 * _args()) into one pooled buffer: hiredis's sds formatting and two
 * allocations per command were a tenth of an order's CPU. */
void redis_async_script(struct redis_async *ra, const struct rlock_script *s, int nkeys, int nargs,
                        const char **argv, const size_t *lens, redis_async_fn *fn, void *arg)
{
    if (ra->map) {
        if (nkeys < 0 || nargs < 0) {
            fn(NULL, REDIS_ASYNC_NOT_SENT, arg);
            return;
        }
        cluster_script(ra, s, nkeys, nargs, argv, lens, fn, arg);
        return;
    }
    if (ra->ac && ra->stalled && ra->pending == 0)
        ra_drop(ra); /* every command on it has had its answer: replace it */
    else if (ra->ac && rlock_sentinel_moved(&ra->target, ra->gen))
        ra_retire(ra);
    if (!ra->ac || ra->stalled || nkeys < 0 || nargs < 0) {
        fn(NULL, REDIS_ASYNC_NOT_SENT, arg);
        return;
    }
    int nuser = nkeys + nargs;
    size_t head = rlock_script_head_bytes(s, 0, nuser);
    struct ra_op *op = op_get(ra, head + rlock_script_args_bytes(nkeys, nargs, argv, lens));
    op->ra = ra;
    op->fn = fn;
    op->arg = arg;
    op->state = OP_WAITING;
    op->script = s;
    op->nuser = nuser;
    op->retried = s->function != NULL; /* a function has no EVAL to fall back to */
    op->tail = head;
    char *end = rlock_script_write_args(rlock_script_write_head(op->cmd, s, 0, nuser), nkeys, nargs,
                                        argv, lens);
    op->len = (size_t)(end - op->cmd);
    evtimer_assign(&op->timer, ra->base, on_timeout, op);
    op->sent_us = clock_mono_us();
    op->sent_ms = op->sent_us / 1000;
    op->hist = script_hist(ra, s);
    if (redisAsyncFormattedCommand(ra->ac, on_reply, op, op->cmd, op->len) != REDIS_OK) {
        op_free(op);
        fn(NULL, REDIS_ASYNC_NOT_SENT, arg);
        return;
    }
    struct timeval tv = rlock_ms_tv(ra->timeout_ms);
    evtimer_add(&op->timer, &tv);
    ra->pending++;
}

void redis_async_on_late(struct redis_async *ra, redis_async_late_fn *fn, void *arg)
{
    ra->on_late = fn;
    ra->late_arg = arg;
    for (int i = 0; i < ra->nnodes; i++)
        redis_async_on_late(ra->node[i], fn, arg);
}

int redis_async_pending(const struct redis_async *ra)
{
    if (!ra)
        return 0;
    int n = ra->pending;
    for (int i = 0; i < ra->nnodes; i++)
        n += redis_async_pending(ra->node[i]);
    return n;
}

/* Moves a cluster's subscription from a node client that lost its
 * connection to one that has one (the map read again first); without such a
 * node it stays, and the node resubscribes when it is back. */
static void resubscribe_later(struct redis_async *ra)
{
    struct timeval tv = rlock_ms_tv(ra->reconnect_ms);
    if (!ra->closing)
        evtimer_add(ra->resub_ev, &tv);
}

static void on_resubscribe(evutil_socket_t fd, short what, void *arg)
{
    struct redis_async *ra = arg, *old = ra->sub_node;
    (void)fd;
    (void)what;
    if (ra->closing || (old && old->ac))
        return; /* back already */
    rlock_cluster_invalidate(ra->map);
    struct redis_async *first = cluster_route(ra, 0); /* reads the map */
    if (!old) {                                       /* never subscribed: no node was known then */
        if (!first) {
            resubscribe_later(ra);
            return;
        }
        first->parent = ra;
        ra->sub_node = first;
        redis_async_subscribe(first, ra->channel, ra->on_message, ra->message_arg);
        return;
    }
    for (int i = 0; i < ra->nnodes; i++) {
        struct redis_async *n = ra->node[i];
        if (n == old || !n->ac)
            continue;
        log_warn("redis cluster: subscription to %s moves from %s:%d to %s:%d", ra->channel,
                 old->target.host, old->target.port, n->target.host, n->target.port);
        free(old->channel);
        old->channel = NULL;
        n->parent = ra;
        ra->sub_node = n;
        redis_async_subscribe(n, ra->channel, ra->on_message, ra->message_arg);
        return;
    }
}

void redis_async_subscribe(struct redis_async *ra, const char *channel, redis_async_message_fn *fn,
                           void *arg)
{
    if (ra->map) { /* a cluster delivers every PUBLISH to every node: one will do */
        ra->channel = xstrdup(channel);
        ra->on_message = fn;
        ra->message_arg = arg;
        ra->resub_ev = evtimer_new(ra->base, on_resubscribe, ra);
        if (!ra->resub_ev)
            abort();
        struct redis_async *n = cluster_route(ra, 0);
        if (!n) {
            log_warn("redis cluster: no node to subscribe to %s on yet; retrying", channel);
            resubscribe_later(ra);
            return;
        }
        n->parent = ra;
        ra->sub_node = n;
        redis_async_subscribe(n, channel, fn, arg);
        return;
    }
    ra->channel = xstrdup(channel);
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
    while (ra->paused) { /* refused with TRYAGAIN: none of them ran */
        struct ra_redirect *rd = ra->paused;
        ra->paused = rd->next;
        event_del(&rd->pause);
        ra->pending--;
        rd->fn(NULL, REDIS_ASYNC_NOT_SENT, rd->arg);
        rd_free(rd);
    }
    if (ra->resub_ev)
        event_free(ra->resub_ev);
    ra->resub_ev = NULL;
    ra->sub_node = NULL;
    for (int i = 0; i < ra->nnodes; i++)
        redis_async_free(ra->node[i]);
    ra->nnodes = 0;
    rlock_cluster_free(ra->map);
    ra->map = NULL;
    event_del(ra->reconnect_ev);
    if (ra->ac) { /* commands still waiting learn that the connection went */
        redisAsyncContext *ac = ra->ac;
        ra->ac = NULL;
        redisAsyncFree(ac);
    }
    if (ra->retiring) {
        redisAsyncContext *ac = ra->retiring;
        ra->retiring = NULL;
        redisAsyncFree(ac);
    }
    event_free(ra->reconnect_ev);
    while (ra->free_ops) {
        struct ra_op *op = ra->free_ops;
        ra->free_ops = op->next_free;
        free(op);
    }
    free(ra->channel);
    free(ra);
}
