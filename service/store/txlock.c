#include "store/txlock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/embedded.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include <rlock/fence.h>

static struct rlock_watchdog *watchdog;

void txlock_set_watchdog(struct rlock_watchdog *wd)
{
    watchdog = wd;
}

/* The lock options of the service's locks, from the config. */
static struct rlock_opts txlock_opts(const struct cfg *c)
{
    struct rlock_opts o = {.ttl_ms = (int)c->lock_ttl_ms,
                           .wait_ms = (int)c->lock_wait_ms,
                           .retry_ms = (int)c->lock_retry_ms};
    return o;
}

/* On the watchdog thread.  t stays valid while this can run: the watch is
 * stopped (rlock_watch_stop, which waits for a callback in flight) by the
 * release or clear of t->lock before the caller may let t go. */
static void on_lost(const char *key, void *arg)
{
    struct txlock *t = arg;
    atomic_store(&t->lost, 1);
    atomic_int *also = atomic_load(&t->lost_also);
    if (also)
        atomic_store(also, 1);
    log_warn("lock %s lost while held: its transaction is rolled back", key);
}

/* Fenced locks carry an explicit lease; the watchdog renews it while the
 * transaction runs and flags the lock the moment a renewal finds it gone.
 * The watch renews with the watchdog's lease; only a lease equal to the
 * lock's own keeps rlock_remaining_ms() truthful (main sets them equal). */
static void start_watch(struct txlock *t, const struct cfg *c)
{
    if (watchdog && rlock_watchdog_lease_ms(watchdog) == (int)c->lock_ttl_ms) {
        t->lock.watch =
            rlock_watch_tokens(watchdog, (const char *const *)t->lock.keys, t->lock.nkeys,
                               t->lock.token, t->lock.acquired_mono_ms, on_lost, t);
        if (!t->lock.watch)
            log_warn("lock on sku %" PRId64 ": watchdog unavailable; lease not renewed", t->sku);
    }
}

/* One try of txlock_acquire() on the node that serves the SKU. */
struct acquire_call {
    struct txlock *t;
    const struct cfg *c;
    const char *sku_lock, *fence_key;
    const char *const *keys;
    size_t n;
    int64_t deadline; /* of the wait, rlock_mono_ms() */
};

static enum rlock_status acquire_on(redisContext *node, void *arg, const char **why)
{
    struct acquire_call *a = arg;
    struct txlock *t = a->t;
    struct rlock_opts o = txlock_opts(a->c);
    int64_t left = a->deadline - rlock_mono_ms(); /* a redirected try waits what is left */
    o.wait_ms = left > 0 ? (int)left : 0;
    enum rlock_status st = a->n == 1 && strcmp(a->keys[0], a->sku_lock) == 0
                               ? rlock_acquire_fenced(node, &t->lock, a->sku_lock, &o, &t->fence)
                               : rlock_acquire_multi_fenced(node, &t->lock, a->keys, a->n,
                                                            a->fence_key, &o, &t->fence);
    /* Optionally, a lock counts only once replicas hold it too: a failover to
     * a replica that never saw it would hand it to a second owner.  On the
     * node that took it. */
    if (st == RLOCK_OK && a->c->lock_min_replicas > 0)
        st = rlock_require_replicas(node, &t->lock, (int)a->c->lock_min_replicas,
                                    (int)a->c->lock_replica_timeout_ms);
    *why = t->lock.err;
    return st;
}

/* When a wait for a busy lock gives up: after lock_wait_ms, or at rc's
 * deadline (the request's) if that comes first. */
static int64_t wait_deadline(const struct redis_conn *rc, const struct cfg *c)
{
    int64_t d = rlock_mono_ms() + (int64_t)c->lock_wait_ms, request = redis_conn_deadline(rc);
    return request > 0 && request < d ? request : d;
}

