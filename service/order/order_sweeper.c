#include "order/order_sweeper.h"

#include <inttypes.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/ticker.h"
#include "order/order_life.h"
#include "store/workers.h"

struct order_sweeper {
    const struct cfg *cfg;
    struct worker_ctx ctx;
    struct ticker *ticker; /* NULL: not started (expiry_sweep_interval_ms 0) */
    int64_t cursor;        /* the ticker's own: where the last sweep stopped */
};

static int64_t sweep(struct ticker *t, void *arg)
{
    struct order_sweeper *s = arg;
    (void)t;
    struct life_sweep done;
    if (order_life_sweep(&s->ctx, s->cfg->expiry_batch, s->cfg->expiry_sweep_skus, &s->cursor,
                         &done) == 0 &&
        done.expired > 0)
        log_info("expiry sweep: %" PRId64 " unpaid orders expired on %" PRId64 " SKUs",
                 done.expired, done.skus);
    return s->cfg->expiry_sweep_interval_ms;
}

struct order_sweeper *order_sweeper_start(const struct cfg *c, char *err, size_t errlen)
{
    struct order_sweeper *s = xcalloc(1, sizeof *s);
    s->cfg = c;
    if (c->expiry_sweep_interval_ms == 0)
        return s;
    if (worker_ctx_init(&s->ctx, c, err, errlen) != 0) {
        free(s);
        return NULL;
    }
    s->ticker = ticker_start("expiry sweeper", sweep, s, err, errlen);
    if (!s->ticker) {
        worker_ctx_close(&s->ctx);
        free(s);
        return NULL;
    }
    return s;
}

void order_sweeper_stop(struct order_sweeper *s)
{
    if (!s)
        return;
    if (s->ticker) {
        ticker_stop(s->ticker);
        worker_ctx_close(&s->ctx);
    }
    free(s);
}
