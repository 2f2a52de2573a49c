#include "sku/reconcile.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/ticker.h"
#include "sku/pending_settle.h"
#include "store/db.h"
#include "store/redis_functions.h"

void reconcile_print(FILE *out, const struct sku_check *c)
{
    if (!c->loaded) {
        fprintf(out, "sku %" PRId64 ": not in Redis; database stock %" PRId64 "\n", c->sku,
                c->db_stock);
        return;
    }
    fprintf(out,
            "sku %" PRId64 ": redis %" PRId64 " database %" PRId64 " in_flight %" PRId64
            " %s drift %" PRId64 " users_differing %" PRId64 " adjustments_open %" PRId64
            " settled %" PRId64 " dead_letters %" PRId64 " journal_pending %" PRId64
            " epoch %" PRId64 "%s%s%s\n",
            c->sku, c->redis_stock, c->db_stock, c->in_flight, c->quiescent ? "quiescent" : "busy",
            c->drift_units, c->users_differing, c->adjustments_open, c->settled, c->dead_letters,
            c->journal_pending, c->loaded_epoch, c->stale_run ? " redis_restarted" : "",
            c->invariant_ok ? "" : " INVARIANT_BROKEN", c->rebuilt ? " rebuilt" : "");
}

/* Whether a peek saw something a locked check should look at. */
static int looks_off(const struct sku_check *c)
{
    return !c->loaded || c->stale_run || c->adjustments_open > 0 || c->drift_units > 0;
}

static int pass_one(struct worker_ctx *w, int64_t sku, enum sku_check_mode mode, int always,
                    FILE *out, struct reconcile_totals *t)
{
    struct sku_check c;
    t->skus++;
    if (!always) {
        enum sku_result res = sku_peek(w, sku, &c);
        if (res == SKU_UNKNOWN)
            return 0;
        if (res != SKU_OK) {
            t->failed++;
            return -1;
        }
        t->dead_letters += c.dead_letters;
        if (!looks_off(&c))
            return 0;
        t->dead_letters -= c.dead_letters; /* counted again below */
    }
    enum sku_result res = sku_check(w, sku, mode, "reconciliation", &c);
    if (res == SKU_UNKNOWN)
        return 0;
    if (res != SKU_OK) {
        log_warn("sku %" PRId64 ": reconciliation failed (%s)", sku,
                 res == SKU_NOT_LOADED ? "Redis refused the rebuild"
                                       : "a store failed or its lock was busy; next pass");
        t->failed++;
        return -1;
    }
    t->checked++;
    /* Orders answered 202 pending whose reservation the rebuilt Redis lost
     * are decided now, not after pending_settle_after_ms (an entry still in
     * the stream is left to its writer whatever its age). */
    if (c.rebuilt && mode != SKU_CHECK_ONLY && pending_settle_sku(w, sku, 0, NULL) != 0)
        log_warn("sku %" PRId64 ": orders recorded pending not settled yet; next pass", sku);
    t->rebuilt += c.rebuilt;
    t->settled += c.settled;
    t->dead_letters += c.dead_letters;
    t->invariant_broken += !c.invariant_ok;
    /* What is left after this check's repairs (a rebuild leaves nothing). */
    if (!c.rebuilt &&
        (!c.loaded || c.drift_units || c.users_differing || (c.quiescent && c.journal_pending))) {
        t->drifted++;
        t->drift_units += c.drift_units;
    }
    if (!c.invariant_ok)
        log_error("sku %" PRId64 ": the database's own invariant check fails (I1)", sku);
    if (out)
        reconcile_print(out, &c);
    return 0;
}

/* Every active SKU, one after the other; stops between two SKUs once *halt
 * (may be NULL) is set: each SKU's check stands alone, and a pass over
 * thousands of SKUs must not hold a daemon's shutdown. */
static int pass_all(struct worker_ctx *w, enum sku_check_mode mode, FILE *out,
                    struct reconcile_totals *t, const atomic_int *halt)
{
    PGresult *r = db_query(&w->db, "sku_ids_active", 0, NULL);
    if (!r) {
        t->failed++;
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < PQntuples(r) && !(halt && atomic_load(halt)); i++)
        if (pass_one(w, atoll(PQgetvalue(r, i, 0)), mode, mode == SKU_CHECK_ONLY, out, t) != 0)
            rc = -1;
    PQclear(r);
    return rc;
}

int reconcile_pass(struct worker_ctx *w, int64_t sku, enum sku_check_mode mode, FILE *out,
                   struct reconcile_totals *t)
{
    return sku > 0 ? pass_one(w, sku, mode, 1, out, t) : pass_all(w, mode, out, t, NULL);
}

/* ---- the daemon's thread ------------------------------------------------ */

struct rebuilt_at {
    int64_t sku, mono_ms;
};

