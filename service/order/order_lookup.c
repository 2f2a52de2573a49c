#include "order/order_lookup.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/keys.h"
#include "core/timefmt.h"
#include "order/order_pending.h"

json_t *order_row_json(const PGresult *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "order_id", json_integer(atoll(PQgetvalue(r, 0, 0))));
    json_object_set_new(o, "sku_id", json_integer(atoll(PQgetvalue(r, 0, 1))));
    json_object_set_new(o, "user_id", json_integer(atoll(PQgetvalue(r, 0, 2))));
    json_object_set_new(o, "qty", json_integer(atoll(PQgetvalue(r, 0, 3))));
    json_object_set_new(o, "status", json_string(PQgetvalue(r, 0, 4)));
    if (!PQgetisnull(r, 0, 5))
        json_object_set_new(o, "reason", json_string(PQgetvalue(r, 0, 5)));
    db_json_time(o, "reserved_at", r, 6);
    /* the times of the life after the writer, those that are set */
    static const char *const times[] = {"expires_at", "paid_at", "cancelled_at", "expired_at"};
    for (int i = 0; i < 4; i++)
        if (!PQgetisnull(r, 0, 7 + i))
            db_json_time(o, times[i], r, 7 + i);
    return o;
}

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
    *out = order_row_json(r);
    PQclear(r);
    return ORDER_FOUND;
}

enum order_result order_pending_where(struct worker_ctx *w, int64_t order_id, int64_t *sku,
                                      int64_t *buyer, char *entry)
{
    /* Beyond the largest epoch the id was never issued (and would overflow the query). */
    if (order_id <= 0 || order_id_epoch(order_id) > ORDER_EPOCH_MAX)
        return ORDER_NOT_FOUND;
    /* The epoch names the SKU load, the journal the state. */
    char epoch[24];
    snprintf(epoch, sizeof epoch, "%" PRId64, order_id_epoch(order_id));
    PGresult *r = db_query(&w->db, "epoch_sku", 1, (const char *[]){epoch});
    if (!r)
        return ORDER_UNAVAILABLE;
    long long s;
    int found = db_get_i64(r, 0, 0, &s) == 0;
    PQclear(r);
    if (!found)
        return ORDER_NOT_FOUND;
    enum order_result res = order_pending_owner_of(w, s, order_id, buyer, entry);
    if (res == ORDER_PENDING)
        *sku = s;
    return res;
}

enum order_result order_pending_owner_of(struct worker_ctx *w, int64_t sku, int64_t order_id,
                                         int64_t *buyer, char *entry)
{
    char oid[24];
    snprintf(oid, sizeof oid, "%" PRId64, order_id);
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
    int64_t owner = d.status == ORDER_PENDING ? order_pending_owner(state) : 0;
    char e[ORDER_ENTRY_MAX] = "";
    if (owner && order_pending_entry(state, e, sizeof e) != 0)
        owner = 0;
    freeReplyObject(rr);
    if (owner == 0)
        return ORDER_NOT_FOUND;
    if (entry)
        memcpy(entry, e, sizeof e);
    *buyer = owner;
    return ORDER_PENDING;
}

int64_t order_cancel_requested(struct worker_ctx *w, int64_t order_id, int64_t buyer,
                               const char *entry)
{
    char oid[24], uid[24];
    snprintf(oid, sizeof oid, "%" PRId64, order_id);
    snprintf(uid, sizeof uid, "%" PRId64, buyer);
    PGresult *r =
        db_query(&w->db, "order_cancel_request_get", 3, (const char *[]){oid, uid, entry});
    if (!r)
        return -1;
    long long ms = 0;
    if (db_get_i64(r, 0, 2, &ms) != 0)
        ms = 0;
    PQclear(r);
    return ms;
}

enum order_result order_lookup(struct worker_ctx *w, int64_t order_id, int64_t buyer, json_t **out)
{
    *out = NULL;
    /* Another buyer's order goes on like a missing one, through the same
     * reads, so neither the answer nor its time tells them apart. */
    enum order_result res = order_row(w, order_id, buyer, out);
    if (res != ORDER_NOT_FOUND)
        return res;
    int64_t sku = 0, owner = 0;
    char entry[ORDER_ENTRY_MAX];
    res = order_pending_where(w, order_id, &sku, &owner, entry);
    if (res == ORDER_UNAVAILABLE)
        return res;
    if (res == ORDER_PENDING && owner == buyer) {
        int64_t cancelled_ms = order_cancel_requested(w, order_id, buyer, entry);
        if (cancelled_ms < 0)
            return ORDER_UNAVAILABLE;
        json_t *o = json_pack("{s:I, s:I, s:I, s:s}", "order_id", (json_int_t)order_id, "sku_id",
                              (json_int_t)sku, "user_id", (json_int_t)buyer, "status",
                              cancelled_ms ? "cancelled" : "pending");
        if (cancelled_ms) {
            char t[40];
            timefmt_rfc3339(cancelled_ms, t, sizeof t);
            json_object_set_new(o, "cancelled_at", json_string(t));
        }
        *out = o;
        return ORDER_FOUND;
    }
    /* The writer commits before it drops the journal entry, so a miss in both
     * reads can be a commit that landed between them: read the row again. */
    res = order_row(w, order_id, buyer, out);
    if (res != ORDER_NOT_FOUND)
        return res;
    /* Answered 202 pending, and Redis lost the reservation since: the record
     * the answer was given on says pending until the reconciler settles it. */
    return order_pending_lookup(w, order_id, buyer, out);
}

enum order_result order_buyer_of(struct worker_ctx *w, int64_t order_id, int64_t *buyer)
{
    char oid[24];
    snprintf(oid, sizeof oid, "%" PRId64, order_id);
    PGresult *r = db_query(&w->db, "order_sku", 1, (const char *[]){oid});
    if (!r)
        return ORDER_UNAVAILABLE;
    long long user;
    int found = db_get_i64(r, 0, 1, &user) == 0;
    PQclear(r);
    if (found) {
        *buyer = user;
        return ORDER_FOUND;
    }
    int64_t sku = 0;
    enum order_result res = order_pending_where(w, order_id, &sku, buyer, NULL);
    if (res != ORDER_NOT_FOUND)
        return res == ORDER_PENDING ? ORDER_FOUND : res;
    /* the writer commits before it drops the journal entry: a row that
     * landed between the two reads is found again here */
    r = db_query(&w->db, "order_sku", 1, (const char *[]){oid});
    if (!r)
        return ORDER_UNAVAILABLE;
    found = db_get_i64(r, 0, 1, &user) == 0;
    PQclear(r);
    if (!found) {
        /* a 202 recorded in PostgreSQL whose reservation Redis lost since */
        r = db_query(&w->db, "order_pending_buyer", 1, (const char *[]){oid});
        if (!r)
            return ORDER_UNAVAILABLE;
        found = db_get_i64(r, 0, 0, &user) == 0;
        PQclear(r);
    }
    if (!found)
        return ORDER_NOT_FOUND;
    *buyer = user;
    return ORDER_FOUND;
}
