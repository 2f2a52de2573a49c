/*
 * ctl_token: `seckillctl token --user N [--ttl S]`, a buyer token for curl,
 * the README's examples and tests: a JWT (HS256) whose sub is the user and
 * whose exp is now + S seconds, signed with buyer_token_secret.
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
/* A week: a token cannot be revoked before it expires, so it stays short. */
#define CTL_TOKEN_TTL_MAX_S 604800

/* Writes the usage lines of the token command to out. */
void ctl_token_usage(FILE *out);

/* Runs `token --user N [--ttl S]` (argv[0] is the first flag): prints the
 * token and a newline on stdout.  Returns CTL_EXIT_OK, or CTL_EXIT_USAGE
 * (bad flags, no or too short a secret) after saying why on stderr. */
int ctl_token_main(struct ctl *ctl, int argc, char **argv);

#endif
