/*
 * metrics_cache: the text of /metrics, made by a thread and a connection pair
 * of its own, never by the worker pool that serves orders and admin requests
 * nor on an event loop: the per-SKU gauges read from the stores
 * (sku/sku_gauges.h) and this process's counters, rendered together.
 *
 * One refresh at a time, and at most one per metrics_refresh_ms (counted
 * from the start of the last one: seckill_metrics_refreshes_total grows by
 * at most elapsed / metrics_refresh_ms + 1).  A scrape while the last
 * refresh is younger than that gets its text at once; an older one waits
 * for the next refresh, which every scrape waiting at the time shares.  A
 * scrape storm therefore costs the stores and the renderer nothing more than
 * one scraper does: the counters it shows are up to metrics_refresh_ms old.
 */
#ifndef SECKILL_METRICS_CACHE_H
#define SECKILL_METRICS_CACHE_H

#include <event2/event.h>
#include <stddef.h>

#include "core/cfg.h"

struct metrics_cache;

/* The text of one refresh, and the same gzip-compressed (gz NULL: none). */
struct metrics_text {
    const char *text;
    size_t len;
    const unsigned char *gz;
    size_t gz_len;
};

/* Runs on the asking loop with the last refresh (NULL when the service
 * stops), valid during the call only.  A refresh whose store reads failed
 * leaves the per-SKU gauges out (seckill_metrics_scrape_errors_total). */
typedef void metrics_cache_fn(const struct metrics_text *t, void *arg);

/* Starts the reading thread (its connections open lazily).  Returns NULL
 * (err set) on failure. */
struct metrics_cache *metrics_cache_start(const struct cfg *c, char *err, size_t errlen);

/* Asks for the text: fn(…, arg) runs exactly once, either before this
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
