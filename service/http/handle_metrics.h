/*
 * handle_metrics: GET /metrics, the Prometheus text of every counter, gauge
 * and histogram, and the per-SKU gauges read from Redis and PostgreSQL at
 * scrape time (sku/sku_gauges.h).
 */
#ifndef SECKILL_HANDLE_METRICS_H
#define SECKILL_HANDLE_METRICS_H

#include <stdint.h>

#include "http/server.h"

/* Reads the per-SKU gauges on a worker (never blocks a loop on a store) and
 * answers on the loop: counts only, nothing secret.  Always 200: when a store
 * fails, or no worker takes the job, the per-SKU gauges are left out and
 * seckill_metrics_scrape_errors_total grows. */
void handle_metrics_get(struct http_req *r, int64_t id);

#endif
