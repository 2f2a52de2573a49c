/*
 * fmt: decimal integers into a buffer, for the hot paths (Redis commands,
 * answers) where snprintf's format parsing costs more than the work.
 */
#ifndef SECKILL_FMT_H
#define SECKILL_FMT_H

#include <stddef.h>
#include <stdint.h>

/* Longest int64 in decimal, sign included. */
#define FMT_I64_MAX 20

/* Writes v in decimal at out (at least FMT_I64_MAX bytes, no NUL); returns
 * the number of bytes. */
static inline size_t fmt_i64(char *out, int64_t v)
{
    char tmp[FMT_I64_MAX];
    size_t n = 0, len = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    return len;
}

/* fmt_i64 and a NUL (out: FMT_I64_MAX + 1 bytes). */
static inline size_t fmt_i64z(char *out, int64_t v)
{
    size_t n = fmt_i64(out, v);
    out[n] = '\0';
    return n;
}

#endif
