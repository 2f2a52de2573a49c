/*
 * lt_load: the load generator proper.  One libevent loop, --concurrency
 * keep-alive connections with one request in flight each, a seeded choice of
 * user and quantity per request, optional retries with the same
 * Idempotency-Key, optional admin stock deltas on their own connection, a
 * progress line, and a hard end: nothing is issued after --duration and
 * nothing waits longer than --timeout-ms.
 */
#ifndef LT_LOAD_H
#define LT_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "lt_answers.h"
#include "lt_opts.h"
#include "lt_stats.h"

struct lt_load_summary {
    uint64_t issued;                    /* logical requests sent */
    uint64_t retries;                   /* extra attempts with the same key */
    uint64_t answered;                  /* attempts that completed (any answer, unknown included) */
    double elapsed_s;                   /* first request to last answer */
    double measured_s;                  /* end of warm-up to last answer */
    int64_t wall_start_us, wall_end_us; /* CLOCK_REALTIME of those two instants */
    int64_t first_accept_wall_us, last_accept_wall_us; /* first/last new 202; 0 if none */
    double cpu_s;    /* user + system CPU of this process during the load */
    int interrupted; /* stopped early by SIGINT/SIGTERM */
};

/* Runs the load described by o against o->host:o->port, on the nskus SKUs
 * skus[] (each request picks one by o->sku_pick).  Answers are counted into
 * st (initialised by the caller with lt_stats_init); order ids, unknown
 * outcomes and admin delta outcomes go into ans[i], the record of skus[i]
 * (ans NULL in raw mode).  When o->mode is not raw, the length of the order
 * streams (all together) of the nstreams SKUs streams[] is sampled from Redis
 * every tick for the charts and queue_max: those of skus[] when streams is
 * NULL; a bucketed SKU has none, its buckets have them.  Returns 0, or -1
 * with a message in err when the run could not start (no event loop, no
 * connection object). */
int lt_load_run(const struct lt_opts *o, const int64_t *skus, int nskus, const int64_t *streams,
                int nstreams, struct lt_stats *st, struct lt_answers *ans,
                struct lt_load_summary *sum, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Monotonic and wall clocks in microseconds. */
uint64_t lt_now_us(void);
int64_t lt_wall_us(void);

#endif
