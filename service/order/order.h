/*
 * order: the outcome of one order, in the words every other module uses.
 *
 * An order is first a reservation in Redis (reserve.lua), then a row in
 * PostgreSQL decided by a writer: confirmed, or rejected with a reason (its
 * units went back to Redis).  This module turns reserve.lua's replies, the
 * journal's states and the writers' decision messages into enums, in one
 * place, so that no other module compares script strings.
 */
#ifndef SECKILL_ORDER_H
#define SECKILL_ORDER_H

#include <hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"

#define ORDER_REASON_MAX 48

/* Why the database refused an order Redis had reserved. */
#define ORDER_REASON_NO_STOCK "insufficient_stock"
#define ORDER_REASON_LIMIT "limit_exceeded"
#define ORDER_REASON_ID_CONFLICT "id_conflict"

enum order_status { ORDER_PENDING, ORDER_CONFIRMED, ORDER_REJECTED };

#define ORDER_ENTRY_MAX 32 /* a stream entry id, "<ms>-<seq>" */

struct order_decision {
    int64_t order_id;
    /* The reservation's stream entry id ("" unknown): Redis may issue an order
     * id twice after losing writes, never an entry id. */
    char entry[ORDER_ENTRY_MAX];
    enum order_status status;
    char reason[ORDER_REASON_MAX]; /* "" unless rejected */
};

/* Whether decision d is about the reservation 'entry' of order 'id' (an
 * unknown entry on either side matches any). */
int order_decision_is_for(const struct order_decision *d, int64_t id, const char *entry);

/* What reserve.lua answered. */
enum order_verdict {
    ORDER_RESERVED,       /* stock taken, order queued: order_id set */
    ORDER_REPLAYED,       /* same Idempotency-Key and body: order_id and decision set */
    ORDER_REFUSED_AGAIN,  /* same key as an earlier refusal: refused set */
    ORDER_IDEM_MISMATCH,  /* same key, other body */
    ORDER_NOT_LOADED,     /* Redis does not hold the SKU */
    ORDER_EXPIRED,        /* the script ran after the request's deadline: nothing taken */
    ORDER_NOT_ACTIVE,     /* outside the sale window */
    ORDER_LIMIT_EXCEEDED, /* the user would hold more than the limit */
    ORDER_SOLD_OUT,       /* not enough stock */
    ORDER_EXHAUSTED,      /* the epoch ran out of order ids: the SKU needs a reload */
    ORDER_FAILED          /* an error reply or an answer this code does not know */
};

struct order_reply {
    enum order_verdict verdict;
    struct order_decision d;  /* ORDER_RESERVED (pending), ORDER_REPLAYED */
    enum order_verdict again; /* ORDER_REFUSED_AGAIN: the first refusal's verdict */
};

/* The arguments of one reserve.lua call (see lua/reserve.lua), in one place
 * for the HTTP path and the tests. */
#define ORDER_RESERVE_NKEYS KEYS_RESERVE_N
#define ORDER_RESERVE_NARGS 8
struct order_reserve_call {
    char keys[KEYS_RESERVE_N][KEYS_MAX];
    char user[24], qty[24], fp[48], ttl[24], deadline[24], per_epoch[24];
    const char *argv[ORDER_RESERVE_NKEYS + ORDER_RESERVE_NARGS]; /* into the above */
};

/* Fills c for an order of qty units of sku by user; 'idem' is the validated
 * Idempotency-Key or NULL, 'buyers_key' says whether the buyer sent it (only
 * then is a refusal remembered under it); past deadline_ms (Unix ms, Redis
 * clock) the script takes nothing. */
void order_reserve_prepare(struct order_reserve_call *c, int64_t sku, int64_t user, int64_t qty,
                           const char *idem, int buyers_key, int64_t idem_ttl_s,
                           int64_t deadline_ms);

/* Parses reserve.lua's reply (NULL when none came).  Never fails: an
 * unexpected reply becomes ORDER_FAILED. */
void order_parse_reply(const redisReply *r, struct order_reply *out);

/* Parses a journal state ("pending", "returned:<reason>"; NULL or absent
 * means the order was confirmed and acknowledged) into d->status/reason. */
void order_parse_state(const char *state, struct order_decision *d);

/* Appends one decision to a decision message (space-separated tokens
 * "<id>@<entry>:c" or "<id>@<entry>:r:<reason>") in buf of cap bytes at *len.  Returns 0, or
 * -1 when it does not fit (nothing appended). */
int order_decision_append(char *buf, size_t cap, size_t *len, const struct order_decision *d)
    __attribute__((warn_unused_result));

/* Parses the next decision of a message at *p, advancing *p.  Returns 1 with
 * d set, 0 at the end, -1 on a malformed token (*p moves past it). */
int order_decision_next(const char **p, struct order_decision *d);

/* The refusal code a buyer sees for a rejection reason: "sold_out",
 * "limit_exceeded" or "order_rejected". */
const char *order_rejection_error(const char *reason);

#endif
