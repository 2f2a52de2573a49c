/*
 * handle_metrics: GET /metrics on the internal listener: the Prometheus text
 * of every counter, gauge and histogram of this process and the per-SKU
 * gauges read from the stores, as the last refresh of http/metrics_cache.h
 * made it (at most one per metrics_refresh_ms, on a thread of its own, never
 * on the worker pool nor rendered on the loop).
 */
#ifndef SECKILL_HANDLE_METRICS_H
#define SECKILL_HANDLE_METRICS_H

#include <stdint.h>

#include "http/metrics_cache.h"
#include "http/server.h"

/* The cache scrapes read from (NULL: the per-SKU gauges are left out).  Set
 * it before the listeners start; the caller keeps ownership. */
void handle_metrics_init(struct metrics_cache *mc);

/* Answers on the loop: counts only, nothing secret.  Always 200: when the
 * last refresh's store reads failed, or the cache is stopping, the per-SKU
 * gauges are left out (seckill_metrics_scrape_errors_total counts failed reads). */
void handle_metrics_get(struct http_req *r, int64_t id);

#endif
