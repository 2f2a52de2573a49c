/*
 * alloc: allocation that aborts when memory runs out, the daemon's rule
 * (docs/STYLE.md: a process out of memory cannot answer anything right, and
 * a half-made object is worse than a crash the supervisor restarts).  The
 * lock library does not use it: it returns an error instead.
 */
#ifndef SECKILL_ALLOC_H
#define SECKILL_ALLOC_H

#include <stddef.h>

/* malloc(n) (n 0 gives a block of 1 byte, never NULL); aborts on failure. */
void *xmalloc(size_t n) __attribute__((malloc, returns_nonnull));
/* calloc(n, size) (n 0 gives a zeroed block, never NULL); aborts on failure. */
void *xcalloc(size_t n, size_t size) __attribute__((malloc, returns_nonnull));
/* realloc(p, n) (n 0 keeps a block of 1 byte); aborts on failure, when p is
 * still the caller's, unchanged. */
void *xrealloc(void *p, size_t n) __attribute__((returns_nonnull, warn_unused_result));
/* strdup(s); aborts on failure. */
char *xstrdup(const char *s) __attribute__((malloc, returns_nonnull));

#endif
