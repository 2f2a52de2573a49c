/*
 * lt_check: the invariant check, read directly from PostgreSQL and Redis
 * after the SKU's order stream has drained.  What a run was promised (its 202
 * order ids, the unknown outcomes, the admin deltas answered 200) is compared
 * with what the database holds:
 *
 *   sold      units sold (of orders confirmed or paid) = units of the answered orders
 *             (201, 202, 409 with an order id) - those whose row is rejected, cancelled
 *             or expired - 202s Redis lost (with --allow-lost-pending) + orders of
 *             unknown outcome still confirmed or paid
 *   I1        skus.stock >= 0, = initial + admin deltas - sold, = sum of the ledger
 *             (sql/invariant_check.sql); = stock before the run + the run's deltas
 *             answered 200 - the run's sales + what older orders gave back during it;
 *             the admin ledger holds exactly those deltas (of a bucketed SKU: summed
 *             over its buckets, as moves between them write admin rows that cancel out)
 *   I2        Redis stock = skus.stock; Redis units held per user = units of the
 *             user's confirmed and paid orders; no reservation left 'pending' in the
 *             journal
 *   I3        no user holds more than the per-user limit (confirmed and paid orders)
 *   I4        every 201 is exactly one row, confirmed then (or paid, cancelled or
 *             expired since), and every 409 with an order id one rejected row (same
 *             user, same qty), whatever fault happened; every 202 is exactly one row
 *             (at most one with --allow-lost-pending, the lost ones counted); every row
 *             of the run has an answer or could belong to an unknown one (a 503 took
 *             nothing); a retry with the same Idempotency-Key named the same order;
 *             one ledger row of the writer's per order ('order', 'rejection' or
 *             'cancel', as its state says)
 *   lifecycle settled: no confirmed order past its payment deadline (in a run with
 *             --payment-window: none with a deadline at all, waited for up to the
 *             window + --lifecycle-timeout), no return still on its way to Redis;
 *             every unit given back once: a cancelled or expired order that took
 *             units has one 'return' row of its qty, no other order has one, and an
 *             order cancelled before it was written has one 'cancel' row and no
 *             'order' row; every pay answered 200 left its order paid with its ref,
 *             every cancel answered 200 cancelled, every 409 names the state the
 *             row is in (never paid after a refused pay); orders left alone expired
 *             (or, without a window, stayed confirmed), and no order the run did not
 *             pay or cancel is paid or cancelled; a pay sent twice with one ref
 *             answered 200 twice, the second "replayed"
 */
#ifndef LT_CHECK_H
#define LT_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "lt_answers.h"
#include "lt_opts.h"

enum lt_check_id {
    LT_CHK_DRAINED,
    LT_CHK_LC_SETTLED,
    LT_CHK_ANSWERS,
    LT_CHK_SOLD,
    LT_CHK_I1_LEDGER,
    LT_CHK_I1_RUN,
    LT_CHK_I1_ADMIN,
    LT_CHK_I2_STOCK,
    LT_CHK_I2_HELD,
    LT_CHK_I2_JOURNAL,
    LT_CHK_I3_LIMIT,
    LT_CHK_I4_ANSWERED,
    LT_CHK_I4_ROWS,
    LT_CHK_I4_IDEM,
    LT_CHK_I4_LEDGER,
    LT_CHK_LC_RETURNS,
    LT_CHK_LC_ANSWERS,
    LT_CHK_LC_LEFT,
    LT_CHK_LC_PAY_AGAIN,
    LT_CHK_COUNT
};

enum lt_check_state { LT_CHECK_SKIPPED, LT_CHECK_PASSED, LT_CHECK_FAILED };

#define LT_CHECK_MAX_ROWS 20 /* offending rows printed per check */
#define LT_CHECK_ROWS_BYTES 4096

struct lt_check_item {
    enum lt_check_state state;
    char detail[320];
    char rows[LT_CHECK_ROWS_BYTES]; /* offending rows, a header line first */
};

