/*
 * health: whether Redis and PostgreSQL answer now, for GET /healthz.
 *
 * Each store has a thread and a connection of its own, so that a check never
 * waits behind the worker pool's jobs (slow ones fill it when a store
 * stalls), nor one store's answer behind the other's.  Asks that arrive
 * while a probe runs are answered by the next one, which starts as soon as
 * that ends: any number of checks at once costs one probe per store at a
 * time.  A probe ends within health_timeout_ms (Redis: PING to the one
 * server, or to every master of a cluster; PostgreSQL: SELECT 1, the connect
 * included).  The caller keeps its own timer too: a report that comes after
 * it answered is dropped, so a check is answered in time even while a probe
 * started before it still waits.
 */
#ifndef SECKILL_HEALTH_H
#define SECKILL_HEALTH_H

#include <event2/event.h>

#include "core/cfg.h"

enum health_store { HEALTH_REDIS, HEALTH_POSTGRES, HEALTH_STORES };

/* What one probe of one store found. */
struct health_report {
    enum health_store store;
    int probed;  /* 0: never asked (the service is stopping) */
    int up;      /* servers that answered: PostgreSQL 0 or 1; Redis the masters of a cluster */
    int total;   /* servers asked (0 when a cluster's map could not be read) */
    int cluster; /* Redis is a cluster (redis-cluster://) */
};

/* Runs on the loop that asked; rep is valid during the call only. */
typedef void health_fn(const struct health_report *rep, void *arg);

struct health;

/* Starts one probe thread per store.  Returns NULL (err set) on failure. */
struct health *health_start(const struct cfg *c, char *err, size_t errlen);

/* Asks both stores: fn(rep, arg) then runs on 'base' once per store (in any
 * order), so base must keep running until both came.  Returns 0, or -1 when
 * h is stopping or NULL (fn will not run). */
int health_ask(struct health *h, struct event_base *base, health_fn *fn, void *arg)
    __attribute__((warn_unused_result));

/* Refuses new asks, reports to every ask still waiting (probed 0) and joins
 * the threads.  The loops that receive the reports must still be running.
 * NULL is a no-op; a second call too. */
void health_stop(struct health *h);

/* Frees a stopped h (stops it first if needed). */
void health_free(struct health *h);

#endif
