#include "store/redis_conn.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

int redis_parse_url(const char *url, struct redis_target *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->port = 6379;
    const char *p = url;
    if (strncmp(p, "redis://", 8) != 0) {
        snprintf(err, errlen, "redis_url must start with redis://");
        return -1;
    }
    p += 8;
    const char *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *pw = colon ? colon + 1 : p;
        size_t n = (size_t)(at - pw);
        if (n >= sizeof t->password) {
            snprintf(err, errlen, "redis_url password too long");
            return -1;
        }
        memcpy(t->password, pw, n);
        p = at + 1;
    }
    size_t hl = strcspn(p, ":/");
    if (hl == 0 || hl >= sizeof t->host) {
        snprintf(err, errlen, "redis_url has no valid host");
        return -1;
    }
    memcpy(t->host, p, hl);
    p += hl;
    if (*p == ':') {
        char *end;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/')) {
            snprintf(err, errlen, "redis_url has an invalid port");
            return -1;
        }
        t->port = (int)port;
        p = end;
    }
    if (*p == '/' && p[1]) {
        char *end;
        long db = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end || db < 0 || db > 1000000) {
            snprintf(err, errlen, "redis_url has an invalid database number");
            return -1;
        }
        t->db = (int)db;
    }
    return 0;
}

int redis_conn_init(struct redis_conn *rc, const struct cfg *c, char *err, size_t errlen)
{
    memset(rc, 0, sizeof *rc);
    rc->connect_timeout_ms = (int)c->redis_connect_timeout_ms;
    rc->timeout_ms = (int)c->redis_timeout_ms;
    return redis_parse_url(c->redis_url, &rc->target, err, errlen);
}

static struct timeval ms_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Sends AUTH / SELECT on a fresh connection.  Returns 0 or -1. */
static int handshake(const struct redis_target *t, redisContext *c)
{
    char db[16];
    snprintf(db, sizeof db, "%d", t->db);
    const char *auth[] = {"AUTH", t->password};
    const char *sel[] = {"SELECT", db};
    for (int step = 0; step < 2; step++) {
        if (step == 0 && t->password[0] == '\0')
            continue;
        if (step == 1 && t->db == 0)
            continue;
        redisReply *r = redisCommandArgv(c, 2, step == 0 ? auth : sel, NULL);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        if (!ok)
            log_warn("redis %s failed: %s", step == 0 ? "AUTH" : "SELECT", r ? r->str : c->errstr);
        if (r)
            freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return 0;
}

redisContext *redis_conn_open(void *template)
{
    const struct redis_conn *rc = template;
    const struct redis_target *t = &rc->target;
    redisContext *c = redisConnectWithTimeout(t->host, t->port, ms_tv(rc->connect_timeout_ms));
    if (!c || c->err) {
        log_warn("redis connect %s:%d failed: %s", t->host, t->port,
                 c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, ms_tv(rc->timeout_ms)) != REDIS_OK || handshake(t, c) != 0) {
        redisFree(c);
        return NULL;
    }
    return c;
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
    if (rc->ctx && rc->ctx->err == 0 && !conn_stale(rc->ctx))
        return rc->ctx;
    redis_conn_close(rc);
    rc->ctx = redis_conn_open(rc);
    return rc->ctx;
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
    return r;
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
    return r;
}

void redis_conn_close(struct redis_conn *rc)
{
    if (rc->ctx)
        redisFree(rc->ctx);
    rc->ctx = NULL;
}
