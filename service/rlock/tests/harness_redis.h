/*
 * harness_redis: private redis-server processes for tests that need more
 * than the shared test Redis: several independent masters (Redlock), a
 * master with a replica (WAIT), a server to kill -9 and restart.
 *
 * Each server listens on a free loopback port, persists nothing
 * (--save '' --appendonly no) and works in its own temporary directory.  It
 * is started with PR_SET_PDEATHSIG, so it dies with the test process even
 * when a failed assertion ends the test before its teardown.
 */
#ifndef SECKILL_TEST_HARNESS_REDIS_H
#define SECKILL_TEST_HARNESS_REDIS_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

struct th_redis_server {
    pid_t pid; /* 0 when not running */
    int port;
    char dir[64]; /* temporary working directory */
};

/* Starts a server on a free port with extra "--name value" arguments
 * (NULL-terminated list, may be NULL) and waits (bounded) until it answers
 * PING.  Aborts the test on failure. */
void th_redis_server_start(struct th_redis_server *s, const char *const *extra_args);

/* Starts it again on the same port (after th_redis_server_kill()). */
void th_redis_server_restart(struct th_redis_server *s, const char *const *extra_args);

/* SIGKILL and reap: a crash that loses everything not persisted. */
void th_redis_server_kill(struct th_redis_server *s);

/* Stops (SIGKILL, reap) and removes the directory.  Safe on a stopped one. */
void th_redis_server_stop(struct th_redis_server *s);

/* New connection with 5 s timeouts; the caller redisFree()s it.  Aborts on failure. */
redisContext *th_redis_server_connect(const struct th_redis_server *s);

/* How many error replies starting with 'error' (e.g. "TRYAGAIN") the server
 * of c has given since it started (INFO errorstats). */
long long th_redis_error_count(redisContext *c, const char *error);

/* Waits (bounded, timeout_ms) until the replica on 'replica' reports its link
 * to the master up.  Aborts the test otherwise. */
void th_redis_server_wait_replica(const struct th_redis_server *replica, int timeout_ms);

/* Starts a master and a replica of it, and waits (bounded) for their link. */
void th_redis_pair_start(struct th_redis_server *master, struct th_redis_server *replica);

/* A Redis Cluster of n (<= TH_CLUSTER_MAX) masters, each a private server
 * with cluster-enabled and a free bus port, the 16384 slots split evenly in
 * order (master 0 has the lowest), introduced with CLUSTER MEET; returns
 * once every node says cluster_state:ok.  Aborts the test on failure. */
#define TH_CLUSTER_MAX 6
struct th_redis_cluster {
    int n;
    struct th_redis_server node[TH_CLUSTER_MAX];
    int bus[TH_CLUSTER_MAX];                              /* cluster bus ports */
    char id[TH_CLUSTER_MAX][64];                          /* CLUSTER MYID */
    unsigned first[TH_CLUSTER_MAX], last[TH_CLUSTER_MAX]; /* slot ranges */
};
void th_redis_cluster_start(struct th_redis_cluster *c, int n);
void th_redis_cluster_stop(struct th_redis_cluster *c);
/* The master (index) whose range holds slot. */
int th_redis_cluster_owner(const struct th_redis_cluster *c, unsigned slot);

#endif
