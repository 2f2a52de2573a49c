/*
 * timefmt: times as the API shows them.
 */
#ifndef SECKILL_TIMEFMT_H
#define SECKILL_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>

/* Writes Unix milliseconds as RFC 3339 UTC ("2026-11-22T10:00:00.000Z") into
 * out (cap bytes, 25 are enough); truncates, NUL-terminated, when cap is short.
 * Valid RFC 3339 for the years 0000..9999, the instants validate_rfc3339_ms
 * accepts. */
void timefmt_rfc3339(int64_t ms, char *out, size_t cap);

#endif
