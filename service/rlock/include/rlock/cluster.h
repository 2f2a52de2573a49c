/*
 * rlock/cluster.h: a small synchronous Redis Cluster client on hiredis 0.14
 * (which has none).  Synchronous API; one client per thread.
 *
 *   redis-cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]
 *
 * names seed nodes (port 6379 unless given); a cluster has database 0 only.
 * The client reads the slot map (CLUSTER SLOTS) from the first node that
 * answers, keeps one connection per master (made on first use, with the
 * URL's AUTH), and sends each command to the master of its keys' slot:
 *
 *   - every key of one command must hash to one slot (Redis refuses the
 *     rest: CROSSSLOT); the caller names that slot, rlock_cluster_slot()
 *     computes it (CRC16 of the key, or of its {hash tag});
 *   - MOVED: the slot has a new owner (resharding, failover): the map is
 *     corrected for that slot at once, read again whole before the next
 *     command, and the command sent to the new owner;
 *   - ASK: the slot is being migrated and this key has moved: the command
 *     goes once to the importing node, after ASKING;
 *   - TRYAGAIN (a multi-key command while its keys are split by a
 *     migration): a pause of tryagain_ms, then again;
 *   - at most RLOCK_CLUSTER_MAX_REDIRECTS of these per command.  A command
 *     the cluster redirected was not run, so sending it on is safe; a
 *     command that failed on I/O is never sent again (it may have run): its
 *     connection is dropped and the map read again before the next command.
 *   - CLUSTERDOWN and every other error reply are returned as they are.
 *
 * Scripts go by EVALSHA; a node without the script (NOSCRIPT) gets SCRIPT
 * LOAD and the EVALSHA again, on the same node.
 *
 * The locks' own calls take a connection, not this client: run them through
 * rlock_cluster_lock() (and release with rlock_cluster_release(), rlock.h),
 * which follows the same answers for them.
 */
#ifndef RLOCK_CLUSTER_H
#define RLOCK_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "rlock/resp.h"
#include "rlock/rlock.h"
#include "rlock/script.h"
#include "rlock/url.h"

#define RLOCK_CLUSTER_SLOTS 16384
#define RLOCK_CLUSTER_MAX_NODES 64 /* masters and replicas named by CLUSTER SLOTS */
#define RLOCK_CLUSTER_MAX_REDIRECTS 5

/* The slot of a key: CRC16/XMODEM of the key, or of its hash tag (the
 * bytes between the first '{' and the first '}' after it, if any), modulo
 * 16384.  Pure. */
unsigned rlock_cluster_slot(const char *key, size_t len);

/* Where a MOVED or ASK error reply sends a command (rlock_reply_kind() of
 * rlock/resp.h tells those, TRYAGAIN and CLUSTERDOWN from other replies). */
struct rlock_cluster_redirect {
    enum rlock_reply_kind kind; /* RLOCK_REPLY_MOVED or RLOCK_REPLY_ASK */
    unsigned slot;
    char host[256];
    int port;
};

/* Parses msg, the text of a MOVED or ASK error reply ("MOVED 3999
 * 127.0.0.1:6381"), into *to.  Returns 0, or -1 when msg is neither or its
 * slot or address is not valid.  Pure. */
RLOCK_MUST_CHECK int rlock_cluster_redirect_parse(const char *msg,
                                                  struct rlock_cluster_redirect *to);

/* What a command sent to a cluster does after an answer (rlock_cluster_follow()). */
enum rlock_cluster_step {
    RLOCK_CLUSTER_DELIVER,  /* the answer is the command's: a value, another error, or a
                             * redirect past the limits or whose target cannot be read */
    RLOCK_CLUSTER_MOVED,    /* to the master named in *to: the slot map is stale */
    RLOCK_CLUSTER_ASK,      /* once to the importing node named in *to, after ASKING */
    RLOCK_CLUSTER_TRYAGAIN, /* again, routed afresh, after a pause of tryagain_ms */
};

/* One command's redirects so far: zeroed, then deadline_ms and tryagain_ms set. */
struct rlock_cluster_redirects {
    int64_t deadline_ms; /* no TRYAGAIN pause may end past it (a monotonic ms
                          * clock, the caller's); 0: none */
    int tryagain_ms;     /* the pause after TRYAGAIN */
    int hops;            /* MOVED and ASK followed */
    int tries;           /* TRYAGAIN pauses taken */
};

