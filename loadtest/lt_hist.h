/*
 * lt_hist: a log-bucketed latency histogram in the manner of HdrHistogram.
 *
 * Values are non-negative integers (the load generator records microseconds).
 * Below 2^sub_bits every value has its own bucket; above, each power of two is
 * split into 2^sub_bits equal buckets, so a value is known to within a
 * relative error of 2^-sub_bits (sub_bits 7: under 0.8 %).  Values above the
 * configured maximum are clamped to it and counted in 'clamped'.  Minimum,
 * maximum, count and sum are exact.  No libm, no locking: one owner.
 */
#ifndef LT_HIST_H
#define LT_HIST_H

#include <stddef.h>
#include <stdint.h>

#define LT_HIST_SUB_BITS_MIN 1
#define LT_HIST_SUB_BITS_MAX 12

struct lt_hist {
    unsigned sub_bits;
    uint64_t max_trackable; /* larger values are clamped to it */
    size_t nbuckets;
    uint64_t *counts;
    uint64_t count, clamped;
    uint64_t min, max;
    long double sum;
};

/* Prepares an empty histogram.  sub_bits in [LT_HIST_SUB_BITS_MIN,
 * LT_HIST_SUB_BITS_MAX], max_trackable >= 1.  Returns 0, or -1 on bad
 * arguments or when out of memory (h is then empty and safe to free). */
int lt_hist_init(struct lt_hist *h, unsigned sub_bits, uint64_t max_trackable)
    __attribute__((warn_unused_result));

/* Releases the buckets; h may then be initialised again. */
void lt_hist_free(struct lt_hist *h);

/* Forgets every recorded value, keeps the layout. */
void lt_hist_reset(struct lt_hist *h);

/* Records one value (clamped to max_trackable). */
void lt_hist_record(struct lt_hist *h, uint64_t v);

/* Adds every value of 'src' into 'dst'.  Both must have the same sub_bits and
 * max_trackable.  Returns 0, or -1 (nothing changed) when they differ. */
int lt_hist_merge(struct lt_hist *dst, const struct lt_hist *src)
    __attribute__((warn_unused_result));

/* The value at percentile p (0..100): the highest value equivalent to the
 * bucket holding the ceil(p/100 * count)-th smallest value, capped at the exact
 * maximum.  p <= 0 gives the exact minimum; an empty histogram gives 0. */
uint64_t lt_hist_percentile(const struct lt_hist *h, double p);

/* Arithmetic mean of the recorded (clamped) values; 0 when empty. */
double lt_hist_mean(const struct lt_hist *h);

/* Bucket index of a value and the highest value sharing that bucket; exposed
 * for the unit tests. */
size_t lt_hist_index(const struct lt_hist *h, uint64_t v);
uint64_t lt_hist_bucket_high(const struct lt_hist *h, size_t idx);

#endif
