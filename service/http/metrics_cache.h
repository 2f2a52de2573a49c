/*
 * metrics_cache: the per-SKU gauges of /metrics (sku/sku_gauges.h), read
 * from the stores by a thread and a connection pair of its own, never by the
 * worker pool that serves orders and admin requests.
 *
 * One read at a time, and at most one per metrics_refresh_ms (counted from
 * the start of the last one: seckill_metrics_refreshes_total grows by at
 * most elapsed / metrics_refresh_ms + 1).  A scrape while the last read is
 * younger than that gets it at once; an older one waits for the next read,
 * which every scrape waiting at the time shares.  A scrape storm therefore
 * costs the stores nothing more than one scraper does.
 */
#ifndef SECKILL_METRICS_CACHE_H
#define SECKILL_METRICS_CACHE_H

#include <event2/event.h>
#include <stddef.h>

#include "core/cfg.h"
#include "core/metrics.h"

struct metrics_cache;

/* Runs on the asking loop with the gauges of the last read (n 0 and skus
 * NULL when it failed, the service stops, or metrics_max_skus is 0); skus is
 * valid during the call only. */
typedef void metrics_cache_fn(const struct metrics_sku *skus, size_t n, void *arg);

/* Starts the reading thread (its connections open lazily).  Returns NULL
 * (err set) on failure. */
struct metrics_cache *metrics_cache_start(const struct cfg *c, char *err, size_t errlen);

/* Asks for the gauges: fn(…, arg) runs exactly once, either before this
 * returns (the last read is fresh) or later on 'base' (which must keep
 * running until it has).  Returns 0, or -1 when mc is NULL or stopping (fn
 * will not run). */
int metrics_cache_get(struct metrics_cache *mc, struct event_base *base, metrics_cache_fn *fn,
                      void *arg) __attribute__((warn_unused_result));

/* Refuses new asks, answers every waiting one (no gauges) and joins the
 * thread; the loops of the waiting asks must still be running.  NULL is a
 * no-op; a second call too. */
void metrics_cache_stop(struct metrics_cache *mc);

/* Frees mc, stopping it first if needed.  NULL is a no-op. */
void metrics_cache_free(struct metrics_cache *mc);

#endif