/*
 * The one redirect rule of every cluster client, sync and async: given the
 * kind of an answer (rlock_reply_kind()) and its error text (NULL when there
 * is none, or when it may have been cut and must not name a node), says
 * what the command does next, counts it in rd and, for MOVED and ASK,
 * fills *to.  MOVED and ASK are followed at most RLOCK_CLUSTER_MAX_REDIRECTS
 * times in all; a TRYAGAIN pause is taken while it ends before
 * rd->deadline_ms, or, without a deadline, at most
 * RLOCK_CLUSTER_MAX_REDIRECTS times (counted apart).  A redirected command
 * did not run, so sending it on is safe.  now_ms is the caller's clock.
 * Pure.
 */
enum rlock_cluster_step rlock_cluster_follow(struct rlock_cluster_redirects *rd,
                                             enum rlock_reply_kind kind, const char *msg,
                                             int64_t now_ms, struct rlock_cluster_redirect *to);

/* CRC16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster uses.  Pure. */
unsigned rlock_crc16(const char *buf, size_t len);

struct rlock_cluster;

struct rlock_cluster_opts {
    int connect_timeout_ms; /* each connect (> 0) */
    int io_timeout_ms;      /* each command's round trip (> 0) */
    int tryagain_ms;        /* pause after TRYAGAIN (>= 0) */
};

/* A client of the cluster whose seeds u names (a redis-cluster:// URL).
 * Connects nothing yet.  Returns NULL with err set (not a cluster URL, bad
 * options, no memory). */
struct rlock_cluster *rlock_cluster_new(const struct rlock_url *u,
                                        const struct rlock_cluster_opts *o, char *err,
                                        size_t errlen);

/* Closes every connection and frees c.  NULL is a no-op. */
void rlock_cluster_free(struct rlock_cluster *c);

/* Reads the slot map again now, from the first node that answers (the
 * masters known, then the seeds).  Returns 0, or -1 with err set (the map
 * is kept). */
RLOCK_MUST_CHECK int rlock_cluster_refresh(struct rlock_cluster *c, char *err, size_t errlen);

/* The connection to the master that serves slot, made on first use (the
 * map read first when there is none, or when a redirect or an I/O error
 * made it stale).  Owned by c: do not free it; a later call may close it.
 * NULL with err set when no node serves slot or it cannot be reached. */
redisContext *rlock_cluster_node(struct rlock_cluster *c, unsigned slot, char *err, size_t errlen);

/* For pipelines across slots: rlock_cluster_node_of() connects the node that
 * serves slot (reading the map, reconnecting, as rlock_cluster_node() does)
 * and names it by an index that stays the node's; rlock_cluster_node_ctx()
 * is that node's connection now, with no I/O and no side effect (NULL if it
 * was closed since).  Route every command first, then append them all
 * through rlock_cluster_node_ctx(): no call between the appends can close
 * or reuse a connection that holds unread commands. */
int rlock_cluster_node_of(struct rlock_cluster *c, unsigned slot, char *err, size_t errlen);
redisContext *rlock_cluster_node_ctx(const struct rlock_cluster *c, int node);

/* The address of the master that serves slot (the map read first when
 * there is none or it went stale); connects nothing.  Returns 0, or -1 with
 * err set.  For clients of their own (an event loop's async connections)
 * that only borrow the map. */
RLOCK_MUST_CHECK int rlock_cluster_slot_addr(struct rlock_cluster *c, unsigned slot, char *host,
                                             size_t cap, int *port, char *err, size_t errlen);

/* Marks the map stale: it is read again before the next use. */
void rlock_cluster_invalidate(struct rlock_cluster *c);

/* Runs argv (argc arguments, lens may be NULL) on the master of slot,
 * following redirects as above.  Returns the reply (caller frees; error
 * replies included), or NULL with err set on I/O error or when no node
 * could be reached. */
redisReply *rlock_cluster_command(struct rlock_cluster *c, unsigned slot, int argc,
                                  const char **argv, const size_t *lens, char *err, size_t errlen);

