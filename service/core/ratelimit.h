/*
 * ratelimit: token buckets per key (a client address), in a table of fixed
 * size shared by threads.
 *
 * A bucket holds up to 'burst' tokens and gains one every 'interval_us'.  It
 * is kept the GCRA way, as one instant: when the bucket will be full again
 * (a bucket whose instant has passed is full, so it can be forgotten without
 * losing anything).  reserve.lua keeps the buyer's bucket in Redis the same
 * way, so both kinds of bucket mean the same.
 *
 * Memory is bounded: 'entries' slots, in sets of RATELIMIT_WAYS, each set
 * under its own mutex (threads rarely meet on one).  A new key in a full set
 * replaces a full bucket, else the one closest to full, which forgives the
 * fewest tokens.  So a flood of addresses can shorten how long a partly used
 * bucket is remembered, never make the table grow.
 *
 * Pure: no I/O, no clock.  The caller passes the time (monotonic
 * microseconds), so tests drive it.
 */
#ifndef SECKILL_RATELIMIT_H
#define SECKILL_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#define RATELIMIT_WAYS 8     /* slots per set */
#define RATELIMIT_KEY_MAX 48 /* bytes kept of a key (an IPv6 address fits) */
#define RATELIMIT_US_PER_S INT64_C(1000000)

struct ratelimit;

/* A table of at least 'entries' buckets (rounded up to whole sets) of
 * 'burst' tokens, one more every 'interval_us'; 'seed' scatters keys over the
 * sets (pass random bits, so that nobody can aim keys at one set).  Returns
 * NULL when interval_us or burst is 0 or less: no limit, and every function
 * below takes NULL for "no limit".  Aborts when out of memory. */
struct ratelimit *ratelimit_new(int64_t interval_us, int64_t burst, size_t entries, uint64_t seed);

/* Takes one token from key's bucket at now_us.  Returns 0 when it was taken;
 * otherwise the microseconds until one will be there (> 0), and nothing was
 * taken.  Keys longer than RATELIMIT_KEY_MAX - 1 bytes share the bucket of
 * their prefix.  NULL rl: 0. */
int64_t ratelimit_take(struct ratelimit *rl, const char *key, int64_t now_us);

/* The microseconds until key's bucket has a token (0: it has one now); takes
 * nothing and remembers nothing.  NULL rl: 0. */
int64_t ratelimit_wait(struct ratelimit *rl, const char *key, int64_t now_us);

/* Changes rl's rate and burst at now_us (a reload), keeping each bucket's
 * state: it holds the tokens it held, at most the new burst of them, so no
 * bucket holds more than the new burst and a raised one is earned at the
 * new rate, not handed out.  interval_us or burst 0 or less turns the limit off until set
 * again (the buckets are forgotten: turned on, every bucket starts full).
 * Safe while other threads take tokens; NULL rl: nothing. */
void ratelimit_set_rate(struct ratelimit *rl, int64_t interval_us, int64_t burst, int64_t now_us);

/* Slots in use: the buckets the table remembers. */
size_t ratelimit_size(struct ratelimit *rl);

/* The slots the table holds at most. */
size_t ratelimit_capacity(const struct ratelimit *rl);

/* Whole seconds for a Retry-After header: wait_us rounded up, at least 1. */
int64_t ratelimit_retry_after_s(int64_t wait_us);

/* Frees rl; NULL is a no-op. */
void ratelimit_free(struct ratelimit *rl);

#endif
