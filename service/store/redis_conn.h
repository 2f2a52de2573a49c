/*
 * redis_conn: the blocking Redis client of workers and the order writer.
 * One redis_conn per thread.  Connects lazily with a connect timeout, sets a
 * per-command timeout, authenticates (AUTH [user] password, from redis_url) and
 * selects the database on every connect and reconnect; after an I/O
 * error the connection is dropped and the next call reconnects.
 */
#ifndef SECKILL_REDIS_CONN_H
#define SECKILL_REDIS_CONN_H

#include <hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cfg.h"
#include <rlock/cluster.h>
#include <rlock/resp.h>
#include <rlock/script.h>
#include <rlock/sentinel.h>
#include <rlock/url.h>
#include <rlock/watch.h>

/* Pause after a TRYAGAIN (a slot mid-migration), before sending again (the
 * blocking and the event loops' client alike). */
#define REDIS_CONN_TRYAGAIN_MS 20

struct redis_conn {
    struct rlock_url target; /* redis_url, parsed by rlock_url_parse() */
    int connect_timeout_ms;
    int timeout_ms;
    int64_t deadline_ms; /* redis_conn_set_deadline(); 0: none */
    int applied_ms;      /* the socket timeout ctx has now */
    redisContext *ctx;
    uint64_t gen; /* the Sentinel watch's generation when ctx was made */
    /* redis-cluster:// only: the cluster client every command goes through
     * (rlock/cluster.h), made on first use; ctx is then unused. */
    struct rlock_cluster *cluster;
};

/*
 * With a redis-sentinel:// redis_url, starts the process's watch of the
 * master (rlock/sentinel.h: +switch-master, and a question every
 * redis_sentinel_poll_ms): every redis_conn and redis_async prepared
 * afterwards resolves the master through it and drops a connection made
 * before the master moved.  Waits up to redis_connect_timeout_ms for the
 * watch's first answer.  A plain URL: nothing to do.  Call once at
 * start-up, before any connection is prepared; returns 0, or -1 with err.
 */