struct reconciler {
    const struct cfg *cfg;
    struct worker_ctx ctx;
    struct ticker *ticker;
    pthread_mutex_t mu;
    int64_t *refused; /* under mu: SKUs whose orders the database refused */
    size_t nrefused, caprefused;
    struct rebuilt_at *rebuilt; /* the thread's own: last refusal rebuild per SKU */
    size_t nrebuilt;
};

static _Atomic(struct reconciler *) running;

void reconcile_kick(void)
{
    struct reconciler *r = atomic_load(&running);
    if (!r)
        return;
    ticker_kick(r->ticker);
}

void reconcile_refused(int64_t sku)
{
    struct reconciler *r = atomic_load(&running);
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    size_t i = 0;
    while (i < r->nrefused && r->refused[i] != sku)
        i++;
    if (i == r->nrefused) {
        if (r->nrefused == r->caprefused) {
            r->caprefused = r->caprefused ? 2 * r->caprefused : 8;
            r->refused = xrealloc(r->refused, r->caprefused * sizeof *r->refused);
        }
        r->refused[r->nrefused++] = sku;
    }
    pthread_mutex_unlock(&r->mu);
    ticker_kick(r->ticker);
}

/* Rebuilds the SKUs the database refused orders of, each at most once per
 * interval.  Returns -1 when one could not be done (retried soon). */
static int rebuild_refused(struct reconciler *r, struct reconcile_totals *t)
{
    pthread_mutex_lock(&r->mu);
    int64_t *skus = r->refused;
    size_t n = r->nrefused;
    r->refused = NULL;
    r->nrefused = r->caprefused = 0;
    pthread_mutex_unlock(&r->mu);
    int rc = 0;
    int64_t now = clock_mono_ms();
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < r->nrebuilt && r->rebuilt[j].sku != skus[i])
            j++;
        if (j < r->nrebuilt && now - r->rebuilt[j].mono_ms < r->cfg->reconcile_interval_ms)
            continue;
        int64_t before = t->rebuilt;
        if (pass_one(&r->ctx, skus[i], SKU_CHECK_RELOAD, 1, NULL, t) != 0) {
            rc = -1;
            continue;
        }
        if (t->rebuilt == before)
            continue;
        if (j == r->nrebuilt) {
            r->rebuilt = xrealloc(r->rebuilt, (r->nrebuilt + 1) * sizeof *r->rebuilt);
            r->nrebuilt++;
        }
        r->rebuilt[j] = (struct rebuilt_at){skus[i], now};
    }
    free(skus);
    return rc;
}

/* One pass of the thread; returns the pause before the next. */
static int64_t reconcile_tick(struct ticker *tk, void *arg)
{
    struct reconciler *r = arg;
    struct reconcile_totals t = {0};
    /* Before anything runs a script: an empty restart lost the
     * functions too, and a rebuild without them fails. */
    enum rlock_library_state lib = redis_functions_heal(&r->ctx.redis, r->cfg);
    int failed = lib == RLOCK_LIBRARY_MISSING || lib == RLOCK_LIBRARY_ERROR;
    failed |= rebuild_refused(r, &t) != 0;
    failed |= pass_all(&r->ctx, SKU_CHECK_REPAIR, NULL, &t, ticker_halt(tk)) != 0;
    /* durable orders answered 202 pending that no writer wrote */
    failed |= pending_settle_due(&r->ctx, r->cfg->pending_settle_after_ms, NULL) != 0;
    if (!failed) { /* what is left after this pass's repairs */
        metrics_set(M_DRIFT_SKUS, (long)t.drifted);
        metrics_set(M_DRIFT_UNITS, (long)t.drift_units);
    }
    metrics_add(M_RECONCILE_RUNS, 1);
    if (t.rebuilt || t.settled)
        log_info("reconciliation: %" PRId64 " SKUs rebuilt, %" PRId64 " adjustment records settled",
                 t.rebuilt, t.settled);
    /* A pass that could not finish (a lock a dead process still holds
     * until its lease ends, a store down) is tried again soon. */
    return failed && r->cfg->reconcile_retry_ms < r->cfg->reconcile_interval_ms
               ? r->cfg->reconcile_retry_ms
               : r->cfg->reconcile_interval_ms;
}

struct reconciler *reconcile_start(const struct cfg *c, char *err, size_t errlen)
{
    struct reconciler *r = xcalloc(1, sizeof *r);
    r->cfg = c;
    if (worker_ctx_init(&r->ctx, c, err, errlen) != 0) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->ticker = ticker_start("reconciler", reconcile_tick, r, err, errlen);
    if (!r->ticker) {
        worker_ctx_close(&r->ctx);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    atomic_store(&running, r);
    return r;
}

void reconcile_stop(struct reconciler *r)
{
    if (!r)
        return;
    atomic_store(&running, NULL);
    ticker_stop(r->ticker);
    worker_ctx_close(&r->ctx);
    free(r->refused);
    free(r->rebuilt);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