struct lt_check_facts {
    int64_t db_stock, redis_stock, initial_stock, per_user_limit;
    int64_t run_orders, run_confirmed_units, run_rejected_orders, run_rejected_units;
    /* run_confirmed_units: units of the run's orders that hold them (confirmed, paid) */
    int64_t answered_orders, answered_units, answered_rejected_units;
    int64_t answered_returned_units; /* of answered orders now cancelled or expired */
    int64_t early_returned_units;    /* given back during the run by older orders */
    int64_t answered_confirmed, answered_rejected, answered_pending; /* by promise */
    int64_t lost_pending_orders, lost_pending_units;                 /* 202s without a row */
    int64_t unanswered_rows, unanswered_confirmed_units;
    int64_t admin_ledger_sum, admin_ledger_rows;
    int64_t first_created_us, last_created_us; /* wall clock of the run's first/last row */
    double drain_s;                            /* wait for the stream to drain */
    /* the lifecycle: the SKU's window, and the run's orders by their state now */
    int64_t payment_window_s;
    int64_t lc_paid, lc_expired;
    int64_t lc_cancelled_early; /* cancelled before the writer wrote them (reason 'cancelled') */
    int64_t lc_cancelled_late;  /* cancelled once confirmed: their units came back */
    int64_t lc_returned_units;  /* the 'return' ledger rows of the run's orders */
    double settle_s;            /* wait for the deadlines and the returns to Redis */
};

struct lt_check_result {
    int ok; /* no check failed */
    struct lt_check_item item[LT_CHK_COUNT];
    struct lt_check_facts f;
};

/* "I1 stock = initial + deltas - sold = ledger", ... */
const char *lt_check_name(enum lt_check_id id);
/* Short machine name: "i1_ledger", ... */
const char *lt_check_key(enum lt_check_id id);

/* Waits (bounded by o->drain_timeout_s) until the SKU's order stream is
 * empty and reads the baseline of a run.  Returns 0, or -1 with a message in
 * err (unreachable, unknown SKU, not drained). */
int lt_check_baseline(const struct lt_opts *o, int64_t sku, struct lt_baseline *b, char *err,
                      size_t errlen) __attribute__((warn_unused_result));

/* Waits (bounded by o->drain_timeout_s) until the SKU's order stream is
 * empty: every order of the run has its row.  Returns 0, or -1 with a
 * message in err. */
int lt_check_drain(const struct lt_opts *o, int64_t sku, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Runs every check that the record 'a' allows (a->base.known == 0 skips the
 * run-relative ones; an answers record with no baseline means check-only
 * without --answers).  Returns 0 when the check could be made (r->ok tells
 * whether the invariants held), or -1 with a message in err when it could not
 * (unreachable, SKU missing, stream not drained: r->item[LT_CHK_DRAINED]). */
int lt_check_run(const struct lt_opts *o, const struct lt_answers *a, struct lt_check_result *r,
                 char *err, size_t errlen) __attribute__((warn_unused_result));

/* Folds one SKU's result 'one' into a run's result 'into' (of several SKUs;
 * 'first' set for the first SKU, which copies it).  A check fails when it
 * failed for any SKU (the first failing SKU's detail, prefixed with its
 * 'name', "SKU 7" or "bucket 1 (SKU 8) of SKU 6", and rows are kept), passes
 * when it passed for some and failed for none; the facts are summed (stocks,
 * orders, units, answers), the rows' time span and the drain wait widened,
 * the per-user limit is the first SKU's. */
void lt_check_merge(struct lt_check_result *into, const struct lt_check_result *one,
                    const char *name, int first);

/* I1 admin: the admin ledger since the baseline (r->f) holds exactly the
 * deltas answered 200 in a, give or take those that got no answer; the
 * detail starts with 'who'.  lt_check_run judges a SKU so; a bucketed SKU
 * is judged so once its buckets' results (each without it: admin_in_group)
 * were merged into r, on their summed ledger, where the moves between
 * buckets cancel out, against the parent's record a. */
void lt_check_admin_ledger(struct lt_check_result *r, const struct lt_answers *a, const char *who);

#endif
