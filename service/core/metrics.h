/*
 * metrics: process-wide counters, gauges and histograms, exported as
 * Prometheus text on GET /metrics.  Lock-free (relaxed atomics): counters
 * only ever grow, and a scrape needs no consistency across them.
 *
 * Histograms are preallocated (metrics_hist_get, at start-up or on a first
 * use) and then cost one bucket search over a small table and two relaxed
 * atomic additions per sample, on counters of the calling thread's shard
 * (summed at scrape): no lock, no allocation, little cache-line sharing.
 */
#ifndef SECKILL_METRICS_H
#define SECKILL_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum metric {
    M_ORDERS_ACCEPTED,     /* new reservation taken in Redis */
    M_ORDERS_CONFIRMED,    /* 201: the commit came within order_ack_wait_ms */
    M_ORDERS_REJECTED,     /* 409 after a reservation the database refused */
    M_ORDERS_ACK_TIMEOUTS, /* 202 pending in durable mode: no commit in time */
    M_ORDERS_REPLAYED,     /* answer for a repeated Idempotency-Key */
    M_ORDERS_SOLD_OUT,
    M_ORDERS_SOLD_OUT_LOCAL, /* ... of which answered from the sold-out flag, without Redis */
    M_ORDERS_LIMIT,
    M_ORDERS_NOT_ACTIVE,
    /* durable 202s: recorded in PostgreSQL first; could not be (503 with the key
     * instead); recorded ones Redis lost, decided by the settler */
    M_ORDERS_PENDING_RECORDED,
    M_ORDERS_PENDING_UNRECORDED,
    M_ORDERS_PENDING_SETTLED,
    M_ORDERS_INVALID,           /* 400 on the order endpoint */
    M_BUYER_UNAUTHORIZED,       /* 401: buyer token missing, invalid or expired */
    M_BUYER_FORBIDDEN,          /* 403: body user_id other than the token's buyer */
    M_ORDERS_UNAVAILABLE,       /* 503 on the order endpoint */
    M_ORDERS_EXPIRED,           /* reserve.lua ran past the request's deadline: nothing taken */
    M_ORDERS_LATE_RESERVED,     /* reserved, but Redis replied after the buyer's 503 */
    M_RESERVE_CALLS,            /* reserve.lua calls sent (each a batch of orders of one SKU) */
    M_RESERVE_CALL_ORDERS,      /* orders those calls carried */
    M_WRITER_BATCHES_COMMITTED, /* one SKU's orders of one writer transaction */
    M_WRITER_TRANSACTIONS,      /* writer transactions committed (one or more SKUs each) */
    M_WRITER_BATCHES_FAILED,
    M_FENCE_REFUSED,
    M_WRITER_ORDERS_CONFIRMED,
    M_WRITER_ORDERS_REJECTED,
    M_WRITER_ORDERS_RECLAIMED,
    M_WRITER_ID_CONFLICTS,  /* an order id reused after Redis lost writes */
    M_WRITER_DEAD_LETTERS,  /* stream entries moved to the dead-letter stream */
    M_WRITER_REAPPLIED,     /* orders taken again from a Redis rebuilt without them */
    M_SKU_RELOADS,          /* SKUs (re)built in Redis from PostgreSQL */
    M_SKU_LOADS_SUPERSEDED, /* rebuild loads refused: Redis held a newer epoch */
    M_SETTLES_FENCED,       /* completion-hook Redis writes refused: a newer lock holder */
    M_ADJUSTMENTS_SETTLED,  /* adjustment records left by a dead process, settled */
    M_RECONCILE_RUNS,       /* reconciliation passes */
    /* gauges, from the last reconciliation pass */
    M_DRIFT_SKUS,  /* SKUs whose Redis and PostgreSQL disagree */
    M_DRIFT_UNITS, /* sum over SKUs of |Redis stock + in flight - skus.stock| */
    M_STOCK_ADJUSTMENTS,
    M_BUCKET_TRANSFERS,   /* moves of units between a SKU's buckets (sku/buckets.h) */
    M_BUCKET_UNITS_MOVED, /* units they moved */
    M_REDIS_TIMEOUTS,
    M_HTTP_UNDECLARED,       /* answers a route did not declare (a bug: see http/routes.c) */
    M_HTTP_CONNECTIONS_OPEN, /* gauge: HTTP connections open now */
    M_HTTP_REFUSED_GLOBAL,   /* connections closed at accept: http_max_connections */
    M_HTTP_REFUSED_PER_ADDR, /* ... http_max_connections_per_addr */
    M_HTTP_REQUEST_TIMEOUTS, /* requests cut by http_request_timeout_ms */
    M_HTTP_WRITE_TIMEOUTS,   /* replies cut by http_write_timeout_ms */
    M_HTTP_MALFORMED,        /* requests refused by the strict parser (400/417/431/501) */
    M_HTTP_BUFFER_BYTES,     /* gauge: bytes the HTTP connections' buffers hold */
    /* 429s, one sample each of seckill_rate_limited_total{scope=...} */
    M_RATE_LIMITED_BUYER,        /* the buyer's orders on a SKU (reserve.lua) */
    M_RATE_LIMITED_ADDR,         /* the buyer API, per client address */
    M_RATE_LIMITED_ADMIN_AUTH,   /* failed admin authentications, per client address */
    M_RATE_LIMITED_PAYMENT_AUTH, /* failed payment callback authentications, per address */
    M_METRICS_SCRAPE_ERRORS,     /* per-SKU reads that failed: their block is left out */
    M_METRICS_REFRESHES, /* per-SKU reads from the stores (at most one per metrics_refresh_ms) */
    /* the order's life, one sample each of seckill_order_transitions_total{from=,to=} */
    M_ORDERS_TO_CONFIRMED,      /* pending -> confirmed (a writer's commit) */
    M_ORDERS_TO_REJECTED,       /* pending -> rejected */
    M_ORDERS_CANCELLED_PENDING, /* pending -> cancelled (written so: its buyer cancelled first) */
    M_ORDERS_PAID,              /* confirmed -> paid */
    M_ORDERS_CANCELLED,         /* confirmed -> cancelled */
    M_ORDERS_EXPIRED_UNPAID,    /* confirmed -> expired */
    M_UNITS_RETURNED,           /* units of cancelled and expired orders given back to PostgreSQL */
    M_RETURNS_SETTLED,          /* returns given to Redis (order_release.lua) */
    M_RETURNS_SETTLED_LATE,     /* ... of which a process that died had left undone */
    M_SWEEPS,                   /* expiry sweeps run by this process */
    /* gauges, one sample each of seckill_store_up{store=...}: 1 when the latest
     * health probe of the store answered (every master of a cluster), else 0 */
    M_STORE_UP_REDIS,
    M_STORE_UP_POSTGRES,
    /* health probes that found the store down: a failover shorter than a
     * Prometheus scrape interval still shows as an increase */
    M_STORE_PROBE_FAILURES_REDIS,
    M_STORE_PROBE_FAILURES_POSTGRES,
    /* reloads (SIGHUP), one sample each of seckill_config_reloads_total{result=} */
    M_CONFIG_RELOADS_OK,      /* a file read and checked: its reloadable changes applied */
    M_CONFIG_RELOADS_REFUSED, /* a bad file (or environment) refused whole: nothing applied */
    M_CONFIG_RELOAD_LAST_OK,  /* gauge: Unix time (s) of the last applied reload */
    M_COUNT
};

