#include "order/order.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/fmt.h"
#include "core/validate.h"
#include "store/redis_conn.h"
#include <rlock/resp.h>

static const char *str_at(const redisReply *r, size_t i)
{
    if (i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING)
        return NULL;
    return r->element[i]->str;
}

/* Reads a positive decimal order id; returns 0 when s is not one. */
static int64_t parse_id(const char *s)
{
    if (!s || *s < '1' || *s > '9')
        return 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    return *end == '\0' && v > 0 ? (int64_t)v : 0;
}

/* Copies a stream entry id ("" when absent or not of its form). */
static void copy_entry(char *out, const char *s)
{
    size_t n = s ? strspn(s, "0123456789-") : 0;
    if (!s || n == 0 || s[n] != '\0' || n >= ORDER_ENTRY_MAX)
        n = 0;
    if (n)
        memcpy(out, s, n);
    out[n] = '\0';
}

int order_decision_is_for(const struct order_decision *d, int64_t id, const char *entry)
{
    return d->order_id == id && (!d->entry[0] || !entry[0] || strcmp(d->entry, entry) == 0);
}

const char *const order_fields[ORDER_NFIELDS] = {
    [ORDER_FIELD_ID] = "o",
    [ORDER_FIELD_USER] = "u",
    [ORDER_FIELD_QTY] = "q",
    [ORDER_FIELD_IDEM] = "k",
};

const char *order_result_name(enum order_result r)
{
    static const char *const names[] = {
        [ORDER_PENDING] = "pending",
        [ORDER_CONFIRMED] = "confirmed",
        [ORDER_REJECTED] = "rejected",
        [ORDER_SOLD_OUT] = "sold_out",
        [ORDER_LIMIT_EXCEEDED] = "limit_exceeded",
        [ORDER_SALE_NOT_ACTIVE] = "sale_not_active",
        [ORDER_IDEM_MISMATCH] = "idempotency_key_reused",
        [ORDER_SKU_UNKNOWN] = "unknown_sku",
        [ORDER_SKU_NOT_LOADED] = "sku_not_loaded",
        [ORDER_OUTCOME_LOST] = "outcome_lost",
        [ORDER_OUTCOME_TIMEOUT] = "outcome_timeout",
        [ORDER_NOT_RECORDED] = "not_recorded",
        [ORDER_DEADLINE_PASSED] = "deadline_passed",
        [ORDER_IDS_EXHAUSTED] = "ids_exhausted",
        [ORDER_RATE_LIMITED] = "rate_limited",
        [ORDER_STORE_FULL] = "store_full",
        [ORDER_UNAVAILABLE] = "unavailable",
        [ORDER_NOT_FOUND] = "unknown_order",
        [ORDER_FOUND] = "found",
    };
    return (size_t)r < sizeof names / sizeof names[0] && names[r] ? names[r] : "unknown";
}

/* reserve.lua's first word, the one place its verdicts are read. */
static const struct {
    const char *word;
    enum order_result r;
} verdicts[] = {
    {"ok", ORDER_PENDING},
    {"not_loaded", ORDER_SKU_NOT_LOADED},
    {"expired", ORDER_DEADLINE_PASSED},
    {"sale_not_active", ORDER_SALE_NOT_ACTIVE},
    {"limit_exceeded", ORDER_LIMIT_EXCEEDED},
    {"sold_out", ORDER_SOLD_OUT},
    {"exhausted", ORDER_IDS_EXHAUSTED},
    {"idem_mismatch", ORDER_IDEM_MISMATCH},
    {"rate_limited", ORDER_RATE_LIMITED},
    /* a bucket asked directly, or for a buyer who is not in it */
    {"wrong_bucket", ORDER_SKU_UNKNOWN},
};
#define VERDICT_REPLAYED "dup"              /* same key and body: the order, as it is now */
#define VERDICT_REFUSED_AGAIN "dup_refused" /* same key as an earlier refusal: that refusal */

