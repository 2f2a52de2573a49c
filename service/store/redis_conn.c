#include "store/redis_conn.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"

static struct rlock_sentinel_watch *followed;

static void on_master_change(const struct rlock_url_node *old, const struct rlock_url_node *now,
                             const char *how, void *arg)
{
    (void)arg;
    if (old)
        log_warn("redis: the Sentinels name a new master, %s:%d (was %s:%d; %s)", now->host,
                 now->port, old->host, old->port, how);
    else
        log_info("redis: the Sentinels name the master %s:%d", now->host, now->port);
}

int redis_conn_follow_start(const struct cfg *c, char *err, size_t errlen)
{
    struct rlock_url u;
    if (rlock_url_parse(c->redis_url, &u, err, errlen) != 0)
        return -1;
    if (u.nsentinels == 0)
        return 0;
    struct rlock_sentinel_watch_opts o = {.timeout_ms = (int)c->redis_connect_timeout_ms,
                                          .poll_ms = (int)c->redis_sentinel_poll_ms,
                                          .retry_ms = (int)c->redis_reconnect_ms,
                                          .on_change = on_master_change};
    followed = rlock_sentinel_watch_start(&u, &o, err, errlen);
    if (!followed)
        return -1;
    /* A moment for its first answer, so that the event loops' first
     * connections take the address from it instead of asking themselves
     * (a blocking question on a loop); none by then is fine: they ask. */
    struct rlock_url_node n;
    for (int waited = 0; waited < o.timeout_ms && rlock_sentinel_master(followed, &n, NULL) != 0;
         waited += 10) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

void redis_conn_follow_stop(void)
{
    rlock_sentinel_watch_stop(followed);
    followed = NULL;
}

struct rlock_sentinel_watch *redis_conn_followed(void)
{
    return followed;
}

int redis_conn_init(struct redis_conn *rc, const struct cfg *c, char *err, size_t errlen)
{
    memset(rc, 0, sizeof *rc);
    rc->connect_timeout_ms = (int)c->redis_connect_timeout_ms;
    rc->timeout_ms = (int)c->redis_timeout_ms;
    if (rlock_url_parse(c->redis_url, &rc->target, err, errlen) != 0)
        return -1;
    if (rc->target.nsentinels > 0)
        rc->target.watch = followed;
    return 0;
}

/* A cluster's seed nodes in turn, as plain servers. */
static redisContext *open_seed(const struct redis_conn *rc, char *err, size_t errlen)
{
    for (int i = 0; i < rc->target.nseeds; i++) {
        struct rlock_url u = rc->target;
        memcpy(u.host, u.seed[i].host, sizeof u.host);
        u.port = u.seed[i].port;
        u.nseeds = 0;
        redisContext *c =
            rlock_url_connect(&u, rc->connect_timeout_ms, rc->timeout_ms, err, errlen);
        if (c)
            return c;
    }
    return NULL;
}

redisContext *redis_conn_open(void *template)
{
    const struct redis_conn *rc = template;
    char err[320];
    redisContext *c = rc->target.nseeds > 0 ? open_seed(rc, err, sizeof err)
                                            : rlock_url_connect(&rc->target, rc->connect_timeout_ms,
                                                                rc->timeout_ms, err, sizeof err);
    if (!c)
        log_warn("%s", err);
    return c;
}

int redis_conn_check_credentials(const struct redis_conn *rc, char *err, size_t errlen)
{
    if (rc->target.nseeds > 0) { /* a seed node tells as well as any */
        char why[320];
        redisContext *c = open_seed(rc, why, sizeof why);
        if (c) {
            redisFree(c);
            return 0;
        }
        /* Refused (not cut off): rlock_url_handshake's messages say "refused". */
        if (strstr(why, "refused:")) {
            snprintf(err, errlen, "%s", why);
            return -1;
        }
        log_warn("redis cluster not reachable at start-up (%s); carrying on, it is retried", why);
        return 0;
    }
    struct rlock_url resolved = rc->target;
    const struct rlock_url *t = &resolved;
    char why[320];
    if (rlock_url_resolve(&resolved, rc->connect_timeout_ms, why, sizeof why) != 0) {
        log_warn("redis: %s at start-up; carrying on, it is retried", why);
        return 0;
    }
    struct timeval tv = rlock_ms_tv(rc->connect_timeout_ms);
    redisContext *c = redisConnectWithTimeout(t->host, t->port, tv);
    if (!c || c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        log_warn("redis %s:%d not reachable at start-up (%s); carrying on, it is retried", t->host,
                 t->port, c && c->err ? c->errstr : "no memory or no timeout");
        redisFree(c);
        return 0;
    }
    int failed = rlock_url_handshake(c, t, err, errlen) != 0;
    /* Refused by the server (not cut off): the credentials or the db are wrong. */
    int refused = failed && c->err == 0;
    if (failed && !refused)
        log_warn("redis %s:%d: %s; carrying on, it is retried", t->host, t->port, err);
    redisFree(c);
    return refused ? -1 : 0;
}

/*
 * True when a kept connection can no longer carry a request.  Redis sends
 * nothing unasked on a request/reply connection (no pub/sub, no MONITOR
 * here), so a readable socket means it was closed (restart, CLIENT KILL,
 * idle timeout) or broken; without this the next call would write into it
 * and fail.  One poll() with a zero timeout: no round trip.
 */
static int conn_stale(const redisContext *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int n = poll(&p, 1, 0);
    return n != 0; /* ready (EOF, error, stray bytes) or poll itself failed */
}

void redis_conn_set_deadline(struct redis_conn *rc, int64_t deadline_ms)
{
    rc->deadline_ms = deadline_ms > 0 ? deadline_ms : 0;
}

int64_t redis_conn_deadline(const struct redis_conn *rc)
{
    return rc->deadline_ms;
}

/* What is left of rc's deadline, in ms: 'cap' without one, at most 'cap'
 * with one, and 0 once it has passed (logged). */
static int deadline_left(const struct redis_conn *rc, int cap)
{
    if (rc->deadline_ms == 0)
        return cap;
    int64_t left = rc->deadline_ms - clock_mono_ms();
    if (left <= 0) {
        log_debug("redis: the request's deadline passed; nothing sent");
        return 0;
    }
    return left < cap ? (int)left : cap;
}

/* Sets the socket timeout of rc->ctx to ms unless it has it already. */
static int apply_timeout(struct redis_conn *rc, int ms)
{
    if (rc->applied_ms == ms)
        return 0;
    struct timeval tv = rlock_ms_tv(ms);
    if (redisSetTimeout(rc->ctx, tv) != REDIS_OK)
        return -1;
    rc->applied_ms = ms;
    return 0;
}

/* The options of every cluster client made for rc. */
static struct rlock_cluster_opts cluster_opts(const struct redis_conn *rc)
{
    return (struct rlock_cluster_opts){.connect_timeout_ms = rc->connect_timeout_ms,
                                       .io_timeout_ms = rc->timeout_ms,
                                       .tryagain_ms = REDIS_CONN_TRYAGAIN_MS};
}

struct rlock_watchdog *redis_conn_watchdog(struct redis_conn *rc,
                                           const struct rlock_watchdog_opts *o, char *err,
                                           size_t errlen)
{
    if (rc->target.nseeds == 0)
        return rlock_watchdog_new(redis_conn_open, rc, o, err, errlen);
    struct rlock_cluster_opts co = cluster_opts(rc);
    co.io_timeout_ms = 0; /* each renewal: the watchdog's own bound */
    return rlock_watchdog_new_cluster(&rc->target, &co, o, err, errlen);
}

/* The cluster client, made on first use. */
static struct rlock_cluster *cluster_of(struct redis_conn *rc)
{
    if (!rc->cluster) {
        struct rlock_cluster_opts o = cluster_opts(rc);
        char err[320];
        rc->cluster = rlock_cluster_new(&rc->target, &o, err, sizeof err);
        if (!rc->cluster)
            log_warn("redis cluster: %s", err);
    }
    return rc->cluster;
}

static int ieq(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

/* The slot of command argv's keys (see redis_conn.h); 0 without a key. */
static unsigned cmd_slot(int argc, const char **argv, const size_t *lens)
{
    int k = -1;
    if (argc >= 3 && (ieq(argv[0], "XGROUP") || ieq(argv[0], "XINFO")))
        k = 2;
    else if (ieq(argv[0], "XREADGROUP") || ieq(argv[0], "XREAD")) {
        for (int i = 1; i + 1 < argc; i++)
            if (ieq(argv[i], "STREAMS")) {
                k = i + 1;
                break;
            }
    } else if (argc >= 4 && (ieq(argv[0], "EVALSHA") || ieq(argv[0], "EVAL") ||
                             ieq(argv[0], "FCALL") || ieq(argv[0], "FCALL_RO")))
        k = atoi(argv[2]) > 0 ? 3 : -1;
    else if (argc >= 2 && !ieq(argv[0], "PING") && !ieq(argv[0], "INFO") &&
             !ieq(argv[0], "PUBLISH") && !ieq(argv[0], "SCAN") && !ieq(argv[0], "SCRIPT") &&
             !ieq(argv[0], "FUNCTION") && !ieq(argv[0], "CLIENT") && !ieq(argv[0], "CLUSTER") &&
             !ieq(argv[0], "TIME"))
        k = 1;
    if (k < 0 || k >= argc)
        return 0;
    return rlock_cluster_slot(argv[k], lens ? lens[k] : strlen(argv[k]));
}

int redis_conn_nservers(struct redis_conn *rc)
{
    if (rc->target.nseeds == 0)
        return 1;
    struct rlock_cluster *c = cluster_of(rc);
    char err[320];
    int n = c ? rlock_cluster_nmasters(c, err, sizeof err) : -1;
    if (c && n < 0)
        log_warn("redis cluster: %s", err);
    return n;
}

redisContext *redis_conn_server(struct redis_conn *rc, int i)
{
    if (rc->target.nseeds == 0)
        return i == 0 ? redis_conn_get(rc) : NULL;
    struct rlock_cluster *c = cluster_of(rc);
    char err[320];
    redisContext *ctx = c ? rlock_cluster_master(c, i, err, sizeof err) : NULL;
    if (c && !ctx)
        log_warn("redis cluster: %s", err);
    return ctx;
}

redisContext *redis_conn_get_for(struct redis_conn *rc, const char *key)
{
    if (rc->target.nseeds == 0)
        return redis_conn_get(rc);
    if (deadline_left(rc, 1) == 0)
        return NULL;
    struct rlock_cluster *c = cluster_of(rc);
    char err[320];
    redisContext *ctx =
        c ? rlock_cluster_node(c, rlock_cluster_slot(key, strlen(key)), err, sizeof err) : NULL;
    if (c && !ctx)
        log_warn("redis cluster: %s", err);
    return ctx;
}

enum rlock_status redis_conn_lock(struct redis_conn *rc, const char *key, int64_t deadline_ms,
                                  rlock_cluster_lock_fn *fn, void *arg, char *err, size_t errlen)
{
    if (rc->target.nseeds > 0) {
        struct rlock_cluster *c = deadline_left(rc, 1) > 0 ? cluster_of(rc) : NULL;
        if (!c) {
            snprintf(err, errlen, "redis cluster: no client, or the request's deadline passed");
            return RLOCK_ERR;
        }
        return rlock_cluster_lock(c, key, deadline_ms, fn, arg, err, errlen);
    }
    redisContext *c = redis_conn_get(rc);
    if (!c) {
        snprintf(err, errlen, "redis: no connection");
        return RLOCK_ERR;
    }
    const char *why = NULL;
    enum rlock_status st = fn(c, arg, &why);
    if (c->err)
        redis_conn_close(rc);
    return st;
}

/* The release itself, within redis_timeout_ms. */
static enum rlock_status release_now(struct redis_conn *rc, struct rlock *l)
{
    if (rc->target.nseeds > 0) {
        struct rlock_cluster *c = cluster_of(rc);
        if (c)
            return rlock_cluster_release(c, l);
    } else {
        redisContext *c = redis_conn_get(rc);
        if (c) {
            enum rlock_status st = rlock_release(c, l);
            if (c->err)
                redis_conn_close(rc);
            return st;
        }
    }
    rlock_clear(l);
    snprintf(l->err, sizeof l->err, "release: no connection");
    return RLOCK_ERR;
}

enum rlock_status redis_conn_release(struct redis_conn *rc, struct rlock *l)
{
    /* Not bounded by the request's deadline: a lock left to its lease would
     * hold up every writer and operator of the SKU for lock_ttl_ms, far
     * longer than the one command a release costs. */
    int64_t deadline = rc->deadline_ms;
    rc->deadline_ms = 0;
    enum rlock_status st = release_now(rc, l);
    rc->deadline_ms = deadline;
    return st;
}

int redis_conn_server_of(struct redis_conn *rc, const char *key)
{
    if (rc->target.nseeds == 0)
        return 0;
    redisContext *ctx = redis_conn_get_for(rc, key);
    int n = ctx ? redis_conn_nservers(rc) : -1;
    for (int i = 0; i < n; i++) /* one connection per master: the same context */
        if (redis_conn_server(rc, i) == ctx)
            return i;
    return -1;
}

redisContext *redis_conn_get(struct redis_conn *rc)
{
    int left = deadline_left(rc, rc->timeout_ms);
    if (left == 0)
        return NULL;
    if (rc->target.nseeds > 0)
        return redis_conn_get_for(rc, ""); /* slot 0's master */
    if (!(rc->ctx && rc->ctx->err == 0 && !conn_stale(rc->ctx) &&
          !rlock_sentinel_moved(&rc->target, rc->gen))) {
        redis_conn_close(rc);
        /* before: a move meanwhile is seen next time */
        rc->gen = rlock_url_generation(&rc->target);
        /* the connect, too, within what is left */
        struct redis_conn bounded = *rc;
        bounded.connect_timeout_ms = deadline_left(rc, rc->connect_timeout_ms);
        bounded.timeout_ms = left;
        if (bounded.connect_timeout_ms == 0)
            return NULL;
        rc->ctx = redis_conn_open(&bounded);
        if (!rc->ctx)
            return NULL;
        rc->applied_ms = left;
    }
    /* Each command waits what is left of the request's deadline, at most its
     * own timeout (back to that once the deadline is cleared). */
    if (apply_timeout(rc, left) != 0) {
        redis_conn_close(rc);
        return NULL;
    }
    return rc->ctx;
}

/* A READONLY answer: the server was demoted (a failover); the next call
 * reconnects, through the Sentinels when the URL names them. */
static void drop_if_demoted(struct redis_conn *rc, const redisReply *r)
{
    if (rlock_reply_kind(r) != RLOCK_REPLY_READONLY)
        return;
    log_warn("redis: the server is a replica now (%s); reconnecting", r->str);
    redis_conn_close(rc);
}

/* A command on a cluster, to the master of slot; NULL (logged) on failure. */
static redisReply *cluster_cmd(struct redis_conn *rc, unsigned slot, int argc, const char **argv,
                               const size_t *lens)
{
    if (deadline_left(rc, 1) == 0)
        return NULL;
    struct rlock_cluster *cl = cluster_of(rc);
    char err[320];
    redisReply *r = cl ? rlock_cluster_command(cl, slot, argc, argv, lens, err, sizeof err) : NULL;
    if (cl && !r)
        log_warn("redis %s failed: %s", argv[0], err);
    return r;
}

redisReply *redis_conn_cmd(struct redis_conn *rc, int argc, const char **argv, const size_t *lens)
{
    if (rc->target.nseeds > 0)
        return cluster_cmd(rc, cmd_slot(argc, argv, lens), argc, argv, lens);
    redisContext *c = redis_conn_get(rc);
    if (!c)
        return NULL;
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    if (!r) {
        log_warn("redis %s failed: %s", argv[0], c->errstr);
        redis_conn_close(rc);
    }
    drop_if_demoted(rc, r);
    return r;
}

/* A cluster's pipeline: each command on its slot's master, appended to
 * that master's connection, the replies read back in order (each
 * connection answers in its own order); a redirected command runs again
 * on its own.  Returns 0, or -1 (out all NULL). */
static int cluster_pipeline(struct redis_conn *rc, size_t n, const int *argcs,
                            const char *const *const *argvs, redisReply **out)
{
    if (deadline_left(rc, 1) == 0)
        return -1;
    struct rlock_cluster *cl = cluster_of(rc);
    redisContext **on = xcalloc(n ? n : 1, sizeof *on);
    int *node = xcalloc(n ? n : 1, sizeof *node);
    char err[320] = "";
    int rc_ = cl ? 0 : -1;
    /* Every command routed (map read, nodes connected) before the first is
     * appended: routing may close or replace a connection, which must not
     * hold unread commands then. */
    for (size_t i = 0; i < n && rc_ == 0; i++) {
        const char **argv = (const char **)argvs[i];
        node[i] = rlock_cluster_node_of(cl, cmd_slot(argcs[i], argv, NULL), err, sizeof err);
        rc_ = node[i] < 0 ? -1 : 0;
    }
    for (size_t i = 0; i < n && rc_ == 0; i++) {
        on[i] = rlock_cluster_node_ctx(cl, node[i]);
        if (!on[i]) /* closed by a later command's routing */
            snprintf(err, sizeof err, "a node's connection was replaced while routing");
        if (!on[i] ||
            redisAppendCommandArgv(on[i], argcs[i], (const char **)argvs[i], NULL) != REDIS_OK)
            rc_ = -1;
    }
    for (size_t i = 0; i < n && rc_ == 0; i++) {
        void *r = NULL;
        if (redisGetReply(on[i], &r) != REDIS_OK || !r) {
            snprintf(err, sizeof err, "%s", on[i]->errstr);
            rc_ = -1;
            break;
        }
        out[i] = r;
    }
    for (size_t i = 0; i < n && rc_ == 0; i++) {
        enum rlock_reply_kind kind = rlock_reply_kind(out[i]);
        if (kind == RLOCK_REPLY_MOVED || kind == RLOCK_REPLY_ASK || kind == RLOCK_REPLY_TRYAGAIN) {
            freeReplyObject(out[i]);
            const char **argv = (const char **)argvs[i];
            out[i] = rlock_cluster_command(cl, cmd_slot(argcs[i], argv, NULL), argcs[i], argv, NULL,
                                           err, sizeof err);
            if (!out[i])
                rc_ = -1;
        }
    }
    free(on);
    free(node);
    if (rc_ == 0)
        return 0;
    if (cl)
        log_warn("redis cluster pipeline of %zu commands failed: %s", n, err);
    for (size_t i = 0; i < n; i++) {
        if (out[i])
            freeReplyObject(out[i]);
        out[i] = NULL;
    }
    redis_conn_close(rc); /* connections with unread replies are of no use */
    return -1;
}

redisReply *redis_conn_cmd_at(struct redis_conn *rc, const char *key, int argc, const char **argv,
                              const size_t *lens)
{
    if (rc->target.nseeds == 0)
        return redis_conn_cmd(rc, argc, argv, lens);
    return cluster_cmd(rc, rlock_cluster_slot(key, strlen(key)), argc, argv, lens);
}

int redis_conn_pipeline(struct redis_conn *rc, size_t n, const int *argcs,
                        const char *const *const *argvs, redisReply **out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (rc->target.nseeds > 0)
        return cluster_pipeline(rc, n, argcs, argvs, out);
    redisContext *c = redis_conn_get(rc);
    if (!c)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (redisAppendCommandArgv(c, argcs[i], (const char **)argvs[i], NULL) != REDIS_OK)
            goto fail;
    for (size_t i = 0; i < n; i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK || !r)
            goto fail;
        out[i] = r;
    }
    for (size_t i = 0; i < n; i++)
        drop_if_demoted(rc, out[i]);
    return 0;
fail:
    log_warn("redis pipeline of %zu commands failed: %s", n, c->errstr);
    for (size_t i = 0; i < n; i++) {
        if (out[i])
            freeReplyObject(out[i]);
        out[i] = NULL;
    }
    redis_conn_close(rc);
    return -1;
}

redisReply *redis_conn_script(struct redis_conn *rc, const struct rlock_script *s, int nkeys,
                              int nargs, const char **argv, const size_t *lens)
{
    if (rc->target.nseeds > 0) {
        struct rlock_cluster *cl = deadline_left(rc, 1) > 0 ? cluster_of(rc) : NULL;
        char err[320];
        redisReply *r =
            cl ? rlock_cluster_script(cl, s, nkeys, nargs, argv, lens, err, sizeof err) : NULL;
        if (cl && !r)
            log_warn("redis script %s failed: %s", s->name, err);
        return r;
    }
    redisContext *c = redis_conn_get(rc);
    if (!c)
        return NULL;
    redisReply *r = rlock_script_run(c, s, nkeys, nargs, argv, lens);
    if (!r) {
        log_warn("redis script %s failed: %s", s->name, c->errstr);
        redis_conn_close(rc);
    }
    drop_if_demoted(rc, r);
    return r;
}

void redis_conn_close(struct redis_conn *rc)
{
    if (rc->ctx)
        redisFree(rc->ctx);
    rc->ctx = NULL;
    rc->applied_ms = 0;
    rlock_cluster_free(rc->cluster);
    rc->cluster = NULL;
}