void metrics_add(enum metric m, long n);
/* For gauges (M_DRIFT_*). */
void metrics_set(enum metric m, long v);

/* ---- histograms ---- */

/* A histogram family: one metric name, its unit and buckets. */
enum metrics_family {
    MF_HTTP_REQUEST,        /* seconds, labels route and code: first byte to reply queued */
    MF_REDIS_COMMAND,       /* seconds, label command: async command sent to reply read */
    MF_WRITER_BATCH,        /* seconds: a writer batch, stream read returned to batch done */
    MF_WRITER_BATCH_ORDERS, /* stream entries in a writer batch */
    MF_COUNT
};

struct metrics_hist;

/* The histogram of family f with 'labels' (Prometheus label pairs without
 * braces, e.g. route="placeOrder",code="201"; "" for none; at most
 * METRICS_LABELS_MAX - 1 bytes), made on first use and the same one after.
 * Takes a mutex: call it at start-up or once per series, never per sample.
 * NULL when the fixed table (METRICS_HISTS_MAX series) is full (logged). */
#define METRICS_LABELS_MAX 96
#define METRICS_HISTS_MAX 160
struct metrics_hist *metrics_hist_get(enum metrics_family f, const char *labels);

/* One sample: microseconds for the duration families, a count for
 * MF_WRITER_BATCH_ORDERS.  Negative values count as 0; NULL h is a no-op. */
void metrics_hist_observe(struct metrics_hist *h, int64_t v);

/* One order writer batch of 'entries' orders (those read and those its
 * top-up added), which began at started_us (clock_mono_us: once its entries
 * were parsed), done now. */
void metrics_writer_batch(int64_t started_us, size_t entries);

/* ---- per-SKU gauges, read from the stores at scrape time ---- */

struct metrics_sku {
    int64_t sku;
    int64_t parent;          /* a stock bucket's parent SKU (label parent=), else 0 */
    int64_t stock_db;        /* skus.stock */
    int has_available;       /* Redis holds the SKU's stock: stock_available is set */
    int64_t stock_available; /* Redis: units buyers can still reserve */
    int has_stream;          /* the stream's length and lag were read */
    int64_t stream_length;   /* XLEN of the order stream */
    int64_t stream_lag;      /* entries the writers' group has not acknowledged */
    int64_t oldest_age_ms;   /* age of the stream's oldest entry (its id's time), 0 when empty */
    int sale_open;           /* the sale window holds now (PostgreSQL's clock) */
};

/* Appends the Prometheus text exposition of every counter, gauge and
 * histogram to a fresh heap string (caller frees); *len gets its length.
 * With n > 0, the per-SKU gauges of skus[0..n) follow; then
 * seckill_sku_sold_out_flag, one sample per SKU of sold_out[0..nsold_out)
 * (the SKUs this process answers sold out from its local flag). */
char *metrics_render_skus(const struct metrics_sku *skus, size_t n, const int64_t *sold_out,
                          size_t nsold_out, size_t *len);
/* The same without per-SKU gauges. */
char *metrics_render(size_t *len);

#endif
