/*
 * handle_metrics: GET /metrics, the Prometheus text of every counter.
 */
#ifndef SECKILL_HANDLE_METRICS_H
#define SECKILL_HANDLE_METRICS_H

#include <stdint.h>

#include "http/server.h"

/* Answers on the loop: counts only, nothing secret. */
void handle_metrics_get(struct http_req *r, int64_t id);

#endif
