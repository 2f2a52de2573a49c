#include "order/order_pending.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/embedded.h"
#include "core/fmt.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/timefmt.h"
#include "store/db.h"

int order_pending_record(struct worker_ctx *w, const struct order_pending_rec *p)
{
    /* an entry id is what tells this reservation from another that Redis
     * gave the same order id: without it nothing can be promised */
    if (p->order_id <= 0 || atoll(p->entry) <= 0 || !strchr(p->entry, '-'))
        return -1;
    char oid[24], sku[24], user[24], qty[24], epoch[24], ms[24];
    fmt_i64z(oid, p->order_id);
    fmt_i64z(sku, p->sku);
    fmt_i64z(user, p->user);
    fmt_i64z(qty, p->qty);
    fmt_i64z(epoch, order_id_epoch(p->order_id));
    fmt_i64z(ms,
             atoll(p->entry)); /* "<ms>-<seq>": the reservation's time, as the writer reads it */
    const char *params[] = {oid, p->entry, sku, user, qty, epoch, p->idem, ms};
    PGresult *r = db_query(&w->db, "order_pending_record", 8, params);
    if (!r)
        return -1;
    PQclear(r);
    /* Nothing is written back to Redis here: a Redis that lost the
     * reservation but still sells under its epoch (a promoted replica) may
     * issue this order id again, and a key restored now would name that
     * other reservation's state.  A rebuild, which draws a new epoch, writes
     * the key back (sku_load.lua, from pending_restore_plan); until then a retry with the key
     * reserves anew, and the settler rejects this record as superseded. */
    return 0;
}

enum order_result order_pending_lookup(struct worker_ctx *w, int64_t order_id, int64_t buyer,
                                       json_t **out)
{
    char oid[24], uid[24];
    fmt_i64z(oid, order_id);
    fmt_i64z(uid, buyer);
    PGresult *r = db_query(&w->db, "order_pending_find", 2, (const char *[]){oid, uid});
    if (!r)
        return ORDER_UNAVAILABLE;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return ORDER_NOT_FOUND;
    }
    int conflict = !PQgetisnull(r, 0, 3) && strcmp(PQgetvalue(r, 0, 3), "id_conflict") == 0;
    json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:s}", "order_id", (json_int_t)order_id, "sku_id",
                          (json_int_t)atoll(PQgetvalue(r, 0, 0)), "user_id", (json_int_t)buyer,
                          "qty", (json_int_t)atoll(PQgetvalue(r, 0, 1)), "status",
                          conflict ? "rejected" : "pending");
    if (conflict)
        json_object_set_new(o, "reason", json_string(ORDER_REASON_ID_CONFLICT));
    db_json_time(o, "reserved_at", r, 2);
    PQclear(r);
    *out = o;
    return ORDER_FOUND;
}

int order_pending_of(struct worker_ctx *w, struct dbtx *tx, int64_t order_id, int64_t buyer,
                     int64_t *sku, char entry[ORDER_ENTRY_MAX], int *conflict)
{
    char oid[24], uid[24];
    fmt_i64z(oid, order_id);
    fmt_i64z(uid, buyer);
    const char *params[] = {oid, uid};
    PGresult *r = tx ? dbtx_exec(tx, sql_text("order_pending_find"), 2, params)
                     : db_query(&w->db, "order_pending_find", 2, params);
    if (!r)
        return -1;
    int found = PQntuples(r) == 1;
    if (found) {
        *sku = atoll(PQgetvalue(r, 0, 0));
        *conflict = !PQgetisnull(r, 0, 3) && strcmp(PQgetvalue(r, 0, 3), "id_conflict") == 0;
        snprintf(entry, ORDER_ENTRY_MAX, "%s", PQgetvalue(r, 0, 4));
    }
    PQclear(r);
    return found;
}
