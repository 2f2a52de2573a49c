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
    int64_t answered_wall_us; /* the first answer naming it came then (0: unknown, a file's) */
};

/* The order lifecycle (lt_life.h): what the run did, after its buyers, with
 * an order a 201 or 202 named. */
enum lt_plan {
    LT_PLAN_PAY = 'p',    /* the admin pays it: POST /admin/v1/orders/{id}/payment */
    LT_PLAN_CANCEL = 'c', /* its buyer cancels it: POST /api/v1/orders/{id}/cancel */
    LT_PLAN_WALK = 'w'    /* nobody does anything: with a payment window it expires */
};

#define LT_WORD_MAX 32 /* an error code or an order state an answer names */

/* One answer to a pay or a cancel. */
struct lt_reply {
    int code;                /* HTTP status; 0 no answer (timeout, connection); -1 not sent */
    int replayed;            /* the body says "replayed": true */
    int ref_ok;              /* the body names the payment_ref that was sent */
    char error[LT_WORD_MAX]; /* the body's "error" ("" none, "?" not a plain word) */
    char state[LT_WORD_MAX]; /* the body's "status": the order's state ("" none) */
};

struct lt_act {
    int64_t id, user;
    enum lt_plan plan;   /* a pay or cancel the phase could not send becomes a walk */
    int again;           /* a pay sent a second time with the same payment_ref */
    int64_t aim_wall_us; /* not 0: sent then (wall clock), about its deadline */
    uint64_t due_us;     /* sent this long after the phase began */
    struct lt_reply first, second;
};

/* The lifecycle phase's requests and answers, counted. */
struct lt_life_counts {
    uint64_t pays, pay_ok, pay_refused, pay_unknown, pay_other; /* 200, 409, 0/429/503, else */
    uint64_t pay_again, pay_again_ok;                           /* the second pays */
    uint64_t cancels, cancel_ok, cancel_refused, cancel_unknown, cancel_other;
    uint64_t aimed;  /* pays and cancels aimed at their order's deadline */
    uint64_t walks;  /* orders left alone */
    uint64_t unsent; /* pays and cancels the phase's end left unsent (walks now) */
    double elapsed_s;
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
    uint64_t unknown; /* logical requests that never got a definite answer */
    /* Their users (lt_answers_unknown), which say which bucket of a bucketed
     * SKU may hold their rows; fewer than 'unknown' when not known (a file's
     * record, or out of memory). */
    int64_t *unknown_users;
    size_t n_unknown_users, cap_unknown_users;
    uint64_t idem_mismatch; /* retries with the same key that got another order */
    uint64_t unexpected;    /* answers a correct service never gives */
    int64_t admin_applied;  /* sum of the deltas answered 200 */
    uint64_t admin_ok, admin_refused, admin_unknown;
    int64_t admin_unknown_abs; /* sum of |delta| of deltas with no definite answer */
    struct lt_act *acts;       /* the lifecycle, one per order it planned (lt_life.h) */
    size_t nacts;
    struct lt_life_counts life;
    /* A bucket's record (lt_answers_split): the run's admin deltas went to the
     * parent SKU and moved units between its buckets, so the admin ledger is
     * judged on the sum of the buckets (lt_check_admin_ledger), not here. */
    int admin_in_group;
};

/* Empty record for 'sku'. */
void lt_answers_init(struct lt_answers *a, int64_t sku);
void lt_answers_free(struct lt_answers *a);

/* Appends an answer naming an order, which arrived at wall_us (wall clock,
 * 0 unknown).  Returns 0 or -1 when out of memory. */
int lt_answers_add(struct lt_answers *a, int64_t id, int64_t user, int64_t qty,
                   enum lt_promise promise, int64_t wall_us) __attribute__((warn_unused_result));

/* Counts one logical request of 'user' whose outcome stayed unknown (its
 * user is kept too, unless memory ran out). */
void lt_answers_unknown(struct lt_answers *a, int64_t user);

/* Splits the answers 'from' about a bucketed SKU into to[0..n-1], the
 * records of its n buckets (initialised; their sku and baseline set): an
 * order goes to its user's bucket (user mod n, the service's routing), so
 * does an unknown outcome (to every bucket when its user is not known: any
 * of them may hold its row).  Unexpected answers and idempotency mismatches,
 * which every bucket would judge alike, go to to[0] so that they count once;
 * the admin counters stay in 'from' (the deltas went to the parent).
 * Returns 0, or -1 when out of memory. */
int lt_answers_split(const struct lt_answers *from, struct lt_answers *to, int n)
    __attribute__((warn_unused_result));

/* Sorts by id and merges the answers about one order (a retry's replay): a
 * 202 and a later 201 or 409 of the same order keep the stronger promise,
 * and the earliest answer's time.
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
