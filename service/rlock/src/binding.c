/*
 * binding: releasing a lock when a database transaction completes
 * (rlock_release_on_complete() in rlock/rlock.h).
 *
 * The one module that knows both lock kinds, so that neither lock needs the
 * other: it sits above the simple lock and the reentrant (or fair) lock.
 */
#include "internal.h"
#include "rlock/reentrant.h"
#include "rlock/rlock.h"

void rlock_release_on_complete(int outcome, void *binding)
{
    struct rlock_binding *b = binding;
    redisContext *c = b->conn ? b->conn(b->conn_arg) : NULL;
    b->outcome = outcome;
    /* Commit or rollback alike: after-commit-only would leak the lock on
     * every rollback (seed 001's correction). */
    if (b->kind == RLOCK_KIND_REENTRANT) {
        struct rlock_reentrant *l = b->lock;
        b->status = c ? rlock_reentrant_release(c, l) : RLOCK_ERR;
        if (l->holds > 0 && b->status != RLOCK_OK)
            rlock_reentrant_clear(l);
    } else {
        struct rlock *l = b->lock;
        b->status = c ? rlock_release(c, l) : RLOCK_ERR;
        rlock_empty(l); /* keeps l->err, which says why a release failed */
    }
}
