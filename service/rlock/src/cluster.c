#include "rlock/cluster.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlock/resp.h"

#define NO_NODE 0xffff
/* A node that could not be reached is asked for the map after the others
 * for this long: on a real network a dead host costs a whole connect
 * timeout, and a caller on an event loop would wait for it at every refresh. */
#define FAILED_LAST_MS 10000

struct node {
    char host[256];
    int port;
    int master; /* serves at least one slot */
    redisContext *ctx;
    int64_t failed_ms; /* rlock_mono_ms() of the last failed connect, 0 if none */
};

struct rlock_cluster {
    struct rlock_url url;
    struct rlock_cluster_opts o;
    struct node nodes[RLOCK_CLUSTER_MAX_NODES];
    int nnodes;
    int stale; /* read the map again before the next command */
    unsigned long redirects;
    uint16_t slot_node[RLOCK_CLUSTER_SLOTS]; /* index into nodes, NO_NODE if unknown */
};

unsigned rlock_crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
        crc &= 0xffff;
    }
    return crc;
}

unsigned rlock_cluster_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return rlock_crc16(open + 1, (size_t)(close - open - 1)) & (RLOCK_CLUSTER_SLOTS - 1);
    }
    return rlock_crc16(key, len) & (RLOCK_CLUSTER_SLOTS - 1);
}

struct rlock_cluster *rlock_cluster_new(const struct rlock_url *u,
                                        const struct rlock_cluster_opts *o, char *err,
                                        size_t errlen)
{
    if (!u || u->nseeds < 1) {
        rlock_err_set(err, errlen, "cluster: the URL names no cluster node (redis-cluster://)");
        return NULL;
    }
    if (!o || o->connect_timeout_ms <= 0 || o->io_timeout_ms <= 0 || o->tryagain_ms < 0) {
        rlock_err_set(err, errlen, "cluster: timeouts must be > 0");
        return NULL;
    }
    struct rlock_cluster *c = calloc(1, sizeof *c);
    if (!c) {
        rlock_err_set(err, errlen, "cluster: out of memory");
        return NULL;
    }
    c->url = *u;
    c->o = *o;
    c->stale = 1;
    for (size_t i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
        c->slot_node[i] = NO_NODE;
    return c;
}

static void node_close(struct node *n)
{
    if (n->ctx)
        redisFree(n->ctx);
    n->ctx = NULL;
}

void rlock_cluster_free(struct rlock_cluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nnodes; i++)
        node_close(&c->nodes[i]);
    free(c);
}

static int recently_failed(const struct node *n)
{
    return n->failed_ms && rlock_mono_ms() - n->failed_ms < FAILED_LAST_MS;
}

/* A connection to host:port, handshaken with the URL's credentials. */
static redisContext *connect_node(const struct rlock_cluster *c, const char *host, int port,
                                  char *err, size_t errlen)
{
    redisContext *ctx = redisConnectWithTimeout(host, port, rlock_ms_tv(c->o.connect_timeout_ms));
    if (!ctx || ctx->err || redisSetTimeout(ctx, rlock_ms_tv(c->o.io_timeout_ms)) != REDIS_OK) {
        rlock_err_set(err, errlen, "cluster node %s:%d: %s", host, port,
                      ctx && ctx->err ? ctx->errstr : "cannot connect");
        redisFree(ctx);
        return NULL;
    }
    struct rlock_url u = c->url;
    snprintf(u.host, sizeof u.host, "%s", host);
    u.port = port;
    u.db = 0;
    u.nseeds = 0;
    if (rlock_url_handshake(ctx, &u, err, errlen) != 0) {
        redisFree(ctx);
        return NULL;
    }
    return ctx;
}

/* The index of the known node at host:port, or -1. */
static int node_find(const struct rlock_cluster *c, const char *host, int port)
{
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == port && strcmp(c->nodes[i].host, host) == 0)
            return i;
    return -1;
}

/* The index of node host:port, added (not connected) if new; -1 when the
 * table is full. */
