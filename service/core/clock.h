/*
 * clock: the service's one monotonic clock (CLOCK_MONOTONIC), for deadlines,
 * ages and token buckets; never for times shown to people (core/timefmt.h).
 * The wall clock only where another machine's clock is compared: Redis's
 * (stream entry ids, reserve.lua's deadlines).
 */
#ifndef SECKILL_CLOCK_H
#define SECKILL_CLOCK_H

#include <stdint.h>

/* Microseconds on CLOCK_MONOTONIC; cannot fail on Linux. */
int64_t clock_mono_us(void);

/* Milliseconds on CLOCK_MONOTONIC (the clock of rlock_mono_ms() too). */
int64_t clock_mono_ms(void);

/* Milliseconds since the Unix epoch on CLOCK_REALTIME (may step). */
int64_t clock_wall_ms(void);

#endif
