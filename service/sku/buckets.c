#include "sku/buckets.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/fmt.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "sku/sku_store.h"
#include "store/redis_conn.h"

/* Ids drawn per bucket while looking for one whose hash tag lands on the
 * master it should (a cluster's slots are spread evenly, so a few do). */
#define PLACE_DRAWS 16
/* Fresh sets of ids tried when a drawn id is taken by a SKU created with an
 * explicit id. */
#define CREATE_ATTEMPTS 4
/* Rounds of an admin delta on a parent whose split buyers overtook (a
 * bucket's Redis guard refused the part it was given). */
#define ADJUST_ROUNDS 3

int sku_buckets_of(struct worker_ctx *w, int64_t sku, int64_t *ids, int cap)
{
    char sid[24];
    fmt_i64z(sid, sku);
    PGresult *r = db_query(&w->db, "sku_buckets", 1, (const char *[]){sid});
    if (!r)
        return -1;
    int n = PQntuples(r);
    if (n > cap) {
        log_error("sku %" PRId64 ": %d buckets, more than %d", sku, n, cap);
        n = -1;
    }
    for (int i = 0; i < n; i++)
        ids[i] = atoll(PQgetvalue(r, i, 0));
    PQclear(r);
    return n;
}

/* ---- splitting units (pure) --------------------------------------------- */

/* idx[0..n) sorted by a[idx[i]], largest first (n is at most 64). */
static void order_desc(const int64_t *a, int n, int *idx)
{
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && a[idx[j - 1]] < a[i]; j--)
            idx[j] = idx[j - 1];
        idx[j] = i;
    }
}

int sku_level_take(const int64_t *a, int n, int64_t d, int64_t *take)
{
    int64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += a[i];
    if (n < 1 || n > SKU_MOVES_MAX || sum < d)
        return -1;
    memset(take, 0, (size_t)n * sizeof *take);
    if (d <= 0)
        return 0;
    int idx[SKU_MOVES_MAX];
    order_desc(a, n, idx);
    /* The fewest largest that, brought down to the next one's level (or
     * 0), give d: they end at one level L, a unit above it for the rest. */
    int j = 1;
    int64_t top = a[idx[0]];
    while (j < n && top - (int64_t)j * a[idx[j]] < d)
        top += a[idx[j++]];
    int64_t level = (top - d) / j;
    int64_t extra = top - (int64_t)j * level - d; /* below j */
    for (int i = 0; i < j; i++)
        take[idx[i]] = a[idx[i]] - level - (i < extra);
    return 0;
}

void sku_level_give(const int64_t *a, int n, int64_t d, int64_t *give)
{
    int64_t max = 0, gaps = 0, gap[SKU_MOVES_MAX];
    for (int i = 0; i < n; i++)
        max = a[i] > max ? a[i] : max;
    for (int i = 0; i < n; i++)
        gaps += gap[i] = max - a[i];
    if (d <= gaps) { /* the emptiest filled towards the fullest */
        (void)sku_level_take(gap, n, d, give);
        return;
    }
    int64_t rest = d - gaps; /* all level: the rest evenly */
    for (int i = 0; i < n; i++)
        give[i] = gap[i] + rest / n + (i < rest % n);
}

/* ---- create ------------------------------------------------------------- */

static int64_t next_sku_id(struct worker_ctx *w)
{
    PGresult *r = db_query(&w->db, "sku_next_id", 0, NULL);
    long long id;
    int ok = r && db_get_i64(r, 0, 0, &id) == 0;
    PQclear(r);
    return ok ? id : -1;
}

/* Draws the ids of n buckets: bucket k's hash tag on server k mod (the
 * servers that hold keys), as far as a bounded number of draws finds such
 * ids.  Returns 0 or -1. */
