#include "lt_stats.h"

#include <stdlib.h>
#include <string.h>

#define US_PER_S 1000000ULL

static const struct {
    const char *name, *key;
    int unknown, unexpected, order, settles;
} answer_info[LT_ANS_COUNT] = {
    [LT_ANS_CONFIRMED] = {"201 confirmed", "confirmed", 0, 0, 1, 1},
    [LT_ANS_ACCEPTED] = {"202 pending", "accepted", 0, 0, 1, 1},
    [LT_ANS_REJECTED] = {"409 rejected (order id)", "rejected", 0, 0, 1, 1},
    [LT_ANS_REPLAYED] = {"replayed (same order)", "replayed", 0, 0, 1, 1},
    [LT_ANS_SOLD_OUT] = {"409 sold_out", "sold_out", 0, 0, 0, 1},
    [LT_ANS_LIMIT] = {"409 limit_exceeded", "limit_exceeded", 0, 0, 0, 1},
    [LT_ANS_NOT_ACTIVE] = {"409 sale_not_active", "sale_not_active", 0, 0, 0, 1},
    [LT_ANS_CONFLICT] = {"409 other", "conflict_other", 0, 1, 0, 1},
    [LT_ANS_IDEM_REUSED] = {"422 idempotency_key_reused", "idempotency_key_reused", 0, 1, 0, 1},
    [LT_ANS_BAD_REQUEST] = {"400 invalid_request", "bad_request", 0, 1, 0, 1},
    [LT_ANS_NOT_FOUND] = {"404 not found", "not_found", 0, 1, 0, 1},
    [LT_ANS_UNAVAILABLE] = {"503 unavailable", "unavailable", 0, 0, 0, 0},
    [LT_ANS_RATE_LIMITED] = {"429 rate_limited", "rate_limited", 0, 0, 0, 0},
    [LT_ANS_UNCERTAIN] = {"503 outcome unknown", "uncertain", 1, 0, 0, 0},
    [LT_ANS_TIMEOUT] = {"no answer (timeout)", "timeout", 1, 0, 0, 0},
    [LT_ANS_NET_ERROR] = {"no answer (connection)", "net_error", 1, 0, 0, 0},
    [LT_ANS_OTHER] = {"other status", "other", 1, 1, 0, 0},
};

const char *lt_answer_name(enum lt_answer a)
{
    return answer_info[a].name;
}

const char *lt_answer_key(enum lt_answer a)
{
    return answer_info[a].key;
}

int lt_answer_is_unknown(enum lt_answer a)
{
    return answer_info[a].unknown;
}

int lt_answer_names_order(enum lt_answer a)
{
    return answer_info[a].order;
}

int lt_answer_settles(enum lt_answer a)
{
    return answer_info[a].settles;
}

int lt_answer_is_unexpected(enum lt_answer a)
{
    return answer_info[a].unexpected;
}

int lt_stats_init(struct lt_stats *st, size_t max_seconds)
{
    memset(st, 0, sizeof *st);
    st->queue_max = -1;
    st->cap_seconds = max_seconds ? max_seconds : 1;
    st->sec = calloc(st->cap_seconds, sizeof *st->sec);
    if (!st->sec || lt_hist_init(&st->lat, LT_LAT_SUB_BITS, LT_LAT_MAX_US) != 0) {
        lt_stats_free(st);
        return -1;
    }
    return 0;
}

void lt_stats_free(struct lt_stats *st)
{
    for (size_t i = 0; st->sec && i < st->cap_seconds; i++)
        lt_hist_free(&st->sec[i].lat);
    free(st->sec);
    lt_hist_free(&st->lat);
    memset(st, 0, sizeof *st);
}

/* The second t_us falls in, created on first use.  NULL when out of memory. */
static struct lt_second *second_at(struct lt_stats *st, uint64_t t_us)
{
    size_t i = (size_t)(t_us / US_PER_S);
    if (i >= st->cap_seconds)
        i = st->cap_seconds - 1;
    while (st->nseconds <= i) {
        struct lt_second *s = &st->sec[st->nseconds];
        if (lt_hist_init(&s->lat, LT_LAT_SECOND_SUB_BITS, LT_LAT_MAX_US) != 0)
            return NULL;
        s->queue_len = -1;
        st->nseconds++;
    }
    return &st->sec[i];
}

void lt_stats_record(struct lt_stats *st, uint64_t t_us, enum lt_answer a, uint64_t lat_us,
                     int measured)
{
    st->all[a]++;
    if (measured) {
        st->measured[a]++;
        lt_hist_record(&st->lat, lat_us);
    }
    struct lt_second *s = second_at(st, t_us);
    if (s) {
        s->answers[a]++;
        lt_hist_record(&s->lat, lat_us);
    }
}

void lt_stats_queue(struct lt_stats *st, uint64_t t_us, int64_t len)
{
    struct lt_second *s = second_at(st, t_us);
    if (s && len > s->queue_len)
        s->queue_len = len;
    if (len > st->queue_max)
        st->queue_max = len;
}

uint64_t lt_stats_new_orders(const uint64_t *counts)
{
    return counts[LT_ANS_CONFIRMED] + counts[LT_ANS_ACCEPTED] + counts[LT_ANS_REJECTED];
}

uint64_t lt_stats_total(const struct lt_stats *st, int all_answers)
{
    uint64_t n = 0;
    for (int a = 0; a < LT_ANS_COUNT; a++)
        n += all_answers ? st->all[a] : st->measured[a];
    return n;
}
