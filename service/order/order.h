/*
 * order: the outcome of one order, in the words every other module uses.
 *
 * An order is first a reservation in Redis (reserve.lua), then a row in
 * PostgreSQL decided by a writer: confirmed, or rejected with a reason (its
 * units went back to Redis).  This module names what the order's steps share
 * (the id layout, the stream entry's fields, the outcomes) and turns
 * reserve.lua's replies, the journal's states and the writers' decision
 * messages into them, in one place, so that no other module compares script
 * strings.  Pure code: no I/O.
 */
#ifndef SECKILL_ORDER_H
#define SECKILL_ORDER_H

#include <hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"

/*
 * Order ids: epoch * 2^ORDER_SEQ_BITS + a per-epoch sequence.  Epochs come
 * from a PostgreSQL sequence (migrations/0001_init.sql, whose MAXVALUE is
 * ORDER_EPOCH_MAX so ids stay below 2^53, exact in Lua's doubles); the
 * sequence from reserve.lua, which is given ORDER_IDS_PER_EPOCH.
 */
#define ORDER_SEQ_BITS 30
#define ORDER_EPOCH_MAX 8388607
#define ORDER_IDS_PER_EPOCH (INT64_C(1) << ORDER_SEQ_BITS)
#define ORDER_ID_MAX ((ORDER_EPOCH_MAX + 1) * ORDER_IDS_PER_EPOCH - 1)

/* The epoch part of an order id (which SKU load produced it). */
static inline int64_t order_id_epoch(int64_t order_id)
{
    return order_id >> ORDER_SEQ_BITS;
}

/*
 * The fields of a reservation's entry on its SKU's order stream.  reserve.lua
 * writes them and orders_dead_letter.lua reads them; both are given these
 * names as arguments, so they are written here only.
 */
enum order_field {
    ORDER_FIELD_ID,
    ORDER_FIELD_USER,
    ORDER_FIELD_QTY,
    ORDER_FIELD_IDEM,
    ORDER_NFIELDS
};
extern const char *const order_fields[ORDER_NFIELDS];

#define ORDER_REASON_MAX 48

/* Why the database refused an order Redis had reserved. */
#define ORDER_REASON_NO_STOCK "insufficient_stock"
#define ORDER_REASON_LIMIT "limit_exceeded"
#define ORDER_REASON_ID_CONFLICT "id_conflict"
/* Not refused: its buyer cancelled it before any writer wrote it (the row says
 * status 'cancelled' with this reason; it never took stock). */
#define ORDER_REASON_CANCELLED "cancelled"

/*
 * Every outcome of asking for an order, in one enum: placing it (what
 * reserve.lua and then the writer answered), and looking it up.  The first
 * three are also the states of an order that exists.  The HTTP layer maps
 * them to answers in one switch.
 */
enum order_result {
    ORDER_PENDING,         /* reserved in Redis, not written yet */
    ORDER_CONFIRMED,       /* written: stock taken in PostgreSQL */
    ORDER_REJECTED,        /* the database refused it; its units went back */
    ORDER_SOLD_OUT,        /* not enough stock: nothing taken */
    ORDER_LIMIT_EXCEEDED,  /* the buyer would hold more than the SKU's limit */
    ORDER_SALE_NOT_ACTIVE, /* outside the sale window */
    ORDER_IDEM_MISMATCH,   /* the Idempotency-Key was used with another request */
    ORDER_SKU_UNKNOWN,     /* neither Redis nor PostgreSQL knows the SKU */
    ORDER_SKU_NOT_LOADED,  /* PostgreSQL knows it, Redis does not (yet): being restored */
    ORDER_OUTCOME_LOST,    /* the connection broke after the script was sent: may be taken */
    ORDER_OUTCOME_TIMEOUT, /* no reply in time: taken only if Redis stalled after running it */
    ORDER_NOT_RECORDED,    /* durable: reserved, no commit in time, and PostgreSQL could not
                            * record it as pending: its Idempotency-Key settles it */
    ORDER_DEADLINE_PASSED, /* the script ran after the request's deadline: nothing taken */
    ORDER_IDS_EXHAUSTED,   /* the SKU's epoch has no order ids left: it needs a reload */
    ORDER_RATE_LIMITED,    /* the buyer's bucket on this SKU is empty: nothing taken */
    ORDER_STORE_FULL,      /* Redis is at its maxmemory (noeviction): nothing taken */
    ORDER_UNAVAILABLE,     /* Redis or PostgreSQL failed, or shutting down: nothing taken */
    ORDER_NOT_FOUND,       /* lookup: no such order */
    ORDER_FOUND,           /* lookup: here it is */
};