static int pick_ids(struct worker_ctx *w, int n, int64_t *ids)
{
    int servers = redis_conn_nservers(&w->redis);
    memset(ids, 0, (size_t)n * sizeof *ids);
    int filled = 0;
    for (int draw = 0; draw < n * PLACE_DRAWS && filled < n; draw++) {
        int64_t id = next_sku_id(w);
        if (id <= 0)
            return -1;
        char key[KEYS_MAX];
        keys_sku(key, id, KEY_STOCK);
        int at = servers > 1 ? redis_conn_server_of(&w->redis, key) : -1; /* -1: anywhere */
        for (int k = 0; k < n; k++)
            if (!ids[k] && (at < 0 || k % servers == at)) {
                ids[k] = id;
                filled++;
                break;
            }
    }
    for (int k = 0; k < n; k++)
        if (!ids[k] && (ids[k] = next_sku_id(w)) <= 0)
            return -1;
    return 0;
}

/* What create_once found when an insert took no row. */
enum taken { TAKEN_NONE, TAKEN_PARENT, TAKEN_BUCKET };

/* Inserts the parent and its buckets (lj[i], whose lock is t[i]) in tx.
 * Returns 0, or -1 with *taken set when an id was taken (else a failure). */
static int insert_rows(struct dbtx *tx, const struct validate_sku *spec, int64_t parent,
                       struct load_job *lj, const struct txlock *t, enum taken *taken)
{
    int n = (int)spec->buckets;
    char pid[24], limit[24], window[24], nb[24];
    fmt_i64z(pid, parent);
    fmt_i64z(limit, spec->per_user_limit);
    fmt_i64z(window, spec->payment_window_s);
    fmt_i64z(nb, n);
    const char *starts = spec->has_starts ? lj[0].starts_ms : NULL;
    const char *ends = spec->has_ends ? lj[0].ends_ms : NULL;
    const char *prow[] = {pid, spec->name, "0", limit, starts, ends, "0", window, nb, NULL, NULL};
    PGresult *r = tx_query(tx, "sku_insert", 11, prow);
    int rows = r ? PQntuples(r) : -1;
    PQclear(r);
    if (rows <= 0) {
        *taken = rows == 0 ? TAKEN_PARENT : TAKEN_NONE;
        return -1;
    }
    for (int i = 0; i < n; i++) {
        struct load_job *b = &lj[i];
        char sid[24], stock[24], fence[24];
        fmt_i64z(sid, b->id);
        fmt_i64z(stock, b->stock);
        fmt_i64z(fence, t[i].fence);
        const char *row[] = {sid,   spec->name, stock, limit, starts,   ends,
                             fence, window,     "1",   pid,   b->bucket};
        r = tx_query(tx, "sku_insert", 11, row);
        rows = r ? PQntuples(r) : -1;
        PQclear(r);
        if (rows <= 0) {
            *taken = rows == 0 ? TAKEN_BUCKET : TAKEN_NONE;
            return -1;
        }
        const char *led[] = {sid, "initial", stock, stock, NULL, NULL, NULL};
        r = tx_query(tx, "ledger_insert", 7, led);
        PQclear(r);
        if (!r || draw_epoch(tx, b) != 0)
            return -1;
    }
    return 0;
}

/* One attempt at creating parent with spec->buckets buckets, in one
 * transaction under every bucket's lock; each bucket is loaded into Redis
 * by its completion hook. */
