/*
 * lt_answers: what the buyers were promised, for the I4 check.  Every answer
 * that named an order (201 confirmed, 202 pending, 409 rejected with an order
 * id) with its user, quantity and promise, the number of requests whose
 * outcome stayed unknown, and the run's baseline.  Can be saved to a file by
 * a run and read back by --check-only.
 */
#ifndef LT_ANSWERS_H
#define LT_ANSWERS_H

#include <stddef.h>
#include <stdint.h>

/* What an answer promised about its order; the letters are the file format. */
enum lt_promise {
    LT_PROMISE_CONFIRMED = 'c', /* 201: the row is committed, status confirmed */
    LT_PROMISE_PENDING = 'p',   /* 202: reserved; a row follows unless Redis loses it */
    LT_PROMISE_REJECTED = 'r'   /* 409 with an order id: a row with status rejected */
};

struct lt_order {
    int64_t id, user, qty;
    enum lt_promise promise;
};

/* The SKU as it was before the run (after its stream had drained). */
struct lt_baseline {
    int known;             /* 0: no baseline (check-only without an answers file) */
    int64_t stock;         /* skus.stock */
    int64_t max_order_id;  /* orders of the SKU above this id are the run's */
    int64_t max_ledger_id; /* ledger rows above this id are the run's */
};

struct lt_answers {
    int64_t sku;
    struct lt_baseline base;
    struct lt_order *orders; /* one per answer naming an order (replays included) */
    size_t n, cap;
    uint64_t unknown;       /* logical requests that never got a definite answer */
    uint64_t idem_mismatch; /* retries with the same key that got another order */
    uint64_t unexpected;    /* answers a correct service never gives */
    int64_t admin_applied;  /* sum of the deltas answered 200 */
    uint64_t admin_ok, admin_refused, admin_unknown;
    int64_t admin_unknown_abs; /* sum of |delta| of deltas with no definite answer */
};

/* Empty record for 'sku'. */
void lt_answers_init(struct lt_answers *a, int64_t sku);
void lt_answers_free(struct lt_answers *a);

/* Appends an answer naming an order.  Returns 0 or -1 when out of memory. */
int lt_answers_add(struct lt_answers *a, int64_t id, int64_t user, int64_t qty,
                   enum lt_promise promise) __attribute__((warn_unused_result));

/* Sorts by id and merges the answers about one order (a retry's replay): a
 * 202 and a later 201 or 409 of the same order keep the stronger promise.
 * Returns the number of ids seen with two different users, quantities, or
 * both confirmed and rejected (kept, so that the check reports them). */
size_t lt_answers_dedupe(struct lt_answers *a);

/* Sum of qty over the (deduplicated) orders. */
int64_t lt_answers_units(const struct lt_answers *a);

/* Writes a text file (header lines, then "o ID USER QTY PROMISE").  Returns 0 or -1
 * with a message in err. */
int lt_answers_save(const struct lt_answers *a, const char *path, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Reads what lt_answers_save wrote into an initialised, empty a (a line of
 * an older file without PROMISE is a 202).  Returns 0, or -1 with a message
 * in err. */
int lt_answers_load(struct lt_answers *a, const char *path, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
