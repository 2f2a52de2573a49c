/*
 * rlock/url.h: a Redis server named by a URL, and connections to it that
 * authenticate and select the database.
 *
 *   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]
 *   redis-sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]
 *   redis-cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]
 *
 * USER and PASSWORD may be percent-encoded ("%40" for '@', "%3A" for ':').
 * With a USER the handshake is `AUTH USER PASSWORD` (a Redis 6 ACL user);
 * with only a PASSWORD (`redis://:PASSWORD@HOST`) it is `AUTH PASSWORD` (the
 * default user).  TLS (`rediss://`) is not supported and is refused.
 *
 * A redis-sentinel:// URL names up to RLOCK_URL_MAX_SENTINELS Sentinels
 * (port 26379 by default) and the name of the master they watch.  Every
 * connection asks them, in the order given, for the master's address
 * (SENTINEL GET-MASTER-ADDR-BY-NAME, authenticated with the same USER and
 * PASSWORD), connects to it, and refuses it unless it says it is a master
 * (INFO replication): so each reconnect follows a failover, a demoted master
 * is never written to, and while no Sentinel names a master there is no
 * connection at all (fail closed).
 *
 * A redis-cluster:// URL names up to RLOCK_URL_MAX_SEEDS nodes of a Redis
 * Cluster (port 6379 by default) to learn the slot map from; it is used
 * through rlock/cluster.h: resolving or connecting it here fails (one
 * connection cannot serve a cluster).
 *
 * No message written by these functions ever holds the password.
 */
#ifndef RLOCK_URL_H
#define RLOCK_URL_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rlock/rlock.h"

struct rlock_sentinel_watch; /* rlock/sentinel.h */

#define RLOCK_URL_DEFAULT_PORT 6379

#define RLOCK_URL_SENTINEL_PORT 26379
#define RLOCK_URL_MAX_SENTINELS 8
#define RLOCK_URL_MAX_SEEDS 8

struct rlock_url_node {
    char host[256];
    int port;
};

struct rlock_url {
    char host[256]; /* redis-sentinel://: "" until rlock_url_resolve() found the master */
    int port;
    int db;
    char user[128];     /* "" : the default user */
    char password[256]; /* "" : no AUTH */
    /* redis-sentinel:// only (nsentinels 0 otherwise) */
    int nsentinels;
    struct rlock_url_node sentinel[RLOCK_URL_MAX_SENTINELS];
    char master[128]; /* the name the Sentinels watch it under */
    /* Optional (NULL after rlock_url_parse()): a watch of this master
     * (rlock/sentinel.h) that resolving asks first; the caller keeps it
     * running while u is used. */
    struct rlock_sentinel_watch *watch;
    /* redis-cluster:// only (nseeds 0 otherwise): nodes to read the slot
     * map from (rlock/cluster.h); host stays "" */
    int nseeds;
    struct rlock_url_node seed[RLOCK_URL_MAX_SEEDS];
};

/* Parses url into u.  Returns 0, or -1 with a message in err (which names
 * what is wrong, never the password) and u zeroed. */
int rlock_url_parse(const char *url, struct rlock_url *u, char *err,
                    size_t errlen) RLOCK_MUST_CHECK;

/* For a redis-sentinel:// URL, sets u->host and u->port to where the master
 * is now: the address u->watch knows, when it carries a watch that knows
 * one (no question asked), else the first answer of its Sentinels, asked in
 * order, each within timeout_ms.  Returns 0 (also for a plain URL, which it
 * leaves alone), or -1 with err set when no Sentinel named a master (u's
 * address is then cleared: nothing to connect to, never a stale master). */
int rlock_url_resolve(struct rlock_url *u, int timeout_ms, char *err,
                      size_t errlen) RLOCK_MUST_CHECK;

/* Sends AUTH (when u has a password) and SELECT (when u->db != 0) on a fresh
 * connection, and for a redis-sentinel:// URL checks that the server is a
 * master.  Returns 0, or -1 with err set: "refused" and the server's error
 * (e.g. WRONGPASS) only when it answered one; "timed out" when it did not
 * answer within c's I/O timeout; a replica, or the I/O error.  c stays the
 * caller's either way. */
int rlock_url_handshake(redisContext *c, const struct rlock_url *u, char *err,
                        size_t errlen) RLOCK_MUST_CHECK;

/* The generation of u's watch (rlock_sentinel_generation()), 0 without one:
 * read it before connecting, to ask rlock_sentinel_moved() later. */
uint64_t rlock_url_generation(const struct rlock_url *u);

/* Connects within connect_timeout_ms (to the master its Sentinels name now,
 * for a redis-sentinel:// URL), sets io_timeout_ms on every command, then
 * rlock_url_handshake().  When the address u's watch gave cannot be
 * connected to or is no master, the Sentinels are asked themselves, once.
 * Returns a context the caller redisFree()s, or NULL with err set. */
redisContext *rlock_url_connect(const struct rlock_url *u, int connect_timeout_ms,
                                int io_timeout_ms, char *err, size_t errlen);

/* Queues AUTH and SELECT (as rlock_url_handshake) on a new async connection,
 * before any other command, so they run first.  fn gets each reply (an error
 * reply when refused; NULL when the connection went), may be NULL.  For a
 * redis-sentinel:// URL (u resolved first: rlock_url_resolve) it also queues
 * the master check, which disconnects the connection when the server is not
 * a master: commands already sent behind it still reach that server, which
 * as a replica refuses every write (READONLY), and the next connection asks
 * the Sentinels again.  Returns 0, or -1 when hiredis refused to queue (the
 * connection is unusable). */
int rlock_url_handshake_async(redisAsyncContext *ac, const struct rlock_url *u, redisCallbackFn *fn,
                              void *privdata) RLOCK_MUST_CHECK;

#endif
