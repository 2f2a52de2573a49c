/*
 * order_life: an order's life after the writer (runs on workers and the
 * sweeper thread).
 *
 *   pending --writer--> confirmed --pay--> paid     (a SKU without a payment
 *      |                    |------cancel--> cancelled   window: confirmed is final)
 *      |                    '--window ends-> expired
 *      |--writer--> rejected
 *      '--cancel--> cancelled (the writer writes it so; it never took stock)
 *
 * Paying changes one row, guarded by its state and deadline.  Cancelling and
 * expiring give units back, so they run under the SKU's lock and fenced row
 * lock, like an admin delta: in one transaction the row's state, skus.stock
 * and a 'return' ledger row (at most one per order); after COMMIT, still
 * under the lock, order_release.lua gives the units to Redis (stock, and the
 * buyer's units held) once per order; then the row is marked settled.  A
 * process that dies between the two leaves the row unsettled, and the next
 * transaction on the SKU (any sweeper's, every expiry_sweep_interval_ms)
 * settles it: the script is idempotent by order and by the SKU's load epoch.
 */
#ifndef SECKILL_ORDER_LIFE_H
#define SECKILL_ORDER_LIFE_H

#include <jansson.h>
#include <stdint.h>

#include "store/workers.h"

enum life_result {
    LIFE_OK,           /* done now; *out is the order */
    LIFE_REPLAYED,     /* it was done already (same payment_ref, already cancelled) */
    LIFE_NOT_FOUND,    /* no such order, or (cancel) another buyer's */
    LIFE_WRONG_STATE,  /* its state forbids it; *out {"status": the state} */
    LIFE_REF_CONFLICT, /* paid under another payment_ref, or the ref paid another order */
    LIFE_UNAVAILABLE,  /* Redis or PostgreSQL failed; nothing changed, or a retry settles it */
};

/* The payment callback: confirmed -> paid, within the order's window.  An
 * order whose window passed answers LIFE_WRONG_STATE "expired" even before a
 * sweeper reached it; one of a SKU without a payment step, "confirmed". */
enum life_result order_pay(struct worker_ctx *w, int64_t order_id, const char *payment_ref,
                           json_t **out);

/* The buyer's cancel: confirmed -> cancelled (units back) while its payment
 * window is open, or a pending order recorded as cancelled for the writer.
 * Without a payment window confirmed is final (LIFE_WRONG_STATE
 * "confirmed"); past the window it counts as expired.  LIFE_NOT_FOUND for
 * an order that is not buyer's (as the lookup answers). */
enum life_result order_cancel(struct worker_ctx *w, int64_t order_id, int64_t buyer, json_t **out);

/* What one sweep did. */
struct life_sweep {
    int64_t skus;     /* SKUs that had work */
    int64_t expired;  /* orders expired now */
    int64_t failures; /* SKUs whose work failed (retried next sweep) */
};

/* Expires the orders whose window has passed and settles unsettled returns,
 * on the SKUs that have such work (at most max_skus per sweep, from the
 * first id above *cursor, which it moves on: start it at 0 and keep it
 * between sweeps, so that no SKU waits behind others that always have work),
 * at most 'batch' orders per transaction.  Safe with any
 * number of sweepers at once (the SKU lock orders them, and every state
 * change is guarded).  Returns 0, or -1 when the database could not be
 * asked. */
int order_life_sweep(struct worker_ctx *w, int64_t batch, int64_t max_skus, int64_t *cursor,
                     struct life_sweep *s);

#endif
