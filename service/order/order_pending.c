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
    if (!p->idem)
        return 0;
    char journal[KEYS_MAX], stream[KEYS_MAX], key[KEYS_MAX], ttl[24];
    keys_sku(journal, p->sku, KEY_JOURNAL);
    keys_sku(stream, p->sku, KEY_STREAM);
    keys_idem(key, p->sku, p->user, p->idem);
    fmt_i64z(ttl, w->cfg->idempotency_ttl_s);
    const char *argv[] = {journal, stream, key, oid, p->entry, user, qty, ttl};
    redisReply *rr = redis_conn_script(&w->redis, &script_order_pending_restore, 3, 5, argv, NULL);
    if (!rr || rr->type != REDIS_REPLY_STRING)
        log_warn("order %" PRId64 ": recorded pending; its Idempotency-Key could not be checked "
                 "in Redis (%s)",
                 p->order_id, rr && rr->type == REDIS_REPLY_ERROR ? rr->str : "no answer");
    else if (strcmp(rr->str, "restored") == 0)
        log_warn("order %" PRId64 ": Redis lost its reservation before the commit; recorded "
                 "pending, its Idempotency-Key written back",
                 p->order_id);
    if (rr)
        freeReplyObject(rr);
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
