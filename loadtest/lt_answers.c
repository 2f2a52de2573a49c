#include "lt_answers.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILE_MAGIC "# seckill-loadtest answers v2"
#define FILE_MAGIC_V1 "# seckill-loadtest answers v1" /* no promise per order: all 202 */
#define INITIAL_CAP 1024
#define MAX_LINE 256

void lt_answers_init(struct lt_answers *a, int64_t sku)
{
    memset(a, 0, sizeof *a);
    a->sku = sku;
}

void lt_answers_free(struct lt_answers *a)
{
    free(a->orders);
    a->orders = NULL;
    a->n = a->cap = 0;
    free(a->acts);
    a->acts = NULL;
    a->nacts = 0;
    free(a->unknown_users);
    a->unknown_users = NULL;
    a->n_unknown_users = a->cap_unknown_users = 0;
}

/* Makes room for one more of n elements of 'size' bytes in *p (capacity
 * *cap, doubled when full).  Returns 0, or -1 when out of memory. */
static int grow(void **p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : INITIAL_CAP;
    void *q = realloc(*p, c * size);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

int lt_answers_add(struct lt_answers *a, int64_t id, int64_t user, int64_t qty,
                   enum lt_promise promise, int64_t wall_us)
{
    void *p = a->orders;
    if (grow(&p, &a->cap, a->n, sizeof *a->orders) != 0)
        return -1;
    a->orders = p;
    a->orders[a->n++] = (struct lt_order){id, user, qty, promise, wall_us};
    return 0;
}

void lt_answers_unknown(struct lt_answers *a, int64_t user)
{
    a->unknown++;
    void *p = a->unknown_users;
    /* Without room the count still holds, and the split falls back to
     * giving the request to every bucket. */
    if (grow(&p, &a->cap_unknown_users, a->n_unknown_users, sizeof *a->unknown_users) != 0)
        return;
    a->unknown_users = p;
    a->unknown_users[a->n_unknown_users++] = user;
}

/* The bucket of 'user' among n: the service places a buyer's orders in
 * bucket user mod n. */
static int bucket_of(int64_t user, int n)
{
    return (int)(((user % n) + n) % n);
}

int lt_answers_split(const struct lt_answers *from, struct lt_answers *to, int n)
{
    for (size_t i = 0; i < from->n; i++) {
        const struct lt_order *o = &from->orders[i];
        if (lt_answers_add(&to[bucket_of(o->user, n)], o->id, o->user, o->qty, o->promise,
                           o->answered_wall_us) != 0)
            return -1;
    }
    int users_known = from->n_unknown_users == from->unknown;
    for (size_t i = 0; users_known && i < from->n_unknown_users; i++) {
        int64_t u = from->unknown_users[i];
        lt_answers_unknown(&to[bucket_of(u, n)], u);
    }
    for (int k = 0; k < n; k++) {
        if (!users_known)
            to[k].unknown += from->unknown; /* conservative: it may be in any bucket */
        to[k].admin_in_group = 1;
    }
    to[0].idem_mismatch += from->idem_mismatch;
    to[0].unexpected += from->unexpected;
    return 0;
}

static int cmp_order(const void *x, const void *y)
{
    const struct lt_order *a = x, *b = y;
    if (a->id != b->id)
        return a->id < b->id ? -1 : 1;
    if (a->user != b->user)
        return a->user < b->user ? -1 : 1;
    if (a->qty != b->qty)
        return a->qty < b->qty ? -1 : 1;
    return (int)a->promise - (int)b->promise;
}

size_t lt_answers_dedupe(struct lt_answers *a)
{
    if (a->n == 0)
        return 0;
    qsort(a->orders, a->n, sizeof *a->orders, cmp_order);
    size_t w = 1, conflicts = 0;
    for (size_t r = 1; r < a->n; r++) {
        struct lt_order *prev = &a->orders[w - 1], *cur = &a->orders[r];
        if (cur->id == prev->id && cur->user == prev->user && cur->qty == prev->qty) {
            /* A 202 says less than a 201 or a 409 about the same order. */
            if (prev->promise == LT_PROMISE_PENDING)
                prev->promise = cur->promise;
            if (cur->answered_wall_us &&
                (!prev->answered_wall_us || cur->answered_wall_us < prev->answered_wall_us))
                prev->answered_wall_us = cur->answered_wall_us;
            if (cur->promise == prev->promise || cur->promise == LT_PROMISE_PENDING)
                continue;
        }
        if (cur->id == prev->id)
            conflicts++;
        a->orders[w++] = *cur;
    }
    a->n = w;
    return conflicts;
}

int64_t lt_answers_units(const struct lt_answers *a)
{
    int64_t u = 0;
    for (size_t i = 0; i < a->n; i++)
        u += a->orders[i].qty;
    return u;
}

int lt_answers_save(const struct lt_answers *a, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, FILE_MAGIC "\n");
    fprintf(f, "sku %" PRId64 "\n", a->sku);
    fprintf(f, "baseline %d %" PRId64 " %" PRId64 " %" PRId64 "\n", a->base.known, a->base.stock,
            a->base.max_order_id, a->base.max_ledger_id);
    fprintf(f, "unknown %" PRIu64 "\n", a->unknown);
    fprintf(f, "idem_mismatch %" PRIu64 "\n", a->idem_mismatch);
    fprintf(f, "unexpected %" PRIu64 "\n", a->unexpected);
    fprintf(f, "admin %" PRId64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 "\n",
            a->admin_applied, a->admin_ok, a->admin_refused, a->admin_unknown,
            a->admin_unknown_abs);
    for (size_t i = 0; i < a->n; i++)
        fprintf(f, "o %" PRId64 " %" PRId64 " %" PRId64 " %c\n", a->orders[i].id, a->orders[i].user,
                a->orders[i].qty, (char)a->orders[i].promise);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, errlen, "cannot write %s", path);
        return -1;
    }
    return 0;
}

