/*
 * workers: a small pool of threads for blocking work (admin requests, lookups
 * in PostgreSQL).  Each worker owns one Redis and one PostgreSQL connection.
 * A job runs on a worker, then its 'done' step runs back on the event loop
 * that submitted it, because an HTTP connection is only touched by the thread
 * owning its base.
 *
 * A job may carry a deadline (its HTTP request's): every Redis and
 * PostgreSQL wait it makes ends by then (redis_conn_set_deadline,
 * pgwait_set_thread_deadline), and a job still queued when it passes is not
 * run at all: 'late' tells its 'done' step to answer without it.  The pool
 * also owns the health probes (store/health.h), threads of their own that
 * no queued job can hold up.
 */
#ifndef SECKILL_WORKERS_H
#define SECKILL_WORKERS_H

#include <event2/event.h>

#include "core/cfg.h"
#include "store/db.h"
#include "store/health.h"
#include "store/redis_conn.h"

struct worker_ctx {
    const struct cfg *cfg;
    struct redis_conn redis;
    struct db_conn db;
};

struct job;
typedef void job_fn(struct job *j, struct worker_ctx *w); /* on a worker thread */
typedef void job_done_fn(struct job *j);                  /* on the submitting loop */

struct job {
    job_fn *run;
    job_done_fn *done;
    struct event_base *base; /* where 'done' runs */
    int urgent;              /* admin: served before buyer lookups */
    int64_t deadline_ms;     /* CLOCK_MONOTONIC ms (clock_mono_ms); 0: none */
    int late;                /* set by the pool: the deadline passed before it ran */
    struct job *next;
};

struct workers;

/* Starts cfg->worker_threads workers.  Returns NULL (err set) on failure. */
struct workers *workers_start(const struct cfg *c, char *err, size_t errlen);

/* Queues j.  Returns 0, or -1 when the queue is full or stopping (j untouched:
 * the caller answers 503). */
int workers_submit(struct workers *ws, struct job *j) __attribute__((warn_unused_result));

/* The pool's health probes (never NULL for a started pool). */
struct health *workers_health(struct workers *ws);

/* Refuses new jobs and health asks, runs what is queued (a job past its
 * deadline only to its 'done' step), reports to the health asks still
 * waiting and joins the threads.  The loops that receive the 'done' steps
 * and reports must still be running.  workers_submit stays safe to call (it
 * refuses) until workers_free. */
void workers_drain(struct workers *ws);
/* Frees a drained pool. */
void workers_free(struct workers *ws);

/* Initialises / releases a worker context (also used by the order writer). */
int worker_ctx_init(struct worker_ctx *w, const struct cfg *c, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void worker_ctx_close(struct worker_ctx *w);

#endif