static int node_index(struct rlock_cluster *c, const char *host, int port)
{
    int i = node_find(c, host, port);
    if (i >= 0)
        return i;
    if (c->nnodes == RLOCK_CLUSTER_MAX_NODES)
        return -1;
    struct node *n = &c->nodes[c->nnodes];
    memset(n, 0, sizeof *n);
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    return c->nnodes++;
}

/* One entry's address in a CLUSTER SLOTS reply: [host, port, id, ...]; an
 * empty or "?" host means the node that answered. */
static int entry_addr(const redisReply *e, const char *asked, char *host, size_t cap, int *port)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    const char *h = e->element[0]->str;
    snprintf(host, cap, "%s", h[0] == '\0' || strcmp(h, "?") == 0 ? asked : h);
    *port = (int)e->element[1]->integer;
    return *port >= 1 && *port <= 65535 ? 0 : -1;
}

/* Applies a CLUSTER SLOTS reply read from node 'asked'.  Returns 0, or -1
 * (malformed: the map is left as it was). */
static int apply_slots(struct rlock_cluster *c, const redisReply *r, const char *asked)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return -1;
    uint16_t *map = malloc(sizeof c->slot_node);
    if (!map)
        return -1;
    for (size_t i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
        map[i] = NO_NODE;
    int rc = 0;
    int is_master[RLOCK_CLUSTER_MAX_NODES] = {0};
    for (size_t i = 0; i < r->elements && rc == 0; i++) {
        const redisReply *range = r->element[i];
        char host[256];
        int port, idx;
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
            range->element[0]->type != REDIS_REPLY_INTEGER ||
            range->element[1]->type != REDIS_REPLY_INTEGER ||
            entry_addr(range->element[2], asked, host, sizeof host, &port) != 0) {
            rc = -1;
            break;
        }
        long long from = range->element[0]->integer, to = range->element[1]->integer;
        if (from < 0 || to < from || to >= RLOCK_CLUSTER_SLOTS ||
            (idx = node_index(c, host, port)) < 0) {
            rc = -1;
            break;
        }
        is_master[idx] = 1;
        for (long long s = from; s <= to; s++)
            map[s] = (uint16_t)idx;
    }
    if (rc == 0) {
        memcpy(c->slot_node, map, sizeof c->slot_node);
        for (int i = 0; i < c->nnodes; i++) {
            c->nodes[i].master = is_master[i];
            if (!is_master[i]) /* a demoted or departed master: not ours to write */
                node_close(&c->nodes[i]);
        }
    }
    free(map);
    return rc;
}

/* Asks host:port (ctx if connected, else a connection of its own) for the map. */
static int refresh_from(struct rlock_cluster *c, const char *host, int port, redisContext *ctx,
                        char *err, size_t errlen)
{
    redisContext *own = NULL;
    if (!ctx) {
        own = connect_node(c, host, port, err, errlen);
        if (!own)
            return -1;
        ctx = own;
    }
    char asked[256];
    snprintf(asked, sizeof asked, "%s", host); /* host may be a node's, which apply rewrites */
    redisReply *r = redisCommand(ctx, "CLUSTER SLOTS");
    int rc = -1;
    if (!r)
        rlock_err_set(err, errlen, "cluster node %s:%d: CLUSTER SLOTS: %s", asked, port,
                      ctx->errstr);
    else if (r->type == REDIS_REPLY_ERROR)
        rlock_err_set(err, errlen, "cluster node %s:%d: CLUSTER SLOTS: %s", asked, port, r->str);
    else if ((rc = apply_slots(c, r, asked)) != 0)
        rlock_err_set(err, errlen, "cluster node %s:%d: CLUSTER SLOTS: no usable map", asked, port);
    freeReplyObject(r);
    redisFree(own);
    return rc;
}

/* Asks node i for the map (its connection, else one of its own); a node
 * that cannot be reached is remembered as failed. */
static int refresh_node(struct rlock_cluster *c, int i, char *err, size_t errlen)
{
    struct node *n = &c->nodes[i];
    char host[256];
    snprintf(host, sizeof host, "%s", n->host);
    int port = n->port;
    if (refresh_from(c, host, port, n->ctx, err, errlen) == 0) {
        c->nodes[i].failed_ms = 0;
        return 0;
    }
    if (c->nodes[i].ctx && c->nodes[i].ctx->err)
        node_close(&c->nodes[i]);
    if (!c->nodes[i].ctx)
        c->nodes[i].failed_ms = rlock_mono_ms();
    return -1;
}