enum rlock_status txlock_acquire(struct txlock *t, struct redis_conn *rc, const struct cfg *c,
                                 int64_t sku, const char *const *keys, size_t n)
{
    memset(t, 0, sizeof *t);
    atomic_init(&t->lost, 0);
    atomic_init(&t->lost_also, NULL);
    t->redis = rc;
    t->sku = sku;
    char sku_lock[KEYS_MAX], fence_key[KEYS_MAX + 8];
    keys_sku(sku_lock, sku, KEY_SKU_LOCK);
    if (rlock_fence_key(fence_key, sizeof fence_key, sku_lock) != 0)
        return RLOCK_ERR;
    /* Every key shares the SKU's slot; on a cluster, its master, redirects
     * followed within the wait. */
    struct acquire_call a = {.t = t,
                             .c = c,
                             .sku_lock = sku_lock,
                             .fence_key = fence_key,
                             .keys = keys,
                             .n = n,
                             .deadline = wait_deadline(rc, c)};
    enum rlock_status st =
        redis_conn_lock(rc, sku_lock, a.deadline, acquire_on, &a, t->lock.err, sizeof t->lock.err);
    if (st != RLOCK_OK) {
        char why[sizeof t->lock.err];
        memcpy(why, t->lock.err, sizeof why);
        rlock_clear(&t->lock);
        memcpy(t->lock.err, why, sizeof why); /* the caller tells a full Redis from others */
        return st;
    }
    start_watch(t, c);
    return RLOCK_OK;
}

int txlock_try_each(struct txlock *const *t, struct redis_conn *rc, const struct cfg *c,
                    const int64_t *skus, const char *const *keys, size_t n, enum rlock_status *st)
{
    /* One round trip reaches one server: a cluster spreads the SKUs over
     * several, and a replica acknowledgement is a WAIT per lock. */
    if (rc->target.nseeds > 0 || c->lock_min_replicas > 0)
        return -1;
    struct rlock **locks = xcalloc(n ? n : 1, sizeof *locks);
    char(*fence_keys)[KEYS_MAX + 8] = xcalloc(n ? n : 1, sizeof *fence_keys);
    const char **fk = xcalloc(n ? n : 1, sizeof *fk);
    int64_t *fences = xcalloc(n ? n : 1, sizeof *fences);
    int taken = 0, ok = 1;
    for (size_t i = 0; i < n; i++) {
        memset(t[i], 0, sizeof *t[i]);
        atomic_init(&t[i]->lost, 0);
        atomic_init(&t[i]->lost_also, NULL);
        t[i]->redis = rc;
        t[i]->sku = skus[i];
        locks[i] = &t[i]->lock;
        char sku_lock[KEYS_MAX];
        keys_sku(sku_lock, skus[i], KEY_SKU_LOCK);
        ok = ok && rlock_fence_key(fence_keys[i], sizeof fence_keys[i], sku_lock) == 0;
        fk[i] = fence_keys[i];
        st[i] = RLOCK_ERR;
    }
    redisContext *ctx = ok ? redis_conn_get(rc) : NULL;
    if (ctx) {
        taken = rlock_try_fenced_each(ctx, locks, keys, fk, n, (int)c->lock_ttl_ms, fences, st);
        if (ctx->err)
            redis_conn_close(rc);
    }
    for (size_t i = 0; i < n; i++)
        if (st[i] == RLOCK_OK) {
            t[i]->fence = fences[i];
            start_watch(t[i], c);
        }
    free(fences);
    free(fk);
    free(fence_keys);
    free(locks);
    return taken < 0 ? 0 : taken;
}

void txlock_release(struct txlock *t)
{
    if (redis_conn_release(t->redis, &t->lock) != RLOCK_OK)
        log_debug("lock release: left to expire with its lease");
    rlock_clear(&t->lock);
}

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
    enum rlock_status st = redis_conn_release(t->redis, &t->lock);
    if (st != RLOCK_OK)
        /* The lease still bounds how long the key lives. */
        log_warn("lock release after %s: %s", dbtx_outcome_str(outcome), rlock_status_str(st));
    rlock_clear(&t->lock);
}