static int cmp_load_id(const void *a, const void *b)
{
    const struct load_job *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static enum sku_result create_once(struct worker_ctx *w, const struct validate_sku *spec,
                                   int64_t parent, enum taken *taken, json_t **out)
{
    int n = (int)spec->buckets;
    int64_t ids[SKU_MOVES_MAX], lock_ids[SKU_MOVES_MAX];
    void *args[SKU_MOVES_MAX];
    *taken = TAKEN_NONE;
    if (pick_ids(w, n, ids) != 0)
        return SKU_UNAVAILABLE;
    struct load_job *lj = xcalloc((size_t)n, sizeof *lj);
    struct txlock *t = xcalloc((size_t)n, sizeof *t);
    for (int k = 0; k < n; k++) {
        struct load_job *b = &lj[k];
        *b = (struct load_job){.w = w,
                               .wanted = 1,
                               .mode = "new",
                               .id = ids[k],
                               .stock = spec->stock / n + (k < spec->stock % n),
                               .limit = spec->per_user_limit};
        if (spec->has_starts)
            fmt_i64z(b->starts_ms, spec->starts_ms);
        if (spec->has_ends)
            fmt_i64z(b->ends_ms, spec->ends_ms);
        fmt_i64z(b->parent, parent);
        fmt_i64z(b->bucket, k);
        fmt_i64z(b->buckets, n);
        (void)redis_run_id(w, ids[k], b->run, sizeof b->run); /* "" only costs a rebuild */
    }
    /* locks in id order, as every taker of several; each job names its bucket */
    qsort(lj, (size_t)n, sizeof *lj, cmp_load_id);
    for (int i = 0; i < n; i++) {
        lock_ids[i] = lj[i].id;
        args[i] = &lj[i];
        lj[i].lock = &t[i]; /* the lock of its own id (sku_tx_begin_many takes them in order) */
    }
    enum sku_result res = SKU_UNAVAILABLE;
    struct dbtx *tx = sku_tx_begin_many(w, t, lock_ids, n, load_on_commit, args);
    if (tx && insert_rows(tx, spec, parent, lj, t, taken) != 0) {
        (void)dbtx_rollback(tx);
        res = *taken == TAKEN_NONE ? SKU_UNAVAILABLE : SKU_EXISTS;
    } else if (tx) {
        res = sku_tx_commit_many(w, tx, t, n);
    }
    for (int i = 0; res == SKU_OK && i < n; i++)
        if (lj[i].res != SKU_OK)
            res = SKU_NOT_LOADED; /* in the database; the reconciler loads it */
    if (res == SKU_OK) {
        *out = sku_created_json(spec, parent);
        json_t *list = json_array();
        for (int k = 0; k < n; k++)
            json_array_append_new(list, json_integer(ids[k]));
        json_object_set_new(*out, "buckets", json_integer(n));
        json_object_set_new(*out, "bucket_skus", list);
        log_info("sku %" PRId64 ": created with %d buckets", parent, n);
    }
    free(lj);
    free(t);
    return res;
}

enum sku_result sku_create_buckets(struct worker_ctx *w, const struct validate_sku *spec,
                                   json_t **out)
{
    enum sku_result res = SKU_EXISTS;
    enum taken taken = TAKEN_BUCKET;
    for (int i = 0; i < CREATE_ATTEMPTS && res == SKU_EXISTS; i++) {
        int64_t parent = spec->has_id ? spec->id : next_sku_id(w);
        if (parent <= 0)
            return SKU_UNAVAILABLE;
        res = create_once(w, spec, parent, &taken, out);
        if (res == SKU_EXISTS && taken == TAKEN_PARENT && spec->has_id)
            break; /* the id asked for is taken: that is the answer */
    }
    return res;
}

/* ---- moving units -------------------------------------------------------- */

/* What Redis holds in each of the n buckets into avail; a bucket whose
 * master does not answer, or that Redis does not hold (being restored),
 * counts 0.  Returns how many of those there are. */
static int read_available(struct worker_ctx *w, const int64_t *ids, int n, int64_t *avail)
{
    int unknown = 0;
    for (int i = 0; i < n; i++) {
        long long a = -1;
        if (redis_sku_state(w, ids[i], &a, NULL) != 0 || a < 0)
            unknown++;
        avail[i] = a > 0 ? a : 0;
    }
    return unknown;
}

enum sku_result sku_bucket_refill(struct worker_ctx *w, int64_t parent, const int64_t *ids, int n,
                                  int home, int64_t qty, int64_t *left)
{
    int64_t avail[SKU_MOVES_MAX], donors[SKU_MOVES_MAX], take[SKU_MOVES_MAX];
    *left = 0;
    if (n < 2 || n > SKU_MOVES_MAX || home < 0 || home >= n)
        return SKU_UNAVAILABLE;
    /* A bucket that cannot be read (its master is failing over, or it is
     * being restored) gives nothing now, and forbids "sold out". */
    int unknown = read_available(w, ids, n, avail);
    int64_t others = 0;
    for (int i = 0; i < n; i++)
        others += i == home ? 0 : avail[i];
    *left = others + avail[home];
    if (avail[home] >= qty)
        return SKU_OK; /* another request refilled it meanwhile */
    if (*left < qty)
        return unknown ? SKU_UNAVAILABLE : SKU_INSUFFICIENT;
    /* What the order lacks, or more: towards an even share of what is left,
     * so that the next orders here do not each need a move of their own. */
    int64_t need = qty - avail[home], even = *left / n - avail[home];
    need = even > need ? even : need;
    need = need < others ? need : others;
    for (int i = 0, j = 0; i < n; i++)
        if (i != home)
            donors[j++] = avail[i];
    if (sku_level_take(donors, n - 1, need, take) != 0)
        return SKU_UNAVAILABLE;
    struct sku_move m[SKU_MOVES_MAX];
    int nm = 0;
    m[nm++] = (struct sku_move){.sku = ids[home], .delta = need};
    for (int i = 0, j = 0; i < n; i++)
        if (i != home && take[j++] > 0)
            m[nm++] = (struct sku_move){.sku = ids[i], .delta = -take[j - 1]};
    struct sku_adjust_req rq = {
        .delta = 0, .reason = "bucket transfer", .short_sku = ids[home], .short_of = qty};
    struct sku_replay rp;
    int refused;
    enum sku_result res = sku_adjust_moves(w, m, nm, &rq, &rp, &refused);
    if (res == SKU_INSUFFICIENT)
        return SKU_OK; /* buyers took from a donor meanwhile: read again, ask again */
    if (res != SKU_OK) {
        log_warn("sku %" PRId64 ": moving %" PRId64 " units into bucket %" PRId64 ": %s", parent,
                 need, ids[home], res == SKU_NOT_LOADED ? "a bucket is not loaded" : "failed");
        return SKU_UNAVAILABLE;
    }
    if (rp.skipped)
        return SKU_OK; /* filled by another move meanwhile: ask again */
    metrics_add(M_BUCKET_TRANSFERS, 1);
    metrics_add(M_BUCKET_UNITS_MOVED, (uint64_t)need);
    return SKU_OK;
}

/* The stock of the parent's buckets in PostgreSQL, or -1. */
static int64_t parent_stock(struct worker_ctx *w, int64_t parent)
{
    char pid[24];
    fmt_i64z(pid, parent);
    PGresult *r = db_query(&w->db, "sku_parent_stock", 1, (const char *[]){pid});
    long long v;
    int ok = r && db_get_i64(r, 0, 0, &v) == 0;
    PQclear(r);
    return ok ? v : -1;
}

static int64_t sum(const int64_t *a, int n)
{
    int64_t s = 0;
    for (int i = 0; i < n; i++)
        s += a[i];
    return s;
}

enum sku_result sku_adjust_parent(struct worker_ctx *w, int64_t parent, const int64_t *buckets,
                                  int n, int64_t delta, const char *reason, const char *idem,
                                  json_t **out)
{
    *out = NULL;
    int64_t avail[SKU_MOVES_MAX], part[SKU_MOVES_MAX];
    struct sku_move m[SKU_MOVES_MAX];
    struct sku_replay rp = {0};
    int refused;
    enum sku_result res = SKU_INSUFFICIENT;
    struct sku_adjust_req rq = {
        .delta = delta, .reason = reason, .idem = idem, .idem_scope = parent, .idem_parent = 1};
    for (int round = 0; round < ADJUST_ROUNDS && res == SKU_INSUFFICIENT; round++) {
        if (read_available(w, buckets, n, avail) != 0)
            return SKU_UNAVAILABLE; /* the split needs every bucket */
        /* Given to the emptiest buckets, taken from the fullest. */
        if (delta > 0)
            sku_level_give(avail, n, delta, part);
        else if (sku_level_take(avail, n, -delta, part) == 0)
            for (int i = 0; i < n; i++)
                part[i] = -part[i];
        else if (!idem)
            break; /* not there: refused below (a key may have applied it already) */
        else
            memset(part, 0, (size_t)n * sizeof *part);
        /* every bucket, a part of 0 too: the key is looked up under all their locks */
        for (int i = 0; i < n; i++)
            m[i] = (struct sku_move){.sku = buckets[i], .delta = part[i]};
        res = sku_adjust_moves(w, m, n, &rq, &rp, &refused);
        if (res == SKU_OK && !rp.found && sum(part, n) != delta) {
            res = SKU_INSUFFICIENT; /* the key was new, and the buckets cannot give it */
            break;
        }
    }
    if (res != SKU_OK && res != SKU_INSUFFICIENT)
        return res;
    /* What the buckets hold now: the database's under the locks just held
     * when this delta was applied, else read again. */
    int64_t stock = 0;
    for (int i = 0; res == SKU_OK && !rp.found && i < n; i++)
        stock += m[i].stock;
    if ((res != SKU_OK || rp.found) && (stock = parent_stock(w, parent)) < 0)
        return SKU_UNAVAILABLE;
    int unread = read_available(w, buckets, n, avail);
    if (res == SKU_INSUFFICIENT) {
        *out = json_pack("{s:I, s:I}", "stock", (json_int_t)stock, "available",
                         (json_int_t)sum(avail, n));
        return res;
    }
    if (!rp.found)
        metrics_add(M_STOCK_ADJUSTMENTS, 1);
    *out = json_pack("{s:I, s:I, s:I, s:o}", "sku_id", (json_int_t)parent, "delta",
                     (json_int_t)delta, "stock", (json_int_t)(rp.found ? rp.stock : stock),
                     "available", unread ? json_null() : json_integer(sum(avail, n)));
    if (rp.found)
        json_object_set_new(*out, "replayed", json_true());
    return SKU_OK;
}

/* ---- view ---------------------------------------------------------------- */

/* The fields of a SKU's view that a parent shows as its buckets' sum. */
static const char *const summed[] = {
    "available",       "initial_stock",  "db_stock",         "redis_available",
    "in_flight_units", "pending_orders", "confirmed_units",  "confirmed_orders",
    "rejected_orders", "paid_orders",    "cancelled_orders", "expired_orders",
};

enum sku_result sku_view_parent(struct worker_ctx *w, const int64_t *buckets, int n, int admin,
                                json_t **out)
{
    enum sku_result res = SKU_OK;
    int64_t total[sizeof summed / sizeof summed[0]] = {0};
    int unknown[sizeof summed / sizeof summed[0]] = {0};
    json_t *list = json_array();
    for (int i = 0; i < n && res == SKU_OK; i++) {
        json_t *b = NULL;
        res = sku_view_row(w, buckets[i], admin, &b);
        for (size_t f = 0; b && f < sizeof summed / sizeof summed[0]; f++) {
            json_t *v = json_object_get(b, summed[f]);
            total[f] += json_is_integer(v) ? json_integer_value(v) : 0;
            unknown[f] |= json_is_null(v); /* an unloaded bucket: the sum is unknown too */
        }
        if (b)
            json_array_append_new(list, json_pack("{s:I, s:O}", "id", (json_int_t)buckets[i],
                                                  "available", json_object_get(b, "available")));
        json_decref(b);
    }
    if (res != SKU_OK) {
        json_decref(list);
        json_decref(*out);
        *out = NULL;
        return res;
    }
    for (size_t f = 0; f < sizeof summed / sizeof summed[0]; f++)
        if (json_object_get(*out, summed[f]))
            json_object_set_new(*out, summed[f], unknown[f] ? json_null() : json_integer(total[f]));
    json_object_set_new(*out, "bucket_skus", list);
    return SKU_OK;
}