int rlock_cluster_refresh(struct rlock_cluster *c, char *err, size_t errlen)
{
    char last[320] = "no node to ask";
    /* Known masters first (their connections are open), then the seeds, and
     * nodes that failed a moment ago last. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < c->nnodes; i++) {
            if (!c->nodes[i].master || recently_failed(&c->nodes[i]) != pass)
                continue;
            if (refresh_node(c, i, last, sizeof last) == 0) {
                c->stale = 0;
                return 0;
            }
        }
        for (int i = 0; i < c->url.nseeds; i++) {
            const struct rlock_url_node *s = &c->url.seed[i];
            int k = node_find(c, s->host, s->port);
            if (k >= 0 && (c->nodes[k].master || recently_failed(&c->nodes[k]) != pass))
                continue; /* asked above, or in the other pass */
            if (k < 0 && pass == 1)
                continue;
            if (refresh_from(c, s->host, s->port, NULL, last, sizeof last) == 0) {
                c->stale = 0;
                return 0;
            }
            if ((k = node_index(c, s->host, s->port)) >= 0)
                c->nodes[k].failed_ms = rlock_mono_ms();
        }
    }
    rlock_err_set(err, errlen, "cluster: no node gave a slot map (last: %s)", last);
    return -1;
}

/* The index of the node serving slot (the map read first when stale), or
 * -1 with err set. */
static int slot_index(struct rlock_cluster *c, unsigned slot, char *err, size_t errlen)
{
    if (slot >= RLOCK_CLUSTER_SLOTS) {
        rlock_err_set(err, errlen, "cluster: slot %u out of range", slot);
        return -1;
    }
    if (c->stale && rlock_cluster_refresh(c, err, errlen) != 0 && c->slot_node[slot] == NO_NODE)
        return -1;
    if (c->slot_node[slot] == NO_NODE) {
        rlock_err_set(err, errlen, "cluster: no node serves slot %u", slot);
        c->stale = 1;
        return -1;
    }
    return c->slot_node[slot];
}

/* n with a working connection (made again if broken); NULL with err set,
 * n remembered as failed and the map as stale (a dead master: its replica
 * may hold its slots by now). */
static struct node *node_connected(struct rlock_cluster *c, struct node *n, char *err,
                                   size_t errlen)
{
    /* Between commands nothing is due: a readable socket is a node that
     * closed it (died, restarted) or broke the protocol.  Found here, before
     * anything is sent, the command can still go elsewhere. */
    struct pollfd p = {.fd = n->ctx ? n->ctx->fd : -1, .events = POLLIN};
    if (n->ctx && (n->ctx->err || poll(&p, 1, 0) != 0))
        node_close(n);
    if (!n->ctx && !(n->ctx = connect_node(c, n->host, n->port, err, errlen))) {
        n->failed_ms = rlock_mono_ms();
        c->stale = 1;
        return NULL;
    }
    n->failed_ms = 0;
    return n;
}

/* The node serving slot, connected; NULL with err. */
static struct node *node_for(struct rlock_cluster *c, unsigned slot, char *err, size_t errlen)
{
    int idx = slot_index(c, slot, err, errlen);
    return idx < 0 ? NULL : node_connected(c, &c->nodes[idx], err, errlen);
}

int rlock_cluster_slot_addr(struct rlock_cluster *c, unsigned slot, char *host, size_t cap,
                            int *port, char *err, size_t errlen)
{
    int idx = slot_index(c, slot, err, errlen);
    if (idx < 0)
        return -1;
    snprintf(host, cap, "%s", c->nodes[idx].host);
    *port = c->nodes[idx].port;
    return 0;
}

void rlock_cluster_invalidate(struct rlock_cluster *c)
{
    c->stale = 1;
}

redisContext *rlock_cluster_node(struct rlock_cluster *c, unsigned slot, char *err, size_t errlen)
{
    struct node *n = node_for(c, slot, err, errlen);
    return n ? n->ctx : NULL;
}