static enum order_result verdict_of(const char *word)
{
    for (size_t i = 0; word && i < sizeof verdicts / sizeof verdicts[0]; i++)
        if (strcmp(word, verdicts[i].word) == 0)
            return verdicts[i].r;
    return ORDER_UNAVAILABLE;
}

/* reserve.lua writes "pending:<user>:<entry>" (the owner answers GET of the
 * order; the entry tells this reservation from another one Redis gave the
 * same id after a failover).  "pending:<user>" and "pending" are older forms. */
#define STATE_PENDING "pending"

/* Whether a journal state is pending; returns what follows the word. */
static const char *pending_rest(const char *state)
{
    size_t n = strlen(STATE_PENDING);
    if (!state || strncmp(state, STATE_PENDING, n) != 0 || (state[n] && state[n] != ':'))
        return NULL;
    return state + n;
}

int64_t order_pending_owner(const char *state)
{
    const char *rest = pending_rest(state);
    if (!rest || *rest != ':')
        return 0;
    const char *end = strchr(rest + 1, ':');
    size_t len = end ? (size_t)(end - rest - 1) : strlen(rest + 1);
    int64_t user;
    if (validate_id_segment(rest + 1, len, &user) != 0)
        return 0;
    return user;
}

int order_pending_entry(const char *state, char *entry, size_t cap)
{
    entry[0] = '\0';
    if (!order_pending_owner(state))
        return -1;
    const char *e = strchr(state + strlen(STATE_PENDING) + 1, ':');
    if (!e)
        return 0; /* the older form: no entry named */
    e++;
    size_t len = strlen(e);
    if (len == 0 || len >= cap || len >= ORDER_ENTRY_MAX || strspn(e, "0123456789-") != len)
        return -1;
    memcpy(entry, e, len + 1);
    return 0;
}

void order_parse_state(const char *state, struct order_decision *d)
{
    d->reason[0] = '\0';
    if (pending_rest(state)) {
        d->status = ORDER_PENDING;
    } else if (state && strncmp(state, "returned:", 9) == 0) {
        d->status = ORDER_REJECTED;
        snprintf(d->reason, sizeof d->reason, "%s", state + 9);
    } else {
        d->status = ORDER_CONFIRMED;
    }
}

void order_parse_reply(const redisReply *r, struct order_reply *out)
{
    memset(out, 0, sizeof *out);
    out->remaining = -1;
    /* Redis refuses a script's first write past maxmemory, before anything
     * is written (reserve.lua's writes all need memory): nothing taken. */
    if (rlock_reply_kind(r) == RLOCK_REPLY_OOM) {
        out->result = ORDER_STORE_FULL;
        return;
    }
    const char *word = r && r->type == REDIS_REPLY_ARRAY ? str_at(r, 0) : NULL;
    if (word && strcmp(word, VERDICT_REPLAYED) == 0) {
        out->replayed = 1;
        out->d.order_id = parse_id(str_at(r, 1));
        order_parse_state(str_at(r, 2), &out->d);
        copy_entry(out->d.entry, str_at(r, 3));
        out->result = out->d.order_id ? out->d.status : ORDER_UNAVAILABLE;
        out->replayed = out->d.order_id != 0;
        return;
    }
    if (word && strcmp(word, VERDICT_REFUSED_AGAIN) == 0) {
        out->replayed = 1;
        out->result = verdict_of(str_at(r, 1));
        /* only refusals are remembered under a key */
        if (out->result != ORDER_SOLD_OUT && out->result != ORDER_LIMIT_EXCEEDED) {
            out->result = ORDER_UNAVAILABLE;
            out->replayed = 0;
        }
        return;
    }
    out->result = verdict_of(word);
    if (out->result == ORDER_RATE_LIMITED) {
        const redisReply *ms = r->elements > 1 ? r->element[1] : NULL;
        if (!ms || ms->type != REDIS_REPLY_INTEGER || ms->integer < 0)
            out->result = ORDER_UNAVAILABLE; /* refused before any write all the same */
        else
            out->retry_after_ms = (int64_t)ms->integer;
    }
    if (out->result == ORDER_SOLD_OUT) {
        const redisReply *n = r->elements > 1 ? r->element[1] : NULL;
        if (n && n->type == REDIS_REPLY_INTEGER && n->integer >= 0)
            out->remaining = (int64_t)n->integer;
    }
    if (out->result == ORDER_PENDING) {
        out->d.order_id = parse_id(str_at(r, 1));
        out->d.status = ORDER_PENDING;
        copy_entry(out->d.entry, str_at(r, 3));
        if (!out->d.order_id)
            out->result = ORDER_UNAVAILABLE;
    }
}

