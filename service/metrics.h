/*
 * metrics: process-wide counters, exported as Prometheus text on GET /metrics.
 * Lock-free (relaxed atomics): counters only ever grow, and a scrape needs no
 * consistency across them.
 */
#ifndef SECKILL_METRICS_H
#define SECKILL_METRICS_H

#include <stddef.h>

enum metric {
    M_ORDERS_ACCEPTED, /* 202 for a new reservation */
    M_ORDERS_REPLAYED, /* 202 for a repeated Idempotency-Key */
    M_ORDERS_SOLD_OUT,
    M_ORDERS_LIMIT,
    M_ORDERS_NOT_ACTIVE,
    M_ORDERS_INVALID,     /* 400 on the order endpoint */
    M_ORDERS_UNAVAILABLE, /* 503 on the order endpoint */
    M_WRITER_BATCHES_COMMITTED,
    M_WRITER_BATCHES_FAILED,
    M_WRITER_ORDERS_CONFIRMED,
    M_WRITER_ORDERS_REJECTED,
    M_WRITER_ORDERS_RECLAIMED,
    M_WRITER_ID_CONFLICTS, /* an order id reused after Redis lost writes */
    M_STOCK_ADJUSTMENTS,
    M_REDIS_TIMEOUTS,
    M_COUNT
};

void metrics_add(enum metric m, long n);

/* Appends the Prometheus text exposition of every counter to a fresh heap
 * string (caller frees); *len gets its length. */
char *metrics_render(size_t *len);

#endif