int rlock_cluster_node_of(struct rlock_cluster *c, unsigned slot, char *err, size_t errlen)
{
    struct node *n = node_for(c, slot, err, errlen);
    return n ? (int)(n - c->nodes) : -1;
}

redisContext *rlock_cluster_node_ctx(const struct rlock_cluster *c, int node)
{
    return node >= 0 && node < c->nnodes ? c->nodes[node].ctx : NULL;
}

int rlock_cluster_redirect_parse(const char *msg, struct rlock_cluster_redirect *to)
{
    enum rlock_reply_kind kind = rlock_error_kind(msg);
    if (kind != RLOCK_REPLY_MOVED && kind != RLOCK_REPLY_ASK)
        return -1;
    const char *sp = strchr(msg, ' ');
    if (!sp)
        return -1;
    char *end;
    unsigned long s = strtoul(sp + 1, &end, 10);
    if (end == sp + 1 || *end != ' ' || s >= RLOCK_CLUSTER_SLOTS)
        return -1;
    const char *addr = end + 1, *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof to->host)
        return -1;
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || port < 1 || port > 65535)
        return -1;
    memcpy(to->host, addr, (size_t)(colon - addr));
    to->host[colon - addr] = '\0';
    to->kind = kind;
    to->slot = (unsigned)s;
    to->port = (int)port;
    return 0;
}

enum rlock_cluster_step rlock_cluster_follow(struct rlock_cluster_redirects *rd,
                                             enum rlock_reply_kind kind, const char *msg,
                                             int64_t now_ms, struct rlock_cluster_redirect *to)
{
    if (kind == RLOCK_REPLY_TRYAGAIN) {
        int pause = rd->tryagain_ms > 0 ? rd->tryagain_ms : 1;
        if (rd->deadline_ms > 0 ? now_ms + pause >= rd->deadline_ms
                                : rd->tries >= RLOCK_CLUSTER_MAX_REDIRECTS)
            return RLOCK_CLUSTER_DELIVER;
        rd->tries++;
        return RLOCK_CLUSTER_TRYAGAIN;
    }
    if ((kind != RLOCK_REPLY_MOVED && kind != RLOCK_REPLY_ASK) ||
        rd->hops >= RLOCK_CLUSTER_MAX_REDIRECTS || !msg ||
        rlock_cluster_redirect_parse(msg, to) != 0)
        return RLOCK_CLUSTER_DELIVER;
    rd->hops++;
    return kind == RLOCK_REPLY_MOVED ? RLOCK_CLUSTER_MOVED : RLOCK_CLUSTER_ASK;
}

/* Sends argv on n (after ASKING when asking); the reply, or NULL (I/O). */
static redisReply *send_on(struct node *n, int asking, int argc, const char **argv,
                           const size_t *lens)
{
    if (!asking)
        return redisCommandArgv(n->ctx, argc, argv, lens);
    if (redisAppendCommand(n->ctx, "ASKING") != REDIS_OK ||
        redisAppendCommandArgv(n->ctx, argc, argv, lens) != REDIS_OK)
        return NULL;
    void *r = NULL;
    if (redisGetReply(n->ctx, &r) != REDIS_OK)
        return NULL;
    freeReplyObject(r); /* +OK */
    r = NULL;
    if (redisGetReply(n->ctx, &r) != REDIS_OK)
        return NULL;
    return r;
}

