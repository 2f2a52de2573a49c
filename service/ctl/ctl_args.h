/*
 * ctl_args: the pure parts of seckillctl's command lines: integers as
 * operators type them.  No I/O, for the unit tests.
 */
#ifndef SECKILL_CTL_ARGS_H
#define SECKILL_CTL_ARGS_H

#include <stdint.h>

/* Whether a flag's integer may carry a sign. */
enum ctl_sign { CTL_UNSIGNED, CTL_SIGNED };

/* Parses s, all of it, as a decimal int64: digits only (CTL_UNSIGNED), or
 * with one leading '+' or '-' (CTL_SIGNED: "+10", "-5", "7").  No blanks,
 * no hex, no overflow.  Returns 0 with *out, or -1. */
int ctl_arg_i64(const char *s, enum ctl_sign sign, int64_t *out)
    __attribute__((warn_unused_result));

#endif