int txlock_bind(struct txlock *t, struct dbtx *tx)
{
    if (dbtx_on_complete(tx, release_on_complete, t) != 0)
        return -1;
    dbtx_set_abort_flag(tx, &t->lost);
    return 0;
}

/* The locks of one transaction, released together by its completion hook. */
struct lock_set {
    size_t n;
    struct txlock *t[];
};

static void release_all_on_complete(enum dbtx_outcome outcome, void *arg)
{
    struct lock_set *set = arg;
    if (outcome == DBTX_UNKNOWN) {
        /* The transaction may still commit: keep excluding others until the
         * leases end rather than let a second writer act on a guess. */
        log_warn("%zu locks kept until their leases end: transaction outcome unknown", set->n);
        for (size_t i = 0; i < set->n; i++)
            rlock_clear(&set->t[i]->lock);
        free(set);
        return;
    }
    struct redis_conn *rc = set->n ? set->t[0]->redis : NULL;
    redisContext *ctx = rc && rc->target.nseeds == 0 ? redis_conn_get(rc) : NULL;
    if (ctx) {
        struct rlock **locks = xmalloc(set->n * sizeof *locks);
        enum rlock_status *st = xmalloc(set->n * sizeof *st);
        for (size_t i = 0; i < set->n; i++)
            locks[i] = &set->t[i]->lock;
        size_t released = (size_t)rlock_release_each(ctx, locks, set->n, st);
        if (released < set->n) /* the leases still bound how long the keys live */
            log_warn("lock release after %s: %zu of %zu released", dbtx_outcome_str(outcome),
                     released, set->n);
        if (ctx->err)
            redis_conn_close(rc);
        free(st);
        free(locks);
    } else {
        for (size_t i = 0; i < set->n; i++)
            release_on_complete(outcome, set->t[i]);
    }
    for (size_t i = 0; i < set->n; i++)
        rlock_clear(&set->t[i]->lock);
    free(set);
}

int txlock_bind_all(struct txlock *const *t, size_t n, struct dbtx *tx, atomic_int *any_lost)
{
    struct lock_set *set = xmalloc(sizeof *set + n * sizeof set->t[0]);
    set->n = n;
    memcpy(set->t, t, n * sizeof *t);
    if (dbtx_on_complete(tx, release_all_on_complete, set) != 0) {
        free(set);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        atomic_store(&t[i]->lost_also, any_lost);
        if (atomic_load(&t[i]->lost)) /* lost before it was bound */
            atomic_store(any_lost, 1);
    }
    dbtx_set_abort_flag(tx, any_lost);
    return 0;
}

/* A newer fencing token for t's lock, on the node that serves the SKU. */
struct renew_call {
    struct txlock *t;
    const char *fence_key;
    int64_t seen, fresh;
};

static enum rlock_status renew_on(redisContext *node, void *arg, const char **why)
{
    struct renew_call *r = arg;
    enum rlock_status st = rlock_fence_renew(node, &r->t->lock, r->fence_key, r->seen, &r->fresh);
    *why = r->t->lock.err;
    return st;
}

/* Runs sku_fence.sql once.  Returns 1 (accepted, *stock set), 0 (no row), -1. */
static int fence_once(struct txlock *t, struct dbtx *tx, const char *sid, int64_t *stock)
{
    char tok[24];
    snprintf(tok, sizeof tok, "%" PRId64, t->fence);
    PGresult *r = dbtx_exec(tx, sql_text("sku_fence"), 2, (const char *[]){sid, tok});
    if (!r) {
        log_warn("sku %s: fenced row lock failed: %s", sid, dbtx_error(tx));
        return -1;
    }
    int got = PQntuples(r) == 1;
    if (got)
        *stock = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return got;
}