/* The command loop; script, when set, is loaded on NOSCRIPT and sent again. */
static redisReply *run(struct rlock_cluster *c, unsigned slot, int argc, const char **argv,
                       const size_t *lens, const struct rlock_script *script, char *err,
                       size_t errlen)
{
    struct rlock_cluster_redirects rd = {.tryagain_ms = c->o.tryagain_ms};
    int ask_idx = -1, loaded = 0, remapped = 0;
    for (;;) {
        struct node *n;
        if (ask_idx >= 0) {
            if (!(n = node_connected(c, &c->nodes[ask_idx], err, errlen)))
                return NULL;
        } else if (!(n = node_for(c, slot, err, errlen))) {
            /* Its node could not be reached and nothing was sent: once, the
             * map is read again (a replica may hold the slot by now). */
            if (remapped++ || !c->stale)
                return NULL;
            continue;
        }
        redisReply *r = send_on(n, ask_idx >= 0, argc, argv, lens);
        if (!r) {
            rlock_err_set(err, errlen, "cluster node %s:%d: %s %s", n->host, n->port, argv[0],
                          n->ctx->errstr[0] ? n->ctx->errstr : "failed");
            node_close(n);
            c->stale = 1;
            return NULL;
        }
        int asking = ask_idx >= 0;
        ask_idx = -1;
        enum rlock_reply_kind kind = rlock_reply_kind(r);
        struct rlock_cluster_redirect to;
        enum rlock_cluster_step step = rlock_cluster_follow(
            &rd, kind, r->type == REDIS_REPLY_ERROR ? r->str : NULL, rlock_mono_ms(), &to);
        if (step == RLOCK_CLUSTER_MOVED || step == RLOCK_CLUSTER_ASK) {
            freeReplyObject(r);
            int idx = node_index(c, to.host, to.port);
            if (idx < 0) {
                rlock_err_set(err, errlen, "cluster: %s to an unknown node",
                              step == RLOCK_CLUSTER_MOVED ? "a MOVED" : "an ASK");
                return NULL;
            }
            c->redirects++;
            if (step == RLOCK_CLUSTER_ASK) {
                ask_idx = idx;
                continue;
            }
            c->slot_node[to.slot] = (uint16_t)idx;
            c->nodes[idx].master = 1;
            c->stale = 1; /* more slots moved with it, most likely */
            continue;
        }
        if (step == RLOCK_CLUSTER_TRYAGAIN) {
            freeReplyObject(r);
            rlock_sleep_until(rlock_mono_ms() + c->o.tryagain_ms);
            continue;
        }
        if (kind == RLOCK_REPLY_MOVED || kind == RLOCK_REPLY_ASK || kind == RLOCK_REPLY_TRYAGAIN) {
            if (kind != RLOCK_REPLY_TRYAGAIN && rd.hops < RLOCK_CLUSTER_MAX_REDIRECTS)
                rlock_err_set(err, errlen, "cluster: a redirect without a node: %s", r->str);
            else
                rlock_err_set(err, errlen, "cluster: more than %d redirects for slot %u",
                              RLOCK_CLUSTER_MAX_REDIRECTS, slot);
            freeReplyObject(r);
            return NULL;
        }
        if (script && !loaded && kind == RLOCK_REPLY_NOSCRIPT) {
            freeReplyObject(r);
            redisReply *l = redisCommand(n->ctx, "SCRIPT LOAD %b", script->text, script->len);
            int ok = l && l->type == REDIS_REPLY_STRING;
            if (!l) {
                rlock_err_set(err, errlen, "cluster node %s:%d: SCRIPT LOAD %s: %s", n->host,
                              n->port, script->name, n->ctx->errstr);
                node_close(n);
                c->stale = 1;
                return NULL;
            }
            if (!ok) {
                rlock_err_set(err, errlen, "cluster node %s:%d: SCRIPT LOAD %s: %s", n->host,
                              n->port, script->name, l->str ? l->str : "refused");
                freeReplyObject(l);
                return NULL;
            }
            freeReplyObject(l);
            loaded = 1;
            if (asking)
                ask_idx = (int)(n - c->nodes);
            continue;
        }
        if (kind == RLOCK_REPLY_CLUSTERDOWN)
            c->stale = 1;
        return r;
    }
}

redisReply *rlock_cluster_command(struct rlock_cluster *c, unsigned slot, int argc,
                                  const char **argv, const size_t *lens, char *err, size_t errlen)
{
    return run(c, slot, argc, argv, lens, NULL, err, errlen);
}