int redis_conn_follow_start(const struct cfg *c, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Stops it, after the last connection that used it is gone. */
void redis_conn_follow_stop(void);
/* The watch (NULL without one), for redis_async. */
struct rlock_sentinel_watch *redis_conn_followed(void);

/* Prepares rc from the config (does not connect).  Returns 0, or -1 on a bad URL. */
int redis_conn_init(struct redis_conn *rc, const struct cfg *c, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Opens a new connection with the settings of the redis_conn 'template'
 * (timeouts, AUTH, SELECT); the caller owns it.  NULL when Redis cannot be
 * reached.  Its signature is rlock_connect_fn's, for the lock library's
 * notifier and watchdog threads. */
redisContext *redis_conn_open(void *template);

/* One connection at start-up: returns -1 with err set when Redis answers
 * but refuses redis_url's credentials or database (a configuration error
 * to stop on), else 0: connected, or Redis not reachable (logged; the
 * service starts anyway and retries, I6/I7).  err never holds the password. */
int redis_conn_check_credentials(const struct redis_conn *rc, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * On a Redis Cluster (a redis-cluster:// redis_url) every command goes to
 * the master of its keys' slot: the key is argv[1], or the third argument
 * of XGROUP and XINFO, the first stream after STREAMS of XREADGROUP and
 * XREAD, the first key of EVALSHA, EVAL, FCALL and FCALL_RO; commands without a key (PING,
 * INFO, PUBLISH...) go to the master of slot 0.  The keys of one command
 * must share a slot (every key of a SKU shares its hash tag); the commands
 * of one pipeline may each have their own.  MOVED, ASK and TRYAGAIN are
 * followed (rlock/cluster.h).  redis_conn_open() connects to a seed node:
 * enough for pub/sub, which a cluster broadcasts to every node.
 */

/* How many servers hold keys: the masters of a cluster, else 1; -1 when a
 * cluster's map cannot be read.  redis_conn_server(rc, i) is the i-th's
 * connection (owned by rc; NULL when unreachable): for commands each
 * server answers for itself (SCAN). */
int redis_conn_nservers(struct redis_conn *rc);
redisContext *redis_conn_server(struct redis_conn *rc, int i);

/* A lock watchdog (rlock/watch.h) whose renewals reach every lock of rc's
 * Redis: connections made by redis_conn_open(rc) (one server, or the
 * master the Sentinels name), or on a cluster a client of its own that
 * sends each renewal to the master of the lock's slot.  rc must outlive it.
 * NULL with err set. */
struct rlock_watchdog *redis_conn_watchdog(struct redis_conn *rc,
                                           const struct rlock_watchdog_opts *o, char *err,
                                           size_t errlen);

/* Which of the redis_conn_nservers() servers holds key (0 but on a cluster),
 * or -1 when that cannot be told now. */
int redis_conn_server_of(struct redis_conn *rc, const char *key);

/* The context that serves key's slot (a cluster), or redis_conn_get(). */
redisContext *redis_conn_get_for(struct redis_conn *rc, const char *key);

/*
 * Lock calls (rlock/cluster.h: fn makes them on the connection it is
 * given) on the server of key: the one server, or on a cluster key's master
 * through rlock_cluster_lock(), which makes them again where a MOVED, ASK or
 * TRYAGAIN says (TRYAGAIN pauses only within deadline_ms, on
 * rlock_mono_ms(); 0: none).
 * Returns fn's status, or RLOCK_ERR with err set when fn could not be run.
 * After an I/O error the connection is dropped.
 */
enum rlock_status redis_conn_lock(struct redis_conn *rc, const char *key, int64_t deadline_ms,
                                  rlock_cluster_lock_fn *fn, void *arg, char *err, size_t errlen);

/* rlock_release() of l on its server (rlock_cluster_release() on a
 * cluster); l is always emptied.  A missing connection is RLOCK_ERR.  rc's
 * deadline does not apply: the release has redis_timeout_ms. */
enum rlock_status redis_conn_release(struct redis_conn *rc, struct rlock *l);

/*
 * Sets the deadline (CLOCK_MONOTONIC ms, as rlock_mono_ms(); 0: none) of
 * every call on rc until it is set again: a worker sets the deadline of the
 * HTTP request it runs, so that its waits share one bound.  Each connect and
 * command then waits at most what is left of it (the socket timeouts of a
 * single server are lowered to that), and one made once it has passed fails
 * at once, as if Redis could not be reached, without sending anything.  On a
 * Redis Cluster only that last part holds: a command sent before the
 * deadline waits redis_timeout_ms (the cluster client's own bound).
 */
void redis_conn_set_deadline(struct redis_conn *rc, int64_t deadline_ms);

/* The deadline set on rc (0: none). */
int64_t redis_conn_deadline(const struct redis_conn *rc);

/* Returns a connected context (owned by rc), or NULL when Redis cannot be
 * reached or rc's deadline has passed.  A kept connection the server has closed meanwhile (it
 * became readable), or made to a master the Sentinels have since replaced, is replaced first, so a
 * restart of Redis or a failover fails no call; a command that failed on I/O is never re-sent
 * (scripts are not all idempotent). */
redisContext *redis_conn_get(struct redis_conn *rc);

/* Runs a command by argv.  Returns the reply (caller frees) or NULL on I/O error,
 * after which the connection is dropped.  Error replies are returned as replies. */
redisReply *redis_conn_cmd(struct redis_conn *rc, int argc, const char **argv, const size_t *lens);

/* redis_conn_cmd for a command without a key (INFO) that must reach the
 * server that serves key: on a cluster, key's master; else the one server. */
redisReply *redis_conn_cmd_at(struct redis_conn *rc, const char *key, int argc, const char **argv,
                              const size_t *lens);

/* Sends n commands (argcs[i] arguments argvs[i] each) in one round trip and
 * reads their n replies into out (caller frees each).  Returns 0, or -1 on an
 * I/O error (out all NULL, the connection dropped).  Error replies are
 * replies.  For reads: a failure may leave some commands run. */
int redis_conn_pipeline(struct redis_conn *rc, size_t n, const int *argcs,
                        const char *const *const *argvs, redisReply **out)
    __attribute__((warn_unused_result));

/* Runs a script (EVALSHA, EVAL on NOSCRIPT); same contract as redis_conn_cmd. */
redisReply *redis_conn_script(struct redis_conn *rc, const struct rlock_script *s, int nkeys,
                              int nargs, const char **argv, const size_t *lens);

/* Drops the connection (every connection of a cluster); the next call
 * connects again.  Also the teardown: nothing is left allocated. */
void redis_conn_close(struct redis_conn *rc);

#endif
