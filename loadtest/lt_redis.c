#include "lt_redis.h"

#include <poll.h>
#include <string.h>

#include "core/log.h"
#include <rlock/resp.h>

/* After TRYAGAIN (a slot mid-migration), before sending again. */
#define TRYAGAIN_MS 20

int lt_redis_init(struct lt_redis *r, const char *url, int timeout_ms, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->timeout_ms = timeout_ms;
    return rlock_url_parse(url, &r->target, err, errlen);
}

/* The cluster client, made on first use; NULL (logged) when it cannot be. */
static struct rlock_cluster *cluster_of(struct lt_redis *r)
{
    if (!r->cluster) {
        struct rlock_cluster_opts o = {.connect_timeout_ms = r->timeout_ms,
                                       .io_timeout_ms = r->timeout_ms,
                                       .tryagain_ms = TRYAGAIN_MS};
        char err[320];
        r->cluster = rlock_cluster_new(&r->target, &o, err, sizeof err);
        if (!r->cluster)
            log_warn("redis cluster: %s", err);
    }
    return r->cluster;
}

int lt_redis_connect(struct lt_redis *r)
{
    char err[320];
    if (r->target.nseeds > 0) {
        struct rlock_cluster *cl = cluster_of(r);
        if (cl && !rlock_cluster_node(cl, 0, err, sizeof err)) {
            log_warn("redis cluster: %s", err);
            return -1;
        }
        return cl ? 0 : -1;
    }
    /* A kept connection is used unless it broke or became readable: the
     * server closed it (a restart), so a restart fails no command. */
    struct pollfd p = {.fd = r->ctx ? r->ctx->fd : -1, .events = POLLIN};
    if (r->ctx && r->ctx->err == 0 && poll(&p, 1, 0) == 0)
        return 0;
    lt_redis_close(r);
    r->ctx = rlock_url_connect(&r->target, r->timeout_ms, r->timeout_ms, err, sizeof err);
    if (!r->ctx) {
        log_warn("%s", err);
        return -1;
    }
    return 0;
}

redisReply *lt_redis_cmd(struct lt_redis *r, int argc, const char **argv)
{
    char err[320];
    if (r->target.nseeds > 0) {
        struct rlock_cluster *cl = cluster_of(r);
        unsigned slot = argc > 1 ? rlock_cluster_slot(argv[1], strlen(argv[1])) : 0;
        redisReply *rep =
            cl ? rlock_cluster_command(cl, slot, argc, argv, NULL, err, sizeof err) : NULL;
        if (cl && !rep)
            log_warn("redis %s failed: %s", argv[0], err);
        return rep;
    }
    if (lt_redis_connect(r) != 0)
        return NULL;
    redisReply *rep = redisCommandArgv(r->ctx, argc, argv, NULL);
    if (!rep) {
        log_warn("redis %s failed: %s", argv[0], r->ctx->errstr);
        lt_redis_close(r);
    } else if (rlock_reply_kind(rep) == RLOCK_REPLY_READONLY) {
        /* a failover demoted this server: the next call asks the Sentinels */
        log_warn("redis: the server is a replica now (%s); reconnecting", rep->str);
        lt_redis_close(r);
    }
    return rep;
}

void lt_redis_close(struct lt_redis *r)
{
    if (r->ctx)
        redisFree(r->ctx);
    r->ctx = NULL;
    rlock_cluster_free(r->cluster);
    r->cluster = NULL;
}
