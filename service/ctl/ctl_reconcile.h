/*
 * ctl_reconcile: `seckillctl reconcile [--sku N] [--repair]`, the operator's
 * look at whether Redis agrees with PostgreSQL, SKU by SKU (stock, units per
 * user, reservations in flight, open adjustment records, dead letters, the
 * database's own invariant check), and the same repairs the daemon makes by
 * itself, under each SKU's lock with a fencing token.
 */
#ifndef SECKILL_CTL_RECONCILE_H
#define SECKILL_CTL_RECONCILE_H

#include <stdio.h>

#include "ctl/ctl.h"

/* Writes the usage lines of the reconcile command to out. */
void ctl_reconcile_usage(FILE *out);

/* Runs `reconcile [--sku N] [--repair]` (argv[0] is the first flag).  Returns
 * CTL_EXIT_OK when everything agrees (or was repaired), CTL_EXIT_STATE when
 * differences remain, CTL_EXIT_ERROR when a store failed, CTL_EXIT_USAGE. */
int ctl_reconcile_main(struct ctl *ctl, int argc, char **argv);

#endif
