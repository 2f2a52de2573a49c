#include "rlock/url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEME "redis://"
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
        snprintf(err, errlen,
                 "redis URL: the part before '@' needs a ':' (redis://:PASSWORD@HOST or "
                 "redis://USER:PASSWORD@HOST)");
        return -1;
    }
    size_t ul = (size_t)(colon - info);
    if (decode(info, ul, u->user, sizeof u->user) != 0) {
        snprintf(err, errlen,
                 "redis URL: bad user name (a bad %%-escape, or longer than %zu bytes)",
                 sizeof u->user - 1);
        return -1;
    }
    if (decode(colon + 1, n - ul - 1, u->password, sizeof u->password) != 0) {
        snprintf(err, errlen, "redis URL: bad password (a bad %%-escape, or longer than %zu bytes)",
                 sizeof u->password - 1);
        return -1;
    }
    if (u->password[0] == '\0') {
        snprintf(err, errlen, "redis URL: the password after ':' is empty");
        return -1;
    }
    return 0;
}

static int parse(const char *url, struct rlock_url *u, char *err, size_t errlen)
{
    if (strncmp(url, "rediss://", 9) == 0) {
        snprintf(err, errlen, "redis URL: rediss:// (TLS) is not supported; use redis://");
        return -1;
    }
    if (strncmp(url, SCHEME, strlen(SCHEME)) != 0) {
        snprintf(err, errlen, "redis URL must start with redis://");
        return -1;
    }
    const char *p = url + strlen(SCHEME);
    const char *at = strrchr(p, '@');
    if (at) {
        if (parse_userinfo(p, (size_t)(at - p), u, err, errlen) != 0)
            return -1;
        p = at + 1;
    }
    size_t hl = strcspn(p, ":/");
    if (hl == 0 || hl >= sizeof u->host) {
        snprintf(err, errlen, "redis URL has no valid host");
        return -1;
    }
    memcpy(u->host, p, hl);
    u->host[hl] = '\0';
    p += hl;
    if (*p == ':') {
        char *end;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/')) {
            snprintf(err, errlen, "redis URL has an invalid port");
            return -1;
        }
        u->port = (int)port;
        p = end;
    }
    if (*p == '/' && p[1]) {
        char *end;
        long db = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end || db < 0 || db > MAX_DB) {
            snprintf(err, errlen, "redis URL has an invalid database number");
            return -1;
        }
        u->db = (int)db;
    }
    return 0;
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

int rlock_url_handshake(redisContext *c, const struct rlock_url *u, char *err, size_t errlen)
{
    const char *auth[3];
    int n = auth_argv(u, auth);
    if (n > 0) {
        redisReply *r = redisCommandArgv(c, n, auth, NULL);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis AUTH as %s%s%s refused: %s", u->user[0] ? "user '" : "",
                     u->user[0] ? u->user : "the default user", u->user[0] ? "'" : "",
                     r ? r->str : c->errstr);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    if (u->db != 0) {
        redisReply *r = redisCommand(c, "SELECT %d", u->db);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis SELECT %d refused: %s", u->db, r ? r->str : c->errstr);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    return 0;
}

static struct timeval ms_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

redisContext *rlock_url_connect(const struct rlock_url *u, int connect_timeout_ms,
                                int io_timeout_ms, char *err, size_t errlen)
{
    redisContext *c = redisConnectWithTimeout(u->host, u->port, ms_tv(connect_timeout_ms));
    if (!c || c->err) {
        snprintf(err, errlen, "redis connect %s:%d failed: %s", u->host, u->port,
                 c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, ms_tv(io_timeout_ms)) != REDIS_OK) {
        snprintf(err, errlen, "redis %s:%d: cannot set the I/O timeout", u->host, u->port);
        redisFree(c);
        return NULL;
    }
    if (rlock_url_handshake(c, u, err, errlen) != 0) {
        redisFree(c);
        return NULL;
    }
    return c;
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
    return 0;
}
