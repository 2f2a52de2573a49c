#include "lt_hist.h"

#include <stdlib.h>
#include <string.h>

/* Position of the highest set bit of v (v > 0). */
static unsigned msb(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

size_t lt_hist_index(const struct lt_hist *h, uint64_t v)
{
    uint64_t sub = (uint64_t)1 << h->sub_bits;
    if (v < sub)
        return (size_t)v;
    unsigned m = msb(v);
    unsigned shift = m - h->sub_bits;
    uint64_t top = v >> shift; /* in [sub, 2*sub) */
    return (size_t)(sub + (uint64_t)shift * sub + (top - sub));
}

uint64_t lt_hist_bucket_high(const struct lt_hist *h, size_t idx)
{
    uint64_t sub = (uint64_t)1 << h->sub_bits;
    if (idx < sub)
        return (uint64_t)idx;
    uint64_t rel = (uint64_t)idx - sub;
    unsigned shift = (unsigned)(rel / sub);
    uint64_t top = sub + rel % sub;
    uint64_t high = ((top + 1) << shift) - 1;
    return high;
}

int lt_hist_init(struct lt_hist *h, unsigned sub_bits, uint64_t max_trackable)
{
    memset(h, 0, sizeof *h);
    if (sub_bits < LT_HIST_SUB_BITS_MIN || sub_bits > LT_HIST_SUB_BITS_MAX || max_trackable < 1 ||
        max_trackable > (UINT64_MAX >> 1))
        return -1;
    h->sub_bits = sub_bits;
    h->max_trackable = max_trackable;
    h->nbuckets = lt_hist_index(h, max_trackable) + 1;
    h->counts = calloc(h->nbuckets, sizeof *h->counts);
    if (!h->counts) {
        memset(h, 0, sizeof *h);
        return -1;
    }
    lt_hist_reset(h);
    return 0;
}

void lt_hist_free(struct lt_hist *h)
{
    free(h->counts);
    memset(h, 0, sizeof *h);
}

void lt_hist_reset(struct lt_hist *h)
{
    if (h->counts)
        memset(h->counts, 0, h->nbuckets * sizeof *h->counts);
    h->count = h->clamped = 0;
    h->min = UINT64_MAX;
    h->max = 0;
    h->sum = 0;
}

void lt_hist_record(struct lt_hist *h, uint64_t v)
{
    if (!h->counts)
        return;
    if (v > h->max_trackable) {
        v = h->max_trackable;
        h->clamped++;
    }
    h->counts[lt_hist_index(h, v)]++;
    h->count++;
    h->sum += (long double)v;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

int lt_hist_merge(struct lt_hist *dst, const struct lt_hist *src)
{
    if (dst->sub_bits != src->sub_bits || dst->max_trackable != src->max_trackable ||
        !dst->counts || !src->counts)
        return -1;
    for (size_t i = 0; i < dst->nbuckets; i++)
        dst->counts[i] += src->counts[i];
    dst->count += src->count;
    dst->clamped += src->clamped;
    dst->sum += src->sum;
    if (src->count && src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    return 0;
}

uint64_t lt_hist_percentile(const struct lt_hist *h, double p)
{
    if (!h->counts || h->count == 0)
        return 0;
    if (p <= 0)
        return h->min;
    if (p >= 100)
        return h->max;
    /* rank = ceil(p/100 * count) computed without libm */
    long double want = (long double)p / 100.0L * (long double)h->count;
    uint64_t rank = (uint64_t)want;
    if ((long double)rank < want)
        rank++;
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < h->nbuckets; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t v = lt_hist_bucket_high(h, i);
            if (v > h->max)
                v = h->max;
            if (v < h->min)
                v = h->min;
            return v;
        }
    }
    return h->max;
}

double lt_hist_mean(const struct lt_hist *h)
{
    return h->count ? (double)(h->sum / (long double)h->count) : 0.0;
}