/* Runs script s with nkeys keys then nargs arguments (argv) on the master
 * of the first key's slot (slot 0 without keys); same contract as
 * rlock_cluster_command(). */
redisReply *rlock_cluster_script(struct rlock_cluster *c, const struct rlock_script *s, int nkeys,
                                 int nargs, const char **argv, const size_t *lens, char *err,
                                 size_t errlen);

/*
 * A lock call for rlock_cluster_lock(): one or more calls of the lock API
 * that take a connection (rlock_acquire*(), rlock_acquire*_fenced(),
 * rlock_fence_renew(), rlock_require_replicas(), ...) made on node, which
 * serves the lock's slot.  Returns their status; on RLOCK_ERR, *why is the
 * failed call's message (the lock's err): the library words it "<what>:
 * <the server's error reply>", which is how a MOVED reaches the caller.  A
 * call that fails must leave its lock as it found it, so that it can be made
 * again elsewhere: the acquires and rlock_fence_renew() do; rlock_release()
 * empties its lock (use rlock_cluster_release()).
 */
typedef enum rlock_status rlock_cluster_lock_fn(redisContext *node, void *arg, const char **why);

/*
 * Runs fn on the master that serves key's slot (the lock's first key: all
 * its keys share the slot), and when it fails with one of the cluster's
 * answers, makes it again as rlock_cluster_command() would send a command
 * on:
 *   - MOVED: the map is corrected for the slot (and read whole again before
 *     the next command), fn runs again on the new owner;
 *   - ASK: fn runs once more on the importing node, after SCRIPT LOAD of
 *     the library's scripts there and ASKING (which covers fn's first
 *     command only: a lock call that sends more than one, such as an
 *     acquire that waits, meets MOVED back to the old owner and so goes
 *     round again);
 *   - TRYAGAIN (a multi-key lock whose keys a migration split): a pause of
 *     tryagain_ms, then again, while the deadline allows;
 *   - CLUSTERDOWN: the map is read again before the next command; fn's
 *     status is returned.
 * MOVED and ASK count towards RLOCK_CLUSTER_MAX_REDIRECTS; TRYAGAIN counts
 * apart, up to as many without a deadline; with one (deadline_ms, on
 * rlock_mono_ms(); 0: none) no pause is taken that would end past it.  fn
 * computes the wait of each run from that deadline (what is left of it; a
 * single try when nothing is): the library cannot, as fn makes the call.
 * *why should be a lock's err (struct rlock): a message that fills it may
 * be cut, and no node is taken from it (MOVED reads the map; ASK fails).  A call answered with a
 * redirect did not run; one that failed on I/O may have, so it is not made again: its connection is
 * closed and the map read again before the next command.  Returns fn's
 * last status; RLOCK_ERR with err set when fn could not be run (no node
 * for the slot can be reached, ASKING failed): err is written only then.
 */
RLOCK_MUST_CHECK enum rlock_status rlock_cluster_lock(struct rlock_cluster *c, const char *key,
                                                      int64_t deadline_ms,
                                                      rlock_cluster_lock_fn *fn, void *arg,
                                                      char *err, size_t errlen);

/* How many masters serve at least one slot (the map read first if need
 * be); -1 with err set when no map could be read. */
int rlock_cluster_nmasters(struct rlock_cluster *c, char *err, size_t errlen);

/* The connection to the i-th of those masters (0 <= i <
 * rlock_cluster_nmasters()), made on first use; owned by c.  NULL with err
 * set.  For commands every master answers for itself, several in a row on
 * one connection (SCAN and what follows for the keys it found). */
redisContext *rlock_cluster_master(struct rlock_cluster *c, int i, char *err, size_t errlen);

/* Runs argv on the i-th of those masters (0 <= i < rlock_cluster_nmasters()),
 * without redirects: for commands every master answers for itself (SCAN,
 * INFO).  Same reply contract as rlock_cluster_command(). */
redisReply *rlock_cluster_on_master(struct rlock_cluster *c, int i, int argc, const char **argv,
                                    const size_t *lens, char *err, size_t errlen);

/* How many MOVED and ASK redirects this client followed (for tests and
 * metrics). */
unsigned long rlock_cluster_redirects(const struct rlock_cluster *c);

#endif
