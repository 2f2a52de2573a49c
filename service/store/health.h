/*
 * health: whether Redis and PostgreSQL answer, for GET /healthz.
 *
 * Each store has a thread and a connection of its own that probe it every
 * health_probe_interval_ms, so that a check never waits behind the worker
 * pool's jobs (slow ones fill it when a store stalls), nor behind the other
 * store, nor behind a store at all: /healthz reads the latest result
 * (health_read) and answers at once, so a flood of checks costs the stores
 * nothing.  A probe ends within health_timeout_ms (Redis: PING to the one
 * server, or to every master of a cluster; PostgreSQL: SELECT 1, the connect
 * included).  A result older than health_probe_interval_ms plus
 * health_timeout_ms counts as no answer: the probe thread is stuck on a store
 * that stalls.
 */
#ifndef SECKILL_HEALTH_H
#define SECKILL_HEALTH_H

#include "core/cfg.h"

enum health_store { HEALTH_REDIS, HEALTH_POSTGRES, HEALTH_STORES };

/* What the last probe of one store found. */
struct health_report {
    enum health_store store;
    int probed;  /* 0: no probe ended within the bound (stalled, or the service stops) */
    int up;      /* servers that answered: PostgreSQL 0 or 1; Redis the masters of a cluster */
    int total;   /* servers asked (0 when a cluster's map could not be read) */
    int cluster; /* Redis is a cluster (redis-cluster://) */
};

struct health;

/* Probes both stores once (each within health_timeout_ms), then starts one
 * probe thread per store.  Returns NULL (err set) on failure. */
struct health *health_start(const struct cfg *c, char *err, size_t errlen);

/* Copies the latest result of each store into rep[HEALTH_STORES] (indexed
 * by enum health_store); never blocks on a store, safe from any thread.  A
 * NULL or stopped h reports nothing probed. */
void health_read(struct health *h, struct health_report rep[HEALTH_STORES]);

/* Stops the probe threads and joins them.  NULL is a no-op; a second call too. */
void health_stop(struct health *h);

/* Frees h (stops it first if needed). */
void health_free(struct health *h);

#endif
