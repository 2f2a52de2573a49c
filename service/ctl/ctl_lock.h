/*
 * ctl_lock: `seckillctl lock ...`, the operator's view of the rlock locks:
 * list, inspect, force-release (seed 004's manual release of a stuck lock)
 * and hold (take a lock from a shell script or an interop test).
 */
#ifndef SECKILL_CTL_LOCK_H
#define SECKILL_CTL_LOCK_H

#include <stdio.h>

#include "ctl/ctl.h"

/* Default SCAN pattern of `lock list`: every lock the service takes. */
#define CTL_LOCK_DEFAULT_MATCH "seckill:*lock*"

/* Writes the usage lines of the lock commands to out. */
void ctl_lock_usage(FILE *out);

/* Runs `lock <command> [args]` with argv[0] == the command.  Returns an
 * enum ctl_exit code; messages go to stderr, results to stdout. */
int ctl_lock_main(struct ctl *ctl, int argc, char **argv);

#endif
