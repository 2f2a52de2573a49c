/*
 * rlock/sentinel.h: following a master that Redis Sentinel moves.
 *
 * A redis-sentinel:// URL (rlock/url.h) asks the Sentinels where the master
 * is on every connect.  That is enough to find it after a failover, but only
 * once a connection breaks or a write is refused (READONLY): a connection to
 * a master that is still up but no longer the master (a manual SENTINEL
 * FAILOVER, a master cut off from the Sentinels' majority) keeps taking
 * writes until it is demoted.  A watch learns of the switch as the Sentinels
 * announce it:
 *
 *   - one thread per watch subscribes to +switch-master on one Sentinel and
 *     asks it GET-MASTER-ADDR-BY-NAME every poll_ms (the answer it missed
 *     while not subscribed, and the proof that the Sentinel still answers);
 *     when that Sentinel stops answering within timeout_ms it follows the
 *     next one of the URL, in turn;
 *   - every change of the master's address bumps a generation number;
 *   - a URL that carries the watch (u->watch) takes the master's address
 *     from it, without a blocking question, and a connection remembers the
 *     generation it was made in: when the generation moved, the connection
 *     is to be dropped before its next command (rlock_sentinel_moved()).
 *
 * The connection's own check (rlock_url_handshake(): the server says it is
 * a master) still runs on every connect: the watch only says where to go,
 * never whether a server may be written.  Thread-safe: one watch serves
 * every thread of a process.
 */
#ifndef RLOCK_SENTINEL_H
#define RLOCK_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

#include "rlock/rlock.h"
#include "rlock/url.h"

struct rlock_sentinel_watch;

/* Called from the watch's thread when the master's address changed (old is
 * NULL for the first one learnt).  Must not block. */
typedef void rlock_sentinel_change_fn(const struct rlock_url_node *old,
                                      const struct rlock_url_node *now, const char *how, void *arg);

struct rlock_sentinel_watch_opts {
    int timeout_ms; /* each exchange with a Sentinel: connect, AUTH, one question (> 0) */
    int poll_ms;    /* interval of the GET-MASTER-ADDR-BY-NAME question (> 0) */
    int retry_ms;   /* pause after every Sentinel of the URL failed in turn (> 0) */
    rlock_sentinel_change_fn *on_change; /* may be NULL */
    void *arg;
};

/*
 * Starts watching the master of redis-sentinel:// URL u (copied; u->watch is
 * ignored).  Returns the watch, or NULL with err set (u is not a Sentinel
 * URL, bad options, no thread).  It does not wait for a first answer: until
 * one arrives, rlock_sentinel_master() knows none and URLs carrying the
 * watch ask the Sentinels themselves.
 */
struct rlock_sentinel_watch *rlock_sentinel_watch_start(const struct rlock_url *u,
                                                        const struct rlock_sentinel_watch_opts *o,
                                                        char *err, size_t errlen);

/* Stops the thread (within one timeout_ms) and frees w.  NULL is a no-op.
 * No URL carrying w may be used afterwards. */
void rlock_sentinel_watch_stop(struct rlock_sentinel_watch *w);

/* The generation: 0 until a master is known, then bumped on every change
 * of its address.  A cheap atomic read. */
uint64_t rlock_sentinel_generation(const struct rlock_sentinel_watch *w);

/* Copies the master's address into *n and its generation into *gen (may
 * be NULL).  Returns 0, or -1 while none is known (n untouched). */
int rlock_sentinel_master(const struct rlock_sentinel_watch *w, struct rlock_url_node *n,
                          uint64_t *gen);

/* How many +switch-master announcements for this master the watch received. */
uint64_t rlock_sentinel_switches(const struct rlock_sentinel_watch *w);

/* Whether a connection made with URL u in generation gen (read with
 * rlock_url_generation() before connecting) points at a master the watch
 * has since left: drop it and connect again.  0 for a URL without a watch. */
int rlock_sentinel_moved(const struct rlock_url *u, uint64_t gen);

#endif
