#include "order/order.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const struct {
    const char *word;
    enum order_verdict v;
} verdicts[] = {
    {"ok", ORDER_RESERVED},
    {"dup", ORDER_REPLAYED},
    {"dup_refused", ORDER_REFUSED_AGAIN},
    {"idem_mismatch", ORDER_IDEM_MISMATCH},
    {"not_loaded", ORDER_NOT_LOADED},
    {"expired", ORDER_EXPIRED},
    {"sale_not_active", ORDER_NOT_ACTIVE},
    {"limit_exceeded", ORDER_LIMIT_EXCEEDED},
    {"sold_out", ORDER_SOLD_OUT},
    {"exhausted", ORDER_EXHAUSTED},
};

static enum order_verdict verdict_of(const char *word)
{
    for (size_t i = 0; word && i < sizeof verdicts / sizeof verdicts[0]; i++)
        if (strcmp(word, verdicts[i].word) == 0)
            return verdicts[i].v;
    return ORDER_FAILED;
}

void order_parse_state(const char *state, struct order_decision *d)
{
    d->reason[0] = '\0';
    if (state && strcmp(state, "pending") == 0) {
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
    const char *word = r && r->type == REDIS_REPLY_ARRAY ? str_at(r, 0) : NULL;
    out->verdict = verdict_of(word);
    switch (out->verdict) {
    case ORDER_RESERVED:
        out->d.order_id = parse_id(str_at(r, 1));
        out->d.status = ORDER_PENDING;
        copy_entry(out->d.entry, str_at(r, 3));
        break;
    case ORDER_REPLAYED:
        out->d.order_id = parse_id(str_at(r, 1));
        order_parse_state(str_at(r, 2), &out->d);
        copy_entry(out->d.entry, str_at(r, 3));
        break;
    case ORDER_REFUSED_AGAIN:
        out->again = verdict_of(str_at(r, 1));
        if (out->again != ORDER_SOLD_OUT && out->again != ORDER_LIMIT_EXCEEDED)
            out->verdict = ORDER_FAILED;
        break;
    default:
        break;
    }
    if ((out->verdict == ORDER_RESERVED || out->verdict == ORDER_REPLAYED) && !out->d.order_id)
        out->verdict = ORDER_FAILED;
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

const char *order_rejection_error(const char *reason)
{
    if (strcmp(reason, ORDER_REASON_NO_STOCK) == 0)
        return "sold_out";
    if (strcmp(reason, ORDER_REASON_LIMIT) == 0)
        return "limit_exceeded";
    return "order_rejected";
}

void order_reserve_prepare(struct order_reserve_call *c, int64_t sku, int64_t user, int64_t qty,
                           const char *idem, int buyers_key, int64_t idem_ttl_s,
                           int64_t deadline_ms)
{
    keys_reserve(c->keys, sku, user, idem ? idem : "");
    snprintf(c->user, sizeof c->user, "%" PRId64, user);
    snprintf(c->qty, sizeof c->qty, "%" PRId64, qty);
    /* what "the same request" means for an Idempotency-Key */
    snprintf(c->fp, sizeof c->fp, "%" PRId64 ":%" PRId64, user, qty);
    snprintf(c->ttl, sizeof c->ttl, "%" PRId64, idem_ttl_s);
    snprintf(c->deadline, sizeof c->deadline, "%" PRId64, deadline_ms);
    snprintf(c->per_epoch, sizeof c->per_epoch, "%" PRId64, KEYS_ORDERS_PER_EPOCH);
    size_t n = 0;
    for (size_t i = 0; i < KEYS_RESERVE_N; i++)
        c->argv[n++] = c->keys[i];
    const char *args[ORDER_RESERVE_NARGS] = {
        c->user, c->qty,      idem ? idem : "", c->fp,
        c->ttl,  c->deadline, c->per_epoch,     buyers_key ? "1" : "0"};
    for (size_t i = 0; i < ORDER_RESERVE_NARGS; i++)
        c->argv[n++] = args[i];
}