int lt_answers_load(struct lt_answers *a, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char line[MAX_LINE];
    int rc = -1;
    long lineno = 0;
    if (!fgets(line, sizeof line, f) ||
        (strncmp(line, FILE_MAGIC, strlen(FILE_MAGIC)) != 0 &&
         strncmp(line, FILE_MAGIC_V1, strlen(FILE_MAGIC_V1)) != 0)) {
        snprintf(err, errlen, "%s is not a seckill-loadtest answers file", path);
        goto out;
    }
    lineno = 1;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        int64_t x, y, z, v;
        uint64_t p, q, r;
        int k;
        char pr = LT_PROMISE_PENDING;
        int nf = sscanf(line, "o %" SCNd64 " %" SCNd64 " %" SCNd64 " %c", &x, &y, &z, &pr);
        if (nf == 4 && pr != LT_PROMISE_CONFIRMED && pr != LT_PROMISE_PENDING &&
            pr != LT_PROMISE_REJECTED) {
            snprintf(err, errlen, "%s:%ld: unknown promise '%c'", path, lineno, pr);
            goto out;
        }
        if (nf >= 3) {
            if (lt_answers_add(a, x, y, z, (enum lt_promise)pr, 0) != 0) {
                snprintf(err, errlen, "out of memory reading %s", path);
                goto out;
            }
        } else if (sscanf(line, "sku %" SCNd64, &x) == 1) {
            a->sku = x;
        } else if (sscanf(line, "baseline %d %" SCNd64 " %" SCNd64 " %" SCNd64, &k, &x, &y, &z) ==
                   4) {
            a->base = (struct lt_baseline){k, x, y, z};
        } else if (sscanf(line, "unknown %" SCNu64, &p) == 1) {
            a->unknown = p;
        } else if (sscanf(line, "idem_mismatch %" SCNu64, &p) == 1) {
            a->idem_mismatch = p;
        } else if (sscanf(line, "unexpected %" SCNu64, &p) == 1) {
            a->unexpected = p;
        } else if (sscanf(line, "admin %" SCNd64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNd64,
                          &x, &p, &q, &r, &v) == 5) {
            a->admin_applied = x;
            a->admin_ok = p;
            a->admin_refused = q;
            a->admin_unknown = r;
            a->admin_unknown_abs = v;
        } else {
            snprintf(err, errlen, "%s:%ld: cannot parse \"%.40s\"", path, lineno, line);
            goto out;
        }
    }
    if (ferror(f)) {
        snprintf(err, errlen, "cannot read %s", path);
        goto out;
    }
    rc = 0;
out:
    fclose(f);
    return rc;
}
