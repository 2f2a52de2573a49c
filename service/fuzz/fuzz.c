/*
 * fuzz: checks shared by the fuzz targets.  See fuzz.h.
 */
#include "fuzz/fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fuzz_fail(const char *what, const char *file, int line)
{
    fprintf(stderr, "%s:%d: property failed: %s\n", file, line, what);
    abort();
}

char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);

    if (s == NULL)
        abort();
    if (size > 0)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

void fuzz_check_detail(const char *detail, size_t cap)
{
    size_t n = strnlen(detail, cap);

    FUZZ_CHECK(n > 0 && n < cap);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(detail[i] >= 0x20 && detail[i] < 0x7f);
}