int order_decision_append(char *buf, size_t cap, size_t *len, const struct order_decision *d)
{
    int n = d->status == ORDER_REJECTED
                ? snprintf(buf + *len, cap - *len, "%s%lld@%s:r:%s", *len ? " " : "",
                           (long long)d->order_id, d->entry, d->reason)
                : snprintf(buf + *len, cap - *len, "%s%lld@%s:c", *len ? " " : "",
                           (long long)d->order_id, d->entry);
    if (n < 0 || (size_t)n >= cap - *len) {
        buf[*len] = '\0';
        return -1;
    }
    *len += (size_t)n;
    return 0;
}

int order_decision_next(const char **p, struct order_decision *d)
{
    const char *s = *p;
    while (*s == ' ')
        s++;
    if (!*s) {
        *p = s;
        return 0;
    }
    size_t tok = strcspn(s, " ");
    const char *stop = s + tok;
    *p = stop;
    memset(d, 0, sizeof *d);
    char *end;
    long long id = strtoll(s, &end, 10);
    if (id <= 0 || end >= stop || (*end != ':' && *end != '@'))
        return -1;
    d->order_id = id;
    if (*end == '@') { /* the reservation's stream entry */
        size_t n = strspn(end + 1, "0123456789-");
        if (n >= sizeof d->entry || end + 1 + n >= stop || end[1 + n] != ':')
            return -1;
        memcpy(d->entry, end + 1, n);
        d->entry[n] = '\0';
        end += 1 + n;
    }
    if (end + 2 == stop && end[1] == 'c') {
        d->status = ORDER_CONFIRMED;
        return 1;
    }
    if (end + 3 >= stop || end[1] != 'r' || end[2] != ':' ||
        (size_t)(stop - (end + 3)) >= sizeof d->reason)
        return -1;
    d->status = ORDER_REJECTED;
    memcpy(d->reason, end + 3, (size_t)(stop - (end + 3)));
    d->reason[stop - (end + 3)] = '\0';
    return 1;
}

enum order_result order_rejection_result(const char *reason)
{
    if (strcmp(reason, ORDER_REASON_NO_STOCK) == 0)
        return ORDER_SOLD_OUT;
    if (strcmp(reason, ORDER_REASON_LIMIT) == 0)
        return ORDER_LIMIT_EXCEEDED;
    return ORDER_REJECTED;
}

void order_reserve_begin(struct order_reserve_call *c, int64_t sku, int64_t idem_ttl_s,
                         int64_t auto_idem_ttl_s, int64_t deadline_ms)
{
    c->sku = sku;
    c->n = 0;
    keys_reserve(c->keys, sku);
    /* fmt_i64z, not snprintf: this runs for every call */
    fmt_i64z(c->ttl, idem_ttl_s);
    fmt_i64z(c->auto_ttl, auto_idem_ttl_s);
    fmt_i64z(c->deadline, deadline_ms);
    fmt_i64z(c->per_epoch, ORDER_IDS_PER_EPOCH);
    fmt_i64z(c->refusal_ttl, idem_ttl_s);
    c->idem_ttl_s = idem_ttl_s;
    order_reserve_limit(c, 0, 0);
}

void order_reserve_refusal_ttl(struct order_reserve_call *c, int64_t ttl_s)
{
    fmt_i64z(c->refusal_ttl, ttl_s < c->idem_ttl_s ? ttl_s : c->idem_ttl_s);
}

