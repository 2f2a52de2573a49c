/*
 * lt_rand: a seeded pseudo-random generator (xoshiro256** seeded by
 * splitmix64) so that a run can be repeated, and the quantity distribution
 * of the orders ("1", "1-3", "1:80,2:15,5:5").
 */
#ifndef LT_RAND_H
#define LT_RAND_H

#include <stddef.h>
#include <stdint.h>

struct lt_rand {
    uint64_t s[4];
};

/* Seeds r; the same seed always gives the same sequence. */
void lt_rand_seed(struct lt_rand *r, uint64_t seed);

/* Next 64 random bits. */
uint64_t lt_rand_next(struct lt_rand *r);

/* Uniform integer in [lo, hi] (lo <= hi). */
int64_t lt_rand_range(struct lt_rand *r, int64_t lo, int64_t hi);

/* Uniform double in [0, 1). */
double lt_rand_unit(struct lt_rand *r);

#define LT_DIST_MAX_ENTRIES 32

struct lt_dist_entry {
    int64_t lo, hi; /* inclusive range of quantities */
    uint64_t weight;
};

struct lt_dist {
    size_t n;
    uint64_t total_weight;
    struct lt_dist_entry e[LT_DIST_MAX_ENTRIES];
};

/* Parses a quantity distribution: entries separated by ',', each "Q" or
 * "LO-HI" optionally followed by ":WEIGHT" (default 1); quantities in
 * [1, max_qty].  Returns 0, or -1 with a message in err. */
int lt_dist_parse(struct lt_dist *d, const char *spec, int64_t max_qty, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Draws one quantity. */
int64_t lt_dist_sample(const struct lt_dist *d, struct lt_rand *r);

/* Largest quantity the distribution can produce. */
int64_t lt_dist_max(const struct lt_dist *d);

#endif
