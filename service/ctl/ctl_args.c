#include "ctl/ctl_args.h"

#include <stddef.h>

int ctl_arg_i64(const char *s, enum ctl_sign sign, int64_t *out)
{
    int neg = 0;
    if (!s)
        return -1;
    if (sign == CTL_SIGNED && (*s == '+' || *s == '-'))
        neg = *s++ == '-';
    if (*s == '\0')
        return -1;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (limit - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 0;
}