redisReply *rlock_cluster_script(struct rlock_cluster *c, const struct rlock_script *s, int nkeys,
                                 int nargs, const char **argv, const size_t *lens, char *err,
                                 size_t errlen)
{
    if (nkeys < 0 || nargs < 0) {
        rlock_err_set(err, errlen, "cluster: negative key or argument count");
        return NULL;
    }
    int n = nkeys + nargs, argc = 3 + n;
    const char **av = malloc(sizeof *av * (size_t)argc);
    size_t *al = malloc(sizeof *al * (size_t)argc);
    if (!av || !al) {
        free(av);
        free(al);
        rlock_err_set(err, errlen, "cluster: out of memory");
        return NULL;
    }
    char num[RLOCK_RESP_DIGITS_MAX];
    rlock_script_argv(s, 0, nkeys, nargs, argv, lens, av, al, num);
    unsigned slot = nkeys > 0 ? rlock_cluster_slot(av[3], al[3]) : 0;
    redisReply *r = run(c, slot, argc, av, al, s, err, errlen);
    free(av);
    free(al);
    return r;
}

/* ---- lock calls on a cluster ---- */

/* The cluster's answer in why, the message of a failed lock call: the
 * server's error reply at its start or after its first ": " (the library
 * words its messages "<what>: <reply>"); RLOCK_REPLY_ERROR when there is
 * none.  *at is where the answer starts. */
static enum rlock_reply_kind answer_in(const char *why, const char **at)
{
    const char *sep = why ? strstr(why, ": ") : NULL;
    const char *cand[] = {why, sep ? sep + 2 : NULL};
    for (size_t i = 0; i < 2; i++) {
        enum rlock_reply_kind k = cand[i] ? rlock_error_kind(cand[i]) : RLOCK_REPLY_ERROR;
        if (k == RLOCK_REPLY_MOVED || k == RLOCK_REPLY_ASK || k == RLOCK_REPLY_TRYAGAIN ||
            k == RLOCK_REPLY_CLUSTERDOWN) {
            *at = cand[i];
            return k;
        }
    }
    return RLOCK_REPLY_ERROR;
}

/* Readies node n for a lock call redirected by ASK: every script of the
 * library loaded there first (what ASKING allows covers one command, and an
 * EVAL after a NOSCRIPT would go without it), then ASKING, in one round
 * trip.  A script refused is left to the call's own NOSCRIPT handling.
 * Returns 0, or -1 with err set (n closed on I/O error). */
static int ask_ready(struct rlock_cluster *c, struct node *n, char *err, size_t errlen)
{
    /* Functions are loaded ahead of time, never here. */
    int nload = rlock_lua((enum rlock_lua)0)->function ? 0 : RLOCK_LUA_COUNT;
    int sent = 0, asking = 0;
    for (; sent < nload; sent++) {
        const struct rlock_script *s = rlock_lua((enum rlock_lua)sent);
        if (redisAppendCommand(n->ctx, "SCRIPT LOAD %b", s->text, s->len) != REDIS_OK)
            break;
    }
    if (sent == nload && redisAppendCommand(n->ctx, "ASKING") == REDIS_OK)
        sent++;
    for (int i = 0; i < sent; i++) {
        void *r = NULL;
        if (redisGetReply(n->ctx, &r) != REDIS_OK)
            break;
        asking = i == nload && r && ((redisReply *)r)->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
    }
    if (asking)
        return 0;
    rlock_err_set(err, errlen, "cluster node %s:%d: ASKING: %s", n->host, n->port,
                  n->ctx->errstr[0] ? n->ctx->errstr : "refused");
    if (n->ctx->err) {
        node_close(n);
        c->stale = 1;
    }
    return -1;
}

