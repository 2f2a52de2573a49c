/*
 * lt_stats: what the load generator saw.  Answers are counted by kind, the
 * latency of every answer goes into a histogram, and each second of the run
 * keeps its own counts, a coarse latency histogram and the order queue length
 * for the charts.
 */
#ifndef LT_STATS_H
#define LT_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "lt_hist.h"

/* The kinds of answer a buyer can get. */
enum lt_answer {
    LT_ANS_CONFIRMED,    /* 201, a new order committed in PostgreSQL (durable mode) */
    LT_ANS_ACCEPTED,     /* 202, a new order reserved, not (yet) committed */
    LT_ANS_REJECTED,     /* 409 with an order id: reserved, refused by the database */
    LT_ANS_REPLAYED,     /* 201/202/409 "replayed": same Idempotency-Key, same order */
    LT_ANS_SOLD_OUT,     /* 409 sold_out */
    LT_ANS_LIMIT,        /* 409 limit_exceeded */
    LT_ANS_NOT_ACTIVE,   /* 409 sale_not_active */
    LT_ANS_CONFLICT,     /* 409 anything else */
    LT_ANS_IDEM_REUSED,  /* 422 idempotency_key_reused */
    LT_ANS_BAD_REQUEST,  /* 400 */
    LT_ANS_NOT_FOUND,    /* 404 */
    LT_ANS_UNAVAILABLE,  /* 503: nothing was taken */
    LT_ANS_RATE_LIMITED, /* 429: a rate limit refused it; nothing was taken */
    LT_ANS_UNCERTAIN,    /* 503 naming an Idempotency-Key: the outcome is unknown */
    LT_ANS_TIMEOUT,      /* no answer within --timeout-ms: unknown */
    LT_ANS_NET_ERROR,    /* connection refused/reset, bad reply: unknown */
    LT_ANS_OTHER,        /* any other status */
    LT_ANS_COUNT
};

/* "202 accepted", "409 sold_out", ... */
const char *lt_answer_name(enum lt_answer a);
/* Short machine name: "accepted", "sold_out", ... */
const char *lt_answer_key(enum lt_answer a);
/* True for answers that leave open whether an order was made. */
int lt_answer_is_unknown(enum lt_answer a);
/* True for answers that name an order (201, 202, 409 with an order id). */
int lt_answer_names_order(enum lt_answer a);
/* True for answers that settle a request for good: an order or a refusal.  A
 * 503 took nothing but settles nothing either: a retry may still succeed. */
int lt_answer_settles(enum lt_answer a);
/* True for answers a correct service and a correct generator never produce. */
int lt_answer_is_unexpected(enum lt_answer a);

#define LT_LAT_SUB_BITS 7          /* overall histogram: < 0.8 % error */
#define LT_LAT_SECOND_SUB_BITS 4   /* per-second histograms: < 6.3 % error */
#define LT_LAT_MAX_US 600000000ULL /* 10 min; longer is clamped */

struct lt_second {
    uint64_t answers[LT_ANS_COUNT];
    struct lt_hist lat; /* microseconds */
    int64_t queue_len;  /* XLEN of the order stream sampled in this second; -1 none */
};

struct lt_stats {
    uint64_t all[LT_ANS_COUNT];      /* every answer */
    uint64_t measured[LT_ANS_COUNT]; /* after the warm-up */
    struct lt_hist lat;              /* microseconds, after the warm-up */
    size_t nseconds, cap_seconds;
    struct lt_second *sec;
    int64_t queue_max;
};

/* Prepares empty statistics for a run of at most max_seconds (later answers
 * go into the last second).  Returns 0 or -1 when out of memory. */
int lt_stats_init(struct lt_stats *st, size_t max_seconds) __attribute__((warn_unused_result));
void lt_stats_free(struct lt_stats *st);

/* Records one answer that arrived t_us after the start with latency lat_us;
 * 'measured' is false during the warm-up. */
void lt_stats_record(struct lt_stats *st, uint64_t t_us, enum lt_answer a, uint64_t lat_us,
                     int measured);

/* Records the order queue length seen t_us after the start. */
void lt_stats_queue(struct lt_stats *st, uint64_t t_us, int64_t len);

/* New orders among counts[LT_ANS_COUNT]: 201, 202 and 409 with an order id,
 * replays left out. */
uint64_t lt_stats_new_orders(const uint64_t *counts);

/* Sum of measured[] (or all[] when all_answers). */
uint64_t lt_stats_total(const struct lt_stats *st, int all_answers);

#endif
