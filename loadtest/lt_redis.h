/*
 * lt_redis: the load test's blocking Redis reader (XLEN, GET, HSCAN of one
 * SKU's keys), on the lock library's clients: rlock_url_connect for one
 * server or the master its Sentinels name, rlock/cluster.h for a Redis
 * Cluster (each command on the master of its key's slot, redirects
 * followed).  The load test is a client: it does not use the service's own
 * Redis client (store/), which carries the daemon's deadlines and lock calls.
 */
#ifndef LT_REDIS_H
#define LT_REDIS_H

#include <hiredis.h>
#include <stddef.h>

#include <rlock/cluster.h>
#include <rlock/url.h>

struct lt_redis {
    struct rlock_url target;
    int timeout_ms;                /* each connect and each command */
    redisContext *ctx;             /* one server; NULL until used, or after an I/O error */
    struct rlock_cluster *cluster; /* redis-cluster:// only, made on first use */
};

/* Parses url into r (connects nothing).  Returns 0, or -1 with err set (the
 * message never holds the password); r is then empty but safe to close. */
int lt_redis_init(struct lt_redis *r, const char *url, int timeout_ms, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Connects now (on a cluster: the master of slot 0).  Returns 0, or -1 when
 * Redis cannot be reached (logged). */
int lt_redis_connect(struct lt_redis *r) __attribute__((warn_unused_result));

/* Runs argv (argc arguments; argv[1] is the key) on the server of its key,
 * connecting first when needed.  Returns the reply (caller frees; error
 * replies included), or NULL on an I/O error (logged), after which the next
 * call connects again. */
redisReply *lt_redis_cmd(struct lt_redis *r, int argc, const char **argv);

/* Closes every connection; r may be used again (it connects again). */
void lt_redis_close(struct lt_redis *r);

#endif
