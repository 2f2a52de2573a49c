#include "store/redis_conn.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return followed ? 0 : -1;
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

redisContext *redis_conn_open(void *template)
{
    const struct redis_conn *rc = template;
    char err[320];
    redisContext *c =
        rlock_url_connect(&rc->target, rc->connect_timeout_ms, rc->timeout_ms, err, sizeof err);
    if (!c)
        log_warn("%s", err);
    return c;
}

int redis_conn_check_credentials(const struct redis_conn *rc, char *err, size_t errlen)
{
    struct rlock_url resolved = rc->target;
    const struct rlock_url *t = &resolved;
    char why[320];
    if (rlock_url_resolve(&resolved, rc->connect_timeout_ms, why, sizeof why) != 0) {
        log_warn("redis: %s at start-up; carrying on, it is retried", why);
        return 0;
    }
    struct timeval tv = {rc->connect_timeout_ms / 1000, (rc->connect_timeout_ms % 1000) * 1000};
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

redisContext *redis_conn_get(struct redis_conn *rc)
{
    if (rc->ctx && rc->ctx->err == 0 && !conn_stale(rc->ctx) &&
        !rlock_sentinel_moved(&rc->target, rc->gen))
        return rc->ctx;
    redis_conn_close(rc);
    rc->gen = rlock_url_generation(&rc->target); /* before: a move meanwhile is seen next time */
    rc->ctx = redis_conn_open(rc);
    return rc->ctx;
}

/* A READONLY answer: the server was demoted (a failover); the next call
 * reconnects, through the Sentinels when the URL names them. */
static void drop_if_demoted(struct redis_conn *rc, const redisReply *r)
{
    if (!rlock_reply_is_readonly(r))
        return;
    log_warn("redis: the server is a replica now (%s); reconnecting", r->str);
    redis_conn_close(rc);
}

redisReply *redis_conn_cmd(struct redis_conn *rc, int argc, const char **argv, const size_t *lens)
{
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

int redis_conn_pipeline(struct redis_conn *rc, size_t n, const int *argcs,
                        const char *const *const *argvs, redisReply **out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
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
}
