#include "order/order_lookup.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/keys.h"

/* Reads a decided order of 'buyer' from PostgreSQL: ORDER_FOUND with *out,
 * ORDER_NOT_FOUND when there is no row (yet) or it is another buyer's,
 * ORDER_UNAVAILABLE. */
static enum order_result order_row(struct worker_ctx *w, int64_t order_id, int64_t buyer,
                                   json_t **out)
{
    char oid[24];
    snprintf(oid, sizeof oid, "%" PRId64, order_id);
    PGresult *r = db_query(&w->db, "order_get", 1, (const char *[]){oid});
    if (!r)
        return ORDER_UNAVAILABLE;
    if (PQntuples(r) != 1 || atoll(PQgetvalue(r, 0, 2)) != buyer) {
        PQclear(r);
        return ORDER_NOT_FOUND;
    }
    json_t *o = json_object();
    json_object_set_new(o, "order_id", json_integer(order_id));
    json_object_set_new(o, "sku_id", json_integer(atoll(PQgetvalue(r, 0, 1))));
    json_object_set_new(o, "user_id", json_integer(atoll(PQgetvalue(r, 0, 2))));
    json_object_set_new(o, "qty", json_integer(atoll(PQgetvalue(r, 0, 3))));
    json_object_set_new(o, "status", json_string(PQgetvalue(r, 0, 4)));
    if (!PQgetisnull(r, 0, 5))
        json_object_set_new(o, "reason", json_string(PQgetvalue(r, 0, 5)));
    db_json_time(o, "reserved_at", r, 6);
    PQclear(r);
    *out = o;
    return ORDER_FOUND;
}

enum order_result order_lookup(struct worker_ctx *w, int64_t order_id, int64_t buyer, json_t **out)
{
    *out = NULL;
    /* Another buyer's order goes on like a missing one, through the same
     * reads, so neither the answer nor its time tells them apart. */
    enum order_result res = order_row(w, order_id, buyer, out);
    if (res != ORDER_NOT_FOUND)
        return res;
    /* Beyond the largest epoch the id was never issued (and would overflow the query). */
    if (order_id_epoch(order_id) > ORDER_EPOCH_MAX)
        return ORDER_NOT_FOUND;
    /* Not decided yet?  The epoch names the SKU load, the journal the state. */
    char epoch[24], oid[24];
    snprintf(epoch, sizeof epoch, "%" PRId64, order_id_epoch(order_id));
    snprintf(oid, sizeof oid, "%" PRId64, order_id);
    PGresult *r = db_query(&w->db, "epoch_sku", 1, (const char *[]){epoch});
    if (!r)
        return ORDER_UNAVAILABLE;
    long long sku;
    int found = db_get_i64(r, 0, 0, &sku) == 0;
    PQclear(r);
    if (!found)
        return ORDER_NOT_FOUND;
    char journal[KEYS_MAX];
    keys_sku(journal, sku, KEY_JOURNAL);
    const char *argv[] = {"HGET", journal, oid};
    redisReply *rr = redis_conn_cmd(&w->redis, 3, argv, NULL);
    if (!rr || rr->type == REDIS_REPLY_ERROR) {
        if (rr)
            freeReplyObject(rr);
        return ORDER_UNAVAILABLE;
    }
    struct order_decision d;
    const char *state = rr->type == REDIS_REPLY_STRING ? rr->str : NULL;
    order_parse_state(state, &d);
    int pending = d.status == ORDER_PENDING && order_pending_owner(state) == buyer;
    freeReplyObject(rr);
    if (pending) {
        *out = json_pack("{s:I, s:I, s:s}", "order_id", (json_int_t)order_id, "sku_id",
                         (json_int_t)sku, "status", "pending");
        return ORDER_FOUND;
    }
    /* The writer commits before it drops the journal entry, so a miss in both
     * reads can be a commit that landed between them: read the row again. */
    return order_row(w, order_id, buyer, out);
}