enum rlock_status rlock_cluster_lock(struct rlock_cluster *c, const char *key, int64_t deadline_ms,
                                     rlock_cluster_lock_fn *fn, void *arg, char *err, size_t errlen)
{
    if (!key) {
        rlock_err_set(err, errlen, "cluster: a lock call needs its key");
        return RLOCK_ERR;
    }
    unsigned slot = rlock_cluster_slot(key, strlen(key));
    struct rlock_cluster_redirects rd = {.deadline_ms = deadline_ms,
                                         .tryagain_ms = c->o.tryagain_ms};
    int ask_idx = -1, remapped = 0;
    for (;;) {
        struct node *n;
        if (ask_idx >= 0) {
            if (!(n = node_connected(c, &c->nodes[ask_idx], err, errlen)) ||
                ask_ready(c, n, err, errlen) != 0)
                return RLOCK_ERR;
        } else if (!(n = node_for(c, slot, err, errlen))) {
            /* Nothing was sent: once, the map is read again (a replica may
             * hold the slot by now). */
            if (remapped++ || !c->stale)
                return RLOCK_ERR;
            continue;
        }
        ask_idx = -1;
        const char *why = NULL, *at = NULL;
        enum rlock_status st = fn(n->ctx, arg, &why);
        if (n->ctx->err) { /* it may have run: never sent again */
            node_close(n);
            c->stale = 1;
            return st;
        }
        enum rlock_reply_kind a = st == RLOCK_ERR ? answer_in(why, &at) : RLOCK_REPLY_ERROR;
        if (a == RLOCK_REPLY_ERROR)
            return st;
        if (a == RLOCK_REPLY_CLUSTERDOWN) {
            c->stale = 1;
            return st;
        }
        /* A message that filled a lock's err may have been cut inside the
         * address, which would then name the wrong node: none is taken from
         * it (MOVED: the map read whole names the owner; ASK: given up). */
        int cut = strlen(why) >= sizeof((struct rlock *)0)->err - 1;
        struct rlock_cluster_redirect to;
        int64_t now = rlock_mono_ms();
        enum rlock_cluster_step step = rlock_cluster_follow(&rd, a, cut ? NULL : at, now, &to);
        if (step == RLOCK_CLUSTER_TRYAGAIN) {
            rlock_sleep_until(now + (rd.tryagain_ms > 0 ? rd.tryagain_ms : 1));
            continue;
        }
        if (step == RLOCK_CLUSTER_DELIVER) {
            /* a MOVED whose target was cut still says the map is stale:
             * read it whole and go again, within the redirect cap */
            if (!(a == RLOCK_REPLY_MOVED && cut && rd.hops < RLOCK_CLUSTER_MAX_REDIRECTS))
                return st;
            rd.hops++;
            c->redirects++;
            c->stale = 1;
            continue;
        }
        int idx = node_index(c, to.host, to.port);
        c->redirects++;
        if (step == RLOCK_CLUSTER_MOVED) {
            if (idx >= 0) {
                c->slot_node[to.slot] = (uint16_t)idx;
                c->nodes[idx].master = 1;
            }
            c->stale = 1;
            continue;
        }
        if (idx < 0)
            return st; /* an ASK to a node we cannot name */
        ask_idx = idx;
    }
}

int rlock_cluster_nmasters(struct rlock_cluster *c, char *err, size_t errlen)
{
    if (c->stale && rlock_cluster_refresh(c, err, errlen) != 0 && c->nnodes == 0)
        return -1;
    int n = 0;
    for (int i = 0; i < c->nnodes; i++)
        n += c->nodes[i].master;
    return n;
}

redisContext *rlock_cluster_master(struct rlock_cluster *c, int i, char *err, size_t errlen)
{
    struct node *n = NULL;
    for (int k = 0, seen = 0; k < c->nnodes; k++)
        if (c->nodes[k].master && seen++ == i) {
            n = &c->nodes[k];
            break;
        }
    if (!n) {
        rlock_err_set(err, errlen, "cluster: no master %d", i);
        return NULL;
    }
    return node_connected(c, n, err, errlen) ? n->ctx : NULL;
}

redisReply *rlock_cluster_on_master(struct rlock_cluster *c, int i, int argc, const char **argv,
                                    const size_t *lens, char *err, size_t errlen)
{
    redisContext *ctx = rlock_cluster_master(c, i, err, errlen);
    if (!ctx)
        return NULL;
    redisReply *r = redisCommandArgv(ctx, argc, argv, lens);
    if (!r) {
        rlock_err_set(err, errlen, "cluster master %d: %s: %s", i, argv[0], ctx->errstr);
        for (int k = 0; k < c->nnodes; k++)
            if (c->nodes[k].ctx == ctx)
                node_close(&c->nodes[k]);
        c->stale = 1;
    }
    return r;
}

unsigned long rlock_cluster_redirects(const struct rlock_cluster *c)
{
    return c->redirects;
}
