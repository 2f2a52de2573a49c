#include "lt_rand.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void lt_rand_seed(struct lt_rand *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t lt_rand_next(struct lt_rand *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

int64_t lt_rand_range(struct lt_rand *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;
    if (span == 0) /* the whole 64-bit range */
        return (int64_t)lt_rand_next(r);
    /* rejection sampling keeps it unbiased; expected < 2 draws */
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    for (;;) {
        uint64_t x = lt_rand_next(r);
        if (x < limit)
            return lo + (int64_t)(x % span);
    }
}

double lt_rand_unit(struct lt_rand *r)
{
    return (double)(lt_rand_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Parses a decimal integer in [lo, hi] from [s, end).  Returns 0 or -1. */
static int parse_int(const char *s, const char *end, int64_t lo, int64_t hi, int64_t *out)
{
    if (s == end || end - s > 19)
        return -1;
    char buf[24];
    memcpy(buf, s, (size_t)(end - s));
    buf[end - s] = '\0';
    for (const char *p = buf; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int lt_dist_parse(struct lt_dist *d, const char *spec, int64_t max_qty, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    const char *p = spec;
    if (!*p) {
        snprintf(err, errlen, "empty quantity distribution");
        return -1;
    }
    while (*p) {
        const char *end = p + strcspn(p, ",");
        if (d->n == LT_DIST_MAX_ENTRIES) {
            snprintf(err, errlen, "more than %d entries in the quantity distribution",
                     LT_DIST_MAX_ENTRIES);
            return -1;
        }
        struct lt_dist_entry *e = &d->e[d->n];
        const char *colon = memchr(p, ':', (size_t)(end - p));
        const char *qend = colon ? colon : end;
        const char *dash = memchr(p, '-', (size_t)(qend - p));
        int64_t w = 1;
        if (parse_int(p, dash ? dash : qend, 1, max_qty, &e->lo) != 0 ||
            (dash && parse_int(dash + 1, qend, 1, max_qty, &e->hi) != 0) ||
            (colon && parse_int(colon + 1, end, 1, 1000000, &w) != 0)) {
            snprintf(err, errlen,
                     "bad quantity entry \"%.*s\" (want Q or LO-HI, optional :WEIGHT, "
                     "quantities 1..%lld)",
                     (int)(end - p), p, (long long)max_qty);
            return -1;
        }
        if (!dash)
            e->hi = e->lo;
        if (e->hi < e->lo) {
            snprintf(err, errlen, "quantity range \"%.*s\" is empty", (int)(end - p), p);
            return -1;
        }
        e->weight = (uint64_t)w;
        d->total_weight += e->weight;
        d->n++;
        p = *end ? end + 1 : end;
        if (*end && !*p) {
            snprintf(err, errlen, "trailing ',' in the quantity distribution");
            return -1;
        }
    }
    return 0;
}

int64_t lt_dist_sample(const struct lt_dist *d, struct lt_rand *r)
{
    uint64_t x = (uint64_t)lt_rand_range(r, 0, (int64_t)d->total_weight - 1);
    for (size_t i = 0; i < d->n; i++) {
        if (x < d->e[i].weight)
            return d->e[i].lo == d->e[i].hi ? d->e[i].lo : lt_rand_range(r, d->e[i].lo, d->e[i].hi);
        x -= d->e[i].weight;
    }
    return d->e[d->n - 1].lo;
}

int64_t lt_dist_max(const struct lt_dist *d)
{
    int64_t m = 0;
    for (size_t i = 0; i < d->n; i++)
        if (d->e[i].hi > m)
            m = d->e[i].hi;
    return m;
}
