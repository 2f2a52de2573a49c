#include "core/timefmt.h"

#include <stdio.h>
#include <time.h>

void timefmt_rfc3339(int64_t ms, char *out, size_t cap)
{
    /* Floor, not C's truncation: -1 ms is 23:59:59.999 of 1969-12-31, not a
     * negative fraction of 1970's first second. */
    int64_t frac = ms % 1000;
    time_t s = (time_t)(ms / 1000 - (frac < 0));
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(frac < 0 ? frac + 1000 : frac));
}
