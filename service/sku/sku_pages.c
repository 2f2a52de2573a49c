#include "sku/sku_pages.h"

#include <stdlib.h>

#include "core/alloc.h"
#include "core/fmt.h"
#include "sku/sku.h"
#include "sku/sku_gauges.h"
#include "store/db.h"

/* The page's envelope: {"skus": items, "next_after": the last id when the
 * page is full (more may follow), else null}.  Takes items. */
static json_t *page(json_t *items, int64_t limit, int64_t last)
{
    int full = (int64_t)json_array_size(items) == limit;
    return json_pack("{s:o, s:o}", "skus", items, "next_after",
                     full ? json_integer(last) : json_null());
}

/* The rows of one page of query 'name' (sql/<name>.sql: $1 after, $2
 * limit), or NULL when PostgreSQL failed. */
static PGresult *page_rows(struct worker_ctx *w, const char *name, int64_t after, int64_t limit)
{
    char a[24], l[24];
    fmt_i64z(a, after);
    fmt_i64z(l, limit);
    return db_query(&w->db, name, 2, (const char *[]){a, l});
}

enum sku_result sku_list_page(struct worker_ctx *w, int64_t after, int64_t limit, json_t **out)
{
    *out = NULL;
    PGresult *r = page_rows(w, "skus_page", after, limit);
    if (!r)
        return SKU_UNAVAILABLE;
    json_t *items = json_array();
    int64_t last = 0;
    for (int row = 0; row < PQntuples(r); row++) {
        last = atoll(PQgetvalue(r, row, 0));
        json_t *o =
            json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:I}", "id", (json_int_t)last, "name",
                      PQgetvalue(r, row, 1), "db_stock", (json_int_t)atoll(PQgetvalue(r, row, 2)),
                      "initial_stock", (json_int_t)atoll(PQgetvalue(r, row, 3)), "per_user_limit",
                      (json_int_t)atoll(PQgetvalue(r, row, 4)), "payment_window_s",
                      (json_int_t)atoll(PQgetvalue(r, row, 7)), "buckets",
                      (json_int_t)atoll(PQgetvalue(r, row, 8)));
        db_json_time_at(o, "sale_starts_at", r, row, 5);
        db_json_time_at(o, "sale_ends_at", r, row, 6);
        if (!PQgetisnull(r, row, 9))
            json_object_set_new(o, "bucket_of", json_integer(atoll(PQgetvalue(r, row, 9))));
        json_array_append_new(items, o);
    }
    PQclear(r);
    *out = page(items, limit, last);
    return SKU_OK;
}

/* One SKU of the sale status, from its gauges (stream) and a peek (both
 * stocks, read PostgreSQL first, and what is still open). */
static json_t *sale_item(const char *name, const struct metrics_sku *g, const struct sku_check *c)
{
    json_t *o = json_pack("{s:I, s:s, s:I}", "id", (json_int_t)g->sku, "name", name, "db_stock",
                          (json_int_t)c->db_stock);
    if (g->parent)
        json_object_set_new(o, "bucket_of", json_integer(g->parent));
    /* an SKU Redis does not hold has no availability, and nothing sells */
    json_object_set_new(o, "available", c->loaded ? json_integer(c->redis_stock) : json_null());
    json_object_set_new(o, "in_flight_units",
                        c->loaded ? json_integer(c->db_stock - c->redis_stock) : json_null());
    json_object_set_new(o, "sold_out", json_boolean(c->loaded && c->redis_stock <= 0));
    json_object_set_new(o, "stream_length", json_integer(g->stream_length));
    json_object_set_new(o, "stream_lag", json_integer(g->stream_lag));
    json_object_set_new(o, "adjustments_open", json_integer(c->adjustments_open));
    json_object_set_new(o, "dead_letters", json_integer(c->dead_letters));
    json_object_set_new(o, "quiescent", json_boolean(c->quiescent));
    /* while anything is in flight the two stocks differ by design */
    json_object_set_new(o, "drift_units",
                        c->quiescent ? json_integer(c->drift_units) : json_null());
    return o;
}

enum sku_result sku_sale_page(struct worker_ctx *w, int64_t after, int64_t limit, json_t **out)
{
    *out = NULL;
    PGresult *r = page_rows(w, "skus_open_page", after, limit);
    if (!r)
        return SKU_UNAVAILABLE;
    size_t n = (size_t)PQntuples(r);
    struct metrics_sku *g = xcalloc(n + 1, sizeof *g);
    for (size_t i = 0; i < n; i++) {
        g[i].sku = atoll(PQgetvalue(r, (int)i, 0));
        g[i].stock_db = atoll(PQgetvalue(r, (int)i, 2));
        g[i].parent = atoll(PQgetvalue(r, (int)i, 3));
    }
    enum sku_result res = sku_gauges_fill(w, g, n) == 0 ? SKU_OK : SKU_UNAVAILABLE;
    json_t *items = json_array();
    for (size_t i = 0; res == SKU_OK && i < n; i++) {
        struct sku_check c;
        res = sku_peek(w, g[i].sku, &c);
        if (res == SKU_OK)
            json_array_append_new(items, sale_item(PQgetvalue(r, (int)i, 1), &g[i], &c));
    }
    int64_t last = n ? g[n - 1].sku : 0;
    PQclear(r);
    free(g);
    if (res != SKU_OK) {
        json_decref(items);
        return SKU_UNAVAILABLE; /* SKUs are never deleted: UNKNOWN is a store failing too */
    }
    *out = page(items, limit, last);
    return SKU_OK;
}