void order_reserve_add(struct order_reserve_call *c, int64_t user, int64_t qty, const char *idem,
                       int buyers_key, int64_t parent, int rated)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 1;
        c->orders = xrealloc(c->orders, (size_t)cap * sizeof *c->orders);
        c->cap = cap;
    }
    struct order_reserve_order *o = &c->orders[c->n++];
    snprintf(o->idem, sizeof o->idem, "%s", idem ? idem : "");
    keys_reserve_order(o->idem_key, o->rate_key, c->sku, user, o->idem);
    fmt_i64z(o->user, user);
    fmt_i64z(o->qty, qty);
    /* what "the same request" means for an Idempotency-Key: "<user>:<qty>" */
    size_t n = fmt_i64(o->fp, user);
    o->fp[n++] = ':';
    fmt_i64z(o->fp + n, qty);
    o->parent[0] = '\0';
    if (parent)
        fmt_i64z(o->parent, parent);
    /* a bucket's sold_out may end with a transfer: not remembered under the key */
    o->remember = !buyers_key ? "0" : parent ? "2" : "1";
    o->rated = rated ? "1" : "0";
}

void order_reserve_limit(struct order_reserve_call *c, int64_t per_min, int64_t burst)
{
    /* one order every 60 s / per_min, in the microseconds of Redis TIME */
    int64_t interval_us = per_min > 0 && burst > 0 ? INT64_C(60000000) / per_min : 0;
    fmt_i64z(c->rate_interval_us, interval_us);
    fmt_i64z(c->rate_burst, burst);
}

const char **order_reserve_argv(struct order_reserve_call *c)
{
    c->nkeys = KEYS_RESERVE_N + ORDER_RESERVE_KEYS_PER_ORDER * c->n;
    c->nargs = ORDER_RESERVE_ARGS_COMMON + ORDER_RESERVE_ARGS_PER_ORDER * c->n;
    if (c->nkeys + c->nargs > c->argv_cap) { /* grows to the largest batch, then stays */
        c->argv_cap = c->nkeys + c->nargs;
        c->argv = xrealloc(c->argv, (size_t)c->argv_cap * sizeof *c->argv);
    }
    fmt_i64z(c->count, c->n);
    size_t k = 0;
    for (size_t i = 0; i < KEYS_RESERVE_N; i++)
        c->argv[k++] = c->keys[i];
    for (int i = 0; i < c->n; i++) {
        c->argv[k++] = c->orders[i].idem_key;
        c->argv[k++] = c->orders[i].rate_key;
    }
    const char *common[ORDER_RESERVE_ARGS_COMMON] = {c->count,
                                                     c->ttl,
                                                     c->auto_ttl,
                                                     c->deadline,
                                                     c->per_epoch,
                                                     order_fields[ORDER_FIELD_ID],
                                                     order_fields[ORDER_FIELD_USER],
                                                     order_fields[ORDER_FIELD_QTY],
                                                     order_fields[ORDER_FIELD_IDEM],
                                                     c->rate_interval_us,
                                                     c->rate_burst,
                                                     c->refusal_ttl};
    for (size_t i = 0; i < ORDER_RESERVE_ARGS_COMMON; i++)
        c->argv[k++] = common[i];
    for (int i = 0; i < c->n; i++) {
        const struct order_reserve_order *o = &c->orders[i];
        const char *per[ORDER_RESERVE_ARGS_PER_ORDER] = {o->user,     o->qty,    o->idem, o->fp,
                                                         o->remember, o->parent, o->rated};
        for (size_t j = 0; j < ORDER_RESERVE_ARGS_PER_ORDER; j++)
            c->argv[k++] = per[j];
    }
    return c->argv;
}

void order_reserve_free(struct order_reserve_call *c)
{
    free(c->orders);
    free(c->argv);
    c->orders = NULL;
    c->argv = NULL;
    c->n = c->cap = c->argv_cap = 0;
}

const redisReply *order_reserve_reply_at(const redisReply *r, int n, int i)
{
    if (r && r->type == REDIS_REPLY_ERROR)
        return r;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n || i < 0 || i >= n)
        return NULL;
    return r->element[i];
}