/* Returns a static snake_case name for r ("sold_out"), for logs and tests. */
const char *order_result_name(enum order_result r);

#define ORDER_ENTRY_MAX 32 /* a stream entry id, "<ms>-<seq>" */

/* What a writer decided about one reservation. */
struct order_decision {
    int64_t order_id;
    /* The reservation's stream entry id ("" unknown): Redis may issue an order
     * id twice after losing writes, never an entry id. */
    char entry[ORDER_ENTRY_MAX];
    enum order_result status;      /* ORDER_PENDING, ORDER_CONFIRMED or ORDER_REJECTED */
    char reason[ORDER_REASON_MAX]; /* "" unless rejected */
};

/* Whether decision d is about the reservation 'entry' of order 'id' (an
 * unknown entry on either side matches any). */
int order_decision_is_for(const struct order_decision *d, int64_t id, const char *entry);

/* What reserve.lua answered, as an outcome. */
struct order_reply {
    enum order_result result;
    int replayed;            /* the answer to an earlier request with the same Idempotency-Key */
    struct order_decision d; /* the order, when result is PENDING, CONFIRMED or REJECTED */
    int64_t retry_after_ms;  /* RATE_LIMITED: when the buyer's bucket has an order again */
    int64_t remaining;       /* SOLD_OUT, not replayed: the units Redis still had; else -1 */
};

/*
 * One reserve.lua call: a batch of orders on one SKU's keys (a lone order is
 * a batch of one), built in one place for the HTTP path, the tests and the
 * bench (see lua/reserve.lua for the layout).  Zero it once, then per call
 * order_reserve_begin, order_reserve_add per order, order_reserve_argv; it
 * keeps its memory between calls until order_reserve_free.
 */
#define ORDER_RESERVE_KEYS_PER_ORDER 2
#define ORDER_RESERVE_ARGS_COMMON (5 + ORDER_NFIELDS + 3)
#define ORDER_RESERVE_ARGS_PER_ORDER 7
struct order_reserve_order {
    char idem_key[KEYS_MAX], rate_key[KEYS_MAX];
    char user[24], qty[24], fp[48], parent[24];
    char idem[KEYS_IDEM_MAX + 1];
    const char *remember, *rated;
};
struct order_reserve_call {
    int64_t sku, idem_ttl_s;
    int n, cap;                          /* orders added, room for */
    int nkeys, nargs;                    /* set by order_reserve_argv */
    int argv_cap;                        /* room in argv */
    struct order_reserve_order *orders;  /* cap of them */
    const char **argv;                   /* into the above, by order_reserve_argv */
    char keys[KEYS_RESERVE_N][KEYS_MAX]; /* shared by every order */
    char count[24], ttl[24], auto_ttl[24], deadline[24], per_epoch[24];
    char rate_interval_us[24], rate_burst[24], refusal_ttl[24];
};

/* Starts a call on the keys of sku, with no order and no buyer's bucket
 * limit: an Idempotency-Key the buyer sent is kept idem_ttl_s (a refusal
 * under it too, unless order_reserve_refusal_ttl says otherwise), one the
 * service made up auto_idem_ttl_s; past deadline_ms (Unix ms, Redis clock:
 * the earliest of the batch's) the script takes nothing. */