int txlock_fence(struct txlock *t, struct dbtx *tx, int64_t *stock)
{
    char sid[24], sku_lock[KEYS_MAX], fence_key[KEYS_MAX + 8];
    snprintf(sid, sizeof sid, "%" PRId64, t->sku);
    keys_sku(sku_lock, t->sku, KEY_SKU_LOCK);
    if (rlock_fence_key(fence_key, sizeof fence_key, sku_lock) != 0)
        return -1;
    /* Holders of different locks of one SKU (the SKU lock, batches of order
     * locks) draw from one counter but reach the row in any order: a refused
     * holder that still holds its lock draws a newer token and tries again in
     * the same transaction.  One whose lock is gone must not. */
    for (int attempt = 0; attempt < TXLOCK_RENEWALS; attempt++) {
        int got = fence_once(t, tx, sid, stock);
        if (got != 0)
            return got;
        PGresult *r = dbtx_exec(tx, sql_text("sku_fence_seen"), 1, (const char *[]){sid});
        if (!r)
            return -1;
        if (PQntuples(r) == 0) {
            PQclear(r);
            return 0; /* no such SKU */
        }
        int64_t seen = atoll(PQgetvalue(r, 0, 0));
        PQclear(r);
        log_debug("sku %s: fencing token %" PRId64 " refused, PostgreSQL has seen %" PRId64, sid,
                  t->fence, seen);
        if (!txlock_still_valid(t, 0))
            goto stale;
        struct renew_call rn = {.t = t, .fence_key = fence_key, .seen = seen};
        enum rlock_status st =
            redis_conn_lock(t->redis, sku_lock, 0, renew_on, &rn, t->lock.err, sizeof t->lock.err);
        if (st == RLOCK_NOT_OWNER) {
            log_warn("sku %s: lock lost while its token was refused", sid);
            goto stale;
        }
        if (st != RLOCK_OK)
            return -1;
        t->fence = rn.fresh;
    }
stale:
    log_warn("sku %s: fencing token %" PRId64 " refused: another holder wrote since", sid,
             t->fence);
    metrics_add(M_FENCE_REFUSED, 1);
    return TXLOCK_STALE;
}

void txlock_fence_stmt(const struct txlock *t, struct txlock_fence_args *a,
                       struct pgwait_stmt *stmt)
{
    snprintf(a->sid, sizeof a->sid, "%" PRId64, t->sku);
    snprintf(a->tok, sizeof a->tok, "%" PRId64, t->fence);
    a->params[0] = a->sid;
    a->params[1] = a->tok;
    *stmt = (struct pgwait_stmt){.sql = sql_text("sku_fence"), .nparams = 2, .params = a->params};
}

int txlock_fence_result(struct txlock *t, struct dbtx *tx, const PGresult *r, int64_t *stock)
{
    if (PQntuples(r) == 1) {
        *stock = atoll(PQgetvalue(r, 0, 0));
        return 1;
    }
    /* Refused (or no such SKU): the same token is refused again at once,
     * then the renewals decide. */
    return txlock_fence(t, tx, stock);
}

int txlock_still_valid(const struct txlock *t, int64_t margin_ms)
{
    return !rlock_lost(&t->lock) && rlock_remaining_ms(&t->lock) > margin_ms;
}

int txlock_redis_fence(const struct txlock *t, int64_t sku, char lock_key[KEYS_MAX],
                       char counter[KEYS_MAX + 8], char arg[TXLOCK_FENCE_ARG_MAX])
{
    char sku_lock[KEYS_MAX];
    keys_sku(sku_lock, sku, KEY_SKU_LOCK);
    if (rlock_fence_key(counter, KEYS_MAX + 8, sku_lock) != 0)
        return -1;
    arg[0] = '\0';
    if (!t || !t->lock.keys || t->lock.nkeys == 0 || t->fence <= 0) {
        snprintf(lock_key, KEYS_MAX, "%s", sku_lock);
        return 0;
    }
    int n = snprintf(lock_key, KEYS_MAX, "%s", t->lock.keys[0]);
    int m = snprintf(arg, TXLOCK_FENCE_ARG_MAX, "%" PRId64 ":%s", t->fence, t->lock.token);
    return n > 0 && n < KEYS_MAX && m > 0 && m < TXLOCK_FENCE_ARG_MAX ? 0 : -1;
}
