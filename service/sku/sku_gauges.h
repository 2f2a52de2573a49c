/*
 * sku_gauges: the per-SKU gauges of /metrics, read from the stores at scrape
 * time (on a worker: blocking I/O).  PostgreSQL first (the SKUs and their
 * stock), then Redis in one pipelined round trip for all of them (stock,
 * XLEN and XINFO GROUPS of each order stream).
 */
#ifndef SECKILL_SKU_GAUGES_H
#define SECKILL_SKU_GAUGES_H

#include <stddef.h>

#include "core/metrics.h"
#include "store/workers.h"

/* Reads the gauges of at most cfg->metrics_max_skus SKUs (open sales first,
 * then the newest) into a fresh array *out (caller frees) of *n entries.
 * Returns 0, or -1 when Redis or PostgreSQL failed or answered something
 * unexpected (logged; *out NULL, *n 0). */
int sku_gauges_read(struct worker_ctx *w, struct metrics_sku **out, size_t *n)
    __attribute__((warn_unused_result));

/* The Redis part of the gauges of skus[0..count), whose sku (and, read
 * from PostgreSQL before this call, stock_db, parent and sale_open) are
 * set: stock, stream length, lag and oldest entry's age, in one pipelined
 * round trip.  Returns 0, or -1 when
 * Redis failed or answered something unexpected (logged). */
int sku_gauges_fill(struct worker_ctx *w, struct metrics_sku *skus, size_t count)
    __attribute__((warn_unused_result));

#endif
