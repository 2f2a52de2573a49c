/*
 * ctl_token: `seckillctl token --user N [--ttl S] [--kid K]`, a buyer token
 * for curl, the README's examples and tests: a JWT (HS256) whose sub is the
 * user and whose exp is now + S seconds (at most buyer_token_max_ttl_s),
 * signed with buyer_token_secret under buyer_token_kid, or with the secret
 * whose kid is K (buyer_token_kid_next's during a rotation).
 *
 * The secret comes from the daemon's settings (SECKILL_BUYER_TOKEN_SECRET or
 * the SECKILL_CONFIG file), never from the command line, where `ps` and the
 * shell's history would show it.
 */
#ifndef SECKILL_CTL_TOKEN_H
#define SECKILL_CTL_TOKEN_H

#include <stdio.h>

#include "ctl/ctl.h"

#define CTL_TOKEN_TTL_DEFAULT_S 3600

/* Writes the usage lines of the token command to out. */
void ctl_token_usage(FILE *out);

/* Runs `token --user N [--ttl S] [--kid K]` (argv[0] is the first flag): prints the
 * token and a newline on stdout.  Returns CTL_EXIT_OK, or CTL_EXIT_USAGE
 * (bad flags, an unknown kid, no or too short a secret) after saying why on stderr. */
int ctl_token_main(struct ctl *ctl, int argc, char **argv);

#endif
