/*
 * reconcile: keeps Redis and PostgreSQL in agreement without an operator.
 *
 * A pass looks at every SKU: cheaply first (sku_peek, no lock), and under the
 * SKU's lock (sku_check) only when something is off: Redis lost the SKU or
 * restarted since it was built, adjustment records of a dead process are
 * open, or the stocks differ while nothing is in flight.  The daemon runs a
 * pass at start-up, every reconcile_interval_ms, and at once when another part
 * of the process asks (a buyer found the SKU missing, a writer saw the
 * database refuse what Redis had sold).  `seckillctl reconcile` runs the same
 * pass by hand.
 */
#ifndef SECKILL_RECONCILE_H
#define SECKILL_RECONCILE_H

#include <stdint.h>
#include <stdio.h>

#include "core/cfg.h"
#include "sku/sku.h"
#include "store/workers.h"

struct reconcile_totals {
    int64_t skus, checked, drifted, drift_units, rebuilt, settled, dead_letters, failed,
        invariant_broken;
};

/* One pass over 'sku' (0: every SKU) in 'mode'.  SKU_CHECK_ONLY and a
 * single SKU always take the locked look; otherwise only SKUs the peek found
 * off do.  Prints one line per SKU looked at under the lock to 'out' (may be
 * NULL) and adds to t.  Returns 0, or -1 when a store failed. */
int reconcile_pass(struct worker_ctx *w, int64_t sku, enum sku_check_mode mode, FILE *out,
                   struct reconcile_totals *t);

/* Prints c as one line, "sku 42: ..." */
void reconcile_print(FILE *out, const struct sku_check *c);

struct reconciler;

/* Starts the daemon's reconciler thread (first pass at once).  Returns NULL
 * with err set on failure. */
struct reconciler *reconcile_start(const struct cfg *c, char *err, size_t errlen);

/* Asks the running reconciler, if any, for a pass now.  Any thread. */
void reconcile_kick(void);

/* Tells the running reconciler, if any, that the database refused orders of
 * 'sku' that Redis had reserved: Redis is ahead of it.  Waiting for a quiet
 * moment to compare could take the whole sale, with every phantom unit sold
 * and refused again; a rebuild is safe while orders are in flight, so the
 * SKU is rebuilt now, at most once per reconcile_interval_ms (the refusals a
 * rebuild itself causes, of orders already in flight, do not start another
 * at once).  Any thread. */
void reconcile_refused(int64_t sku);

/* Stops and joins the thread; NULL is a no-op. */
void reconcile_stop(struct reconciler *r);

#endif