void order_reserve_begin(struct order_reserve_call *c, int64_t sku, int64_t idem_ttl_s,
                         int64_t auto_idem_ttl_s, int64_t deadline_ms);

/* Adds an order of qty units by user (its reply is element c->n - 1 after
 * the call); 'idem' is the validated Idempotency-Key (copied) or NULL,
 * 'buyers_key' says whether the buyer sent it (only then is a refusal
 * remembered under it).  'parent' (0: none) makes it an order on the parent
 * SKU whose bucket c's sku is: reserve.lua refuses it (ORDER_SKU_UNKNOWN)
 * unless the bucket is the buyer's, and does not remember a sold_out under
 * the buyer's key (a transfer between buckets may end it).  'rated': the
 * order takes a token from the buyer's bucket (not when it is the same order
 * again after a transfer).  Allocation failure aborts. */
void order_reserve_add(struct order_reserve_call *c, int64_t user, int64_t qty, const char *idem,
                       int buyers_key, int64_t parent, int rated);

/* Sets the buyer's bucket of every order of c that is 'rated': 'per_min'
 * orders a minute, 'burst' at once (either 0: no limit). */
void order_reserve_limit(struct order_reserve_call *c, int64_t per_min, int64_t burst);

/* Sets how long a refusal is remembered under a buyer's own key: ttl_s,
 * at most the key's idem_ttl_s (a refusal is never kept longer than an order). */
void order_reserve_refusal_ttl(struct order_reserve_call *c, int64_t ttl_s);

/* Lays out the call's KEYS and ARGV in c->argv (c->nkeys + c->nargs
 * strings, valid until c changes) and returns it. */
const char **order_reserve_argv(struct order_reserve_call *c);

/* Frees what c holds (not c); c may be begun again. */
void order_reserve_free(struct order_reserve_call *c);

/* Order i's reply in reserve.lua's reply r for n orders: its element, or r
 * itself when r is an error (it refused every order), or NULL when r is not
 * n replies (unusable: parsed as ORDER_UNAVAILABLE). */
const redisReply *order_reserve_reply_at(const redisReply *r, int n, int i);

/* Parses reserve.lua's reply (NULL when none came).  Never fails: an error
 * reply or an answer this code does not know becomes ORDER_UNAVAILABLE (the
 * script refuses before its first write, so nothing was taken). */
void order_parse_reply(const redisReply *r, struct order_reply *out);

/* Parses a journal state ("pending:<user>", "returned:<reason>"; NULL or
 * absent means the order was confirmed and acknowledged) into
 * d->status/reason.  A bare "pending" (written before states named their
 * buyer) is pending too. */
void order_parse_state(const char *state, struct order_decision *d);

/* The buyer a pending journal state names ("pending:<user>"), or 0 when the
 * state is not pending or names nobody. */
int64_t order_pending_owner(const char *state);

/* The stream entry a pending journal state names, into entry[0..cap): ""
 * for a state of the older form that names none.  Returns 0, or -1 when the
 * state is not pending or its entry is malformed. */
int order_pending_entry(const char *state, char *entry, size_t cap);

/* Appends one decision to a decision message (space-separated tokens
 * "<id>@<entry>:c" or "<id>@<entry>:r:<reason>") in buf of cap bytes at *len.  Returns 0, or
 * -1 when it does not fit (nothing appended). */
int order_decision_append(char *buf, size_t cap, size_t *len, const struct order_decision *d)
    __attribute__((warn_unused_result));

/* Parses the next decision of a message at *p, advancing *p.  Returns 1 with
 * d set, 0 at the end, -1 on a malformed token (*p moves past it). */
int order_decision_next(const char **p, struct order_decision *d);

/* The outcome a rejection reason stands for: ORDER_SOLD_OUT for
 * insufficient_stock, ORDER_LIMIT_EXCEEDED for limit_exceeded, else
 * ORDER_REJECTED. */
enum order_result order_rejection_result(const char *reason);

#endif
