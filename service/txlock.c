#include "txlock.h"

#include "log.h"

static void release_on_complete(enum dbtx_outcome outcome, void *arg)
{
    struct txlock *t = arg;
    if (outcome == DBTX_UNKNOWN) {
        /* The transaction may still commit: keep excluding others until the
         * lease ends rather than let a second writer act on a guess. */
        log_warn("lock kept until its lease ends: transaction outcome unknown");
        rlock_clear(&t->lock);
        return;
    }
    redisContext *c = redis_conn_get(t->redis);
    enum rlock_status st = c ? rlock_release(c, &t->lock) : RLOCK_ERR;
    if (st != RLOCK_OK)
        /* The lease still bounds how long the key lives. */
        log_warn("lock release after %s: %s", dbtx_outcome_str(outcome), rlock_status_str(st));
    rlock_clear(&t->lock);
}

int txlock_bind(struct txlock *t, struct dbtx *tx)
{
    return dbtx_on_complete(tx, release_on_complete, t);
}

int txlock_still_valid(const struct txlock *t, int64_t margin_ms)
{
    return rlock_remaining_ms(&t->lock) > margin_ms;
}

struct rlock_opts txlock_opts(const struct cfg *c)
{
    struct rlock_opts o = {.ttl_ms = (int)c->lock_ttl_ms,
                           .wait_ms = (int)c->lock_wait_ms,
                           .retry_ms = (int)c->lock_retry_ms};
    return o;
}
