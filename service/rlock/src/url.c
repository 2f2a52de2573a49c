#include "rlock/url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SCHEME "redis://"
#define SENTINEL_SCHEME "redis-sentinel://"
#define CLUSTER_SCHEME "redis-cluster://"
#define MAX_DB 1000000

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes src[0..n) into out (cap bytes, NUL-terminated).  Returns 0,
 * or -1 on a bad escape, an encoded NUL, or when it does not fit. */
static int decode(const char *src, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)src[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex_value(src[i + 1]) : -1;
            int lo = i + 2 < n ? hex_value(src[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}

/* Splits userinfo[0..n) at its first ':' into u->user and u->password. */
static int parse_userinfo(const char *info, size_t n, struct rlock_url *u, char *err, size_t errlen)
{
    const char *colon = memchr(info, ':', n);
    if (!colon) {
        rlock_err_set(err, errlen,
                      "redis URL: the part before '@' needs a ':' (redis://:PASSWORD@HOST or "
                      "redis://USER:PASSWORD@HOST)");
        return -1;
    }
    size_t ul = (size_t)(colon - info);
    if (decode(info, ul, u->user, sizeof u->user) != 0) {
        rlock_err_set(err, errlen,
                      "redis URL: bad user name (a bad %%-escape, or longer than %zu bytes)",
                      sizeof u->user - 1);
        return -1;
    }
    if (decode(colon + 1, n - ul - 1, u->password, sizeof u->password) != 0) {
        rlock_err_set(err, errlen,
                      "redis URL: bad password (a bad %%-escape, or longer than %zu bytes)",
                      sizeof u->password - 1);
        return -1;
    }
    if (u->password[0] == '\0') {
        rlock_err_set(err, errlen, "redis URL: the password after ':' is empty");
        return -1;
    }
    return 0;
}

/* Parses "HOST[:PORT]" at *p up to one of the bytes in 'stop' (or the end)
 * into n, *p moving past it.  Returns 0 or -1. */
static int parse_node(const char **p, const char *stop, struct rlock_url_node *n)
{
    size_t hl = strcspn(*p, stop);
    size_t colon = strcspn(*p, ":");
    if (colon < hl)
        hl = colon;
    if (hl == 0 || hl >= sizeof n->host)
        return -1;
    memcpy(n->host, *p, hl);
    n->host[hl] = '\0';
    *p += hl;
    if (**p == ':') {
        char *end;
        long port = strtol(*p + 1, &end, 10);
        if (end == *p + 1 || port < 1 || port > 65535 || (*end && !strchr(stop, *end)))
            return -1;
        n->port = (int)port;
        *p = end;
    }
    return 0;
}

/* Parses "/DB" (or nothing) at p into u->db. */
static int parse_db(const char *p, struct rlock_url *u, char *err, size_t errlen)
{
    if (*p == '/' && p[1]) {
        char *end;
        long db = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end || db < 0 || db > MAX_DB) {
            rlock_err_set(err, errlen, "redis URL has an invalid database number");
            return -1;
        }
        u->db = (int)db;
    } else if (*p && strcmp(p, "/") != 0) {
        rlock_err_set(err, errlen, "redis URL has an invalid database number");
        return -1;
    }
    return 0;
}

/* The rest of a redis-sentinel:// URL: "HOST[:PORT][,...]/MASTER[/DB]". */
static int parse_sentinels(const char *p, struct rlock_url *u, char *err, size_t errlen)
{
    for (;;) {
        if (u->nsentinels == RLOCK_URL_MAX_SENTINELS) {
            rlock_err_set(err, errlen, "redis-sentinel URL: more than %d Sentinels",
                          RLOCK_URL_MAX_SENTINELS);
            return -1;
        }
        struct rlock_url_node *n = &u->sentinel[u->nsentinels];
        n->port = RLOCK_URL_SENTINEL_PORT;
        if (parse_node(&p, ",/", n) != 0) {
            rlock_err_set(err, errlen, "redis-sentinel URL: Sentinel %d has no valid host or port",
                          u->nsentinels + 1);
            return -1;
        }
        u->nsentinels++;
        if (*p != ',')
            break;
        p++;
    }
    size_t ml = *p == '/' ? strcspn(p + 1, "/") : 0;
    if (ml == 0 || ml >= sizeof u->master) {
        rlock_err_set(err, errlen,
                      "redis-sentinel URL: the master's name is missing after the hosts "
                      "(redis-sentinel://HOST:PORT,.../NAME[/DB])");
        return -1;
    }
    for (size_t i = 1; i <= ml; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", p[i])) {
            rlock_err_set(err, errlen,
                          "redis-sentinel URL: the master's name may hold letters, "
                          "digits, '.', '_' and '-' only");
            return -1;
        }
    memcpy(u->master, p + 1, ml);
    u->master[ml] = '\0';
    u->host[0] = '\0'; /* the master's address comes from the Sentinels */
    u->port = 0;
    return parse_db(p + 1 + ml, u, err, errlen);
}

/* The rest of a redis-cluster:// URL: "HOST[:PORT][,...][/[0]]". */
static int parse_seeds(const char *p, struct rlock_url *u, char *err, size_t errlen)
{
    for (;;) {
        if (u->nseeds == RLOCK_URL_MAX_SEEDS) {
            rlock_err_set(err, errlen, "redis-cluster URL: more than %d nodes",
                          RLOCK_URL_MAX_SEEDS);
            return -1;
        }
        struct rlock_url_node *n = &u->seed[u->nseeds];
        n->port = RLOCK_URL_DEFAULT_PORT;
        if (parse_node(&p, ",/", n) != 0) {
            rlock_err_set(err, errlen, "redis-cluster URL: node %d has no valid host or port",
                          u->nseeds + 1);
            return -1;
        }
        u->nseeds++;
        if (*p != ',')
            break;
        p++;
    }
    if (*p && strcmp(p, "/") != 0 && strcmp(p, "/0") != 0) {
        rlock_err_set(err, errlen, "redis-cluster URL: a cluster has database 0 only");
        return -1;
    }
    u->host[0] = '\0'; /* each key's node comes from the slot map */
    u->port = 0;
    return 0;
}

static int parse(const char *url, struct rlock_url *u, char *err, size_t errlen)
{
    if (strncmp(url, "rediss://", 9) == 0) {
        rlock_err_set(err, errlen, "redis URL: rediss:// (TLS) is not supported; use redis://");
        return -1;
    }
    int sentinel = strncmp(url, SENTINEL_SCHEME, strlen(SENTINEL_SCHEME)) == 0;
    int cluster = strncmp(url, CLUSTER_SCHEME, strlen(CLUSTER_SCHEME)) == 0;
    if (!sentinel && !cluster && strncmp(url, SCHEME, strlen(SCHEME)) != 0) {
        rlock_err_set(err, errlen,
                      "redis URL must start with redis://, redis-sentinel:// or redis-cluster://");
        return -1;
    }
    const char *p = url + strlen(sentinel ? SENTINEL_SCHEME : cluster ? CLUSTER_SCHEME : SCHEME);
    const char *at = strrchr(p, '@');
    if (at) {
        if (parse_userinfo(p, (size_t)(at - p), u, err, errlen) != 0)
            return -1;
        p = at + 1;
    }
    if (sentinel)
        return parse_sentinels(p, u, err, errlen);
    if (cluster)
        return parse_seeds(p, u, err, errlen);
    struct rlock_url_node n = {.port = u->port};
    if (parse_node(&p, "/", &n) != 0) {
        rlock_err_set(err, errlen, "redis URL has no valid host, or an invalid port");
        return -1;
    }
    memcpy(u->host, n.host, sizeof u->host);
    u->port = n.port;
    return parse_db(p, u, err, errlen);
}

int rlock_url_parse(const char *url, struct rlock_url *u, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    u->port = RLOCK_URL_DEFAULT_PORT;
    if (parse(url, u, err, errlen) == 0)
        return 0;
    memset(u, 0, sizeof *u);
    return -1;
}

/* Fills argv with the AUTH command of u; returns its argc, 0 when u has no password. */
static int auth_argv(const struct rlock_url *u, const char *argv[3])
{
    if (u->password[0] == '\0')
        return 0;
    argv[0] = "AUTH";
    if (u->user[0] == '\0') {
        argv[1] = u->password;
        return 2;
    }
    argv[1] = u->user;
    argv[2] = u->password;
    return 3;
}

/* Whether an INFO replication reply says "role:master". */
static int says_master(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_STRING && strstr(r->str, "role:master\r\n") != NULL;
}

int rlock_sentinel_ask(const struct rlock_url *u, const struct rlock_url_node *s, int timeout_ms,
                       struct rlock_url_node *n, char *err, size_t errlen)
{
    redisContext *c = redisConnectWithTimeout(s->host, s->port, rlock_ms_tv(timeout_ms));
    if (!c || c->err || redisSetTimeout(c, rlock_ms_tv(timeout_ms)) != REDIS_OK) {
        rlock_err_set(err, errlen, "Sentinel %s:%d: %s", s->host, s->port,
                      c && c->err ? c->errstr : "cannot connect");
        redisFree(c);
        return -1;
    }
    struct rlock_url auth_only = *u; /* the Sentinel's own users: no SELECT, no master check */
    auth_only.db = 0;
    auth_only.nsentinels = 0;
    int rc = -1;
    if (rlock_url_handshake(c, &auth_only, err, errlen) == 0) {
        const char *argv[] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", u->master};
        redisReply *r = redisCommandArgv(c, 3, argv, NULL);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len > 0 &&
            r->element[0]->len < sizeof n->host) {
            long port = strtol(r->element[1]->str, NULL, 10);
            if (port >= 1 && port <= 65535) {
                snprintf(n->host, sizeof n->host, "%s", r->element[0]->str);
                n->port = (int)port;
                rc = 0;
            }
        }
        if (rc != 0)
            rlock_err_set(err, errlen, "Sentinel %s:%d knows no master '%s'%s%s", s->host, s->port,
                          u->master, r && r->type == REDIS_REPLY_ERROR ? ": " : "",
                          r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
    }
    redisFree(c);
    return rc;
}

/* What u's watch has seen: the first member of the watch (internal.h), read
 * here without calling into sentinel.c, which calls into this file. */
static struct rlock_master_seen *watch_seen(const struct rlock_url *u)
{
    return (struct rlock_master_seen *)(void *)u->watch;
}

/* rlock_url_resolve() without the watch: the Sentinels' first answer. */
static int ask_sentinels(struct rlock_url *u, int timeout_ms, char *err, size_t errlen)
{
    u->host[0] = '\0';
    u->port = 0;
    char last[320] = "";
    for (int i = 0; i < u->nsentinels; i++) {
        struct rlock_url_node n;
        if (rlock_sentinel_ask(u, &u->sentinel[i], timeout_ms, &n, last, sizeof last) == 0) {
            memcpy(u->host, n.host, sizeof u->host);
            u->port = n.port;
            return 0;
        }
    }
    rlock_err_set(err, errlen, "no Sentinel of %d named a master for '%s' (last: %s)",
                  u->nsentinels, u->master, last);
    return -1;
}

int rlock_url_resolve(struct rlock_url *u, int timeout_ms, char *err, size_t errlen)
{
    if (u->nseeds > 0) {
        rlock_err_set(err, errlen,
                      "a redis-cluster:// URL names no single server: use a cluster client");
        return -1;
    }
    if (u->nsentinels == 0)
        return 0;
    if (u->watch &&
        rlock_master_seen_get(watch_seen(u), u->host, sizeof u->host, &u->port, NULL) == 0)
        return 0;
    return ask_sentinels(u, timeout_ms, err, errlen);
}

uint64_t rlock_url_generation(const struct rlock_url *u)
{
    return u->watch ? rlock_master_seen_gen(watch_seen(u)) : 0;
}

/* Says why handshake step 'step' failed on c: an error reply is a refusal;
 * no reply is a server that did not answer within the I/O timeout (errno of
 * the read was 'read_errno') or a broken connection, never a refusal, so
 * that an operator chasing a stall is not sent to check the password. */
static void step_failed(char *err, size_t errlen, const char *step, const redisReply *r,
                        const redisContext *c, int read_errno)
{
    if (r)
        rlock_err_set(err, errlen, "redis %s refused: %s", step, r->str);
    else if (c->err == REDIS_ERR_IO && (read_errno == EAGAIN || read_errno == EWOULDBLOCK))
        rlock_err_set(err, errlen, "redis %s timed out: no answer within the I/O timeout", step);
    else
        rlock_err_set(err, errlen, "redis %s failed: %s", step, c->errstr);
}

int rlock_url_handshake(redisContext *c, const struct rlock_url *u, char *err, size_t errlen)
{
    const char *auth[3];
    int n = auth_argv(u, auth);
    if (n > 0) {
        errno = 0;
        redisReply *r = redisCommandArgv(c, n, auth, NULL);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            char step[sizeof u->user + 32];
            snprintf(step, sizeof step, "AUTH as %s%s%s", u->user[0] ? "user '" : "",
                     u->user[0] ? u->user : "the default user", u->user[0] ? "'" : "");
            step_failed(err, errlen, step, r, c, errno);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    if (u->db != 0) {
        errno = 0;
        redisReply *r = redisCommand(c, "SELECT %d", u->db);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            char step[32];
            snprintf(step, sizeof step, "SELECT %d", u->db);
            step_failed(err, errlen, step, r, c, errno);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    if (u->nsentinels > 0) {
        redisReply *r = redisCommand(c, "INFO replication");
        int master = says_master(r);
        if (!master)
            rlock_err_set(err, errlen, "redis %s:%d is not the master of '%s' (%s)", u->host,
                          u->port, u->master,
                          r && r->type == REDIS_REPLY_ERROR ? r->str
                          : r                               ? "a replica"
                                                            : c->errstr);
        freeReplyObject(r);
        if (!master)
            return -1;
    }
    return 0;
}

/* Connects to u's address as resolved; NULL with err set. */
static redisContext *connect_to(const struct rlock_url *u, int connect_timeout_ms,
                                int io_timeout_ms, char *err, size_t errlen)
{
    redisContext *c = redisConnectWithTimeout(u->host, u->port, rlock_ms_tv(connect_timeout_ms));
    if (!c || c->err) {
        rlock_err_set(err, errlen, "redis connect %s:%d failed: %s", u->host, u->port,
                      c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, rlock_ms_tv(io_timeout_ms)) != REDIS_OK) {
        rlock_err_set(err, errlen, "redis %s:%d: cannot set the I/O timeout", u->host, u->port);
        redisFree(c);
        return NULL;
    }
    if (rlock_url_handshake(c, u, err, errlen) != 0) {
        redisFree(c);
        return NULL;
    }
    return c;
}

redisContext *rlock_url_connect(const struct rlock_url *url, int connect_timeout_ms,
                                int io_timeout_ms, char *err, size_t errlen)
{
    struct rlock_url resolved = *url;
    if (rlock_url_resolve(&resolved, connect_timeout_ms, err, errlen) != 0)
        return NULL;
    redisContext *c = connect_to(&resolved, connect_timeout_ms, io_timeout_ms, err, errlen);
    if (c || !url->watch || url->nsentinels == 0)
        return c;
    /* The watch's address failed: its Sentinel may lag the others. */
    struct rlock_url asked = *url;
    if (ask_sentinels(&asked, connect_timeout_ms, err, errlen) != 0)
        return NULL;
    if (strcmp(asked.host, resolved.host) == 0 && asked.port == resolved.port)
        return NULL; /* the same answer: err already says why it failed */
    return connect_to(&asked, connect_timeout_ms, io_timeout_ms, err, errlen);
}

/* The master check of an async connection: anything but a master is dropped
 * before the commands queued behind the check can run on it. */
static void on_master_check(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    if (reply && !says_master(reply))
        redisAsyncDisconnect(ac);
}

int rlock_url_handshake_async(redisAsyncContext *ac, const struct rlock_url *u, redisCallbackFn *fn,
                              void *privdata)
{
    const char *auth[3];
    int n = auth_argv(u, auth);
    if (n > 0 && redisAsyncCommandArgv(ac, fn, privdata, n, auth, NULL) != REDIS_OK)
        return -1;
    if (u->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", u->db);
        const char *sel[] = {"SELECT", db};
        if (redisAsyncCommandArgv(ac, fn, privdata, 2, sel, NULL) != REDIS_OK)
            return -1;
    }
    if (u->nsentinels > 0) {
        const char *info[] = {"INFO", "replication"};
        if (redisAsyncCommandArgv(ac, on_master_check, NULL, 2, info, NULL) != REDIS_OK)
            return -1;
    }
    return 0;
}
