#include "ctl/ctl_reconcile.h"

#include <inttypes.h>
#include <string.h>

#include "core/validate.h"
#include "sku/reconcile.h"

void ctl_reconcile_usage(FILE *out)
{
    fputs("  reconcile [--sku N] [--repair]   compare Redis with PostgreSQL per SKU; --repair\n"
          "                                   settles adjustment records and rebuilds a SKU\n"
          "                                   Redis lost, restarted under, or disagrees on\n",
          out);
}

int ctl_reconcile_main(struct ctl *ctl, int argc, char **argv)
{
    int64_t sku = 0;
    int repair = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--repair") == 0) {
            repair = 1;
        } else if (strcmp(argv[i], "--sku") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (validate_id_segment(v, strlen(v), &sku) != 0)
                return ctl_usage_error("--sku needs a SKU id, not \"%s\"", v);
        } else {
            return ctl_usage_error("reconcile: unexpected argument \"%s\"", argv[i]);
        }
    }
    struct worker_ctx w;
    char err[160];
    if (worker_ctx_init(&w, &ctl->cfg, err, sizeof err) != 0)
        return ctl_usage_error("%s", err);
    struct reconcile_totals t = {0};
    int rc = reconcile_pass(&w, sku, repair ? SKU_CHECK_REPAIR : SKU_CHECK_ONLY, stdout, &t);
    worker_ctx_close(&w);
    printf("%" PRId64 " SKUs, %" PRId64 " differ, %" PRId64 " units of drift, %" PRId64
           " rebuilt, %" PRId64 " adjustment records settled, %" PRId64 " dead letters, %" PRId64
           " failed the database's invariant check\n",
           t.checked, t.drifted, t.drift_units, t.rebuilt, t.settled, t.dead_letters,
           t.invariant_broken);
    if (rc != 0) {
        ctl_say("reconcile: a store failed (see the log above)");
        return CTL_EXIT_ERROR;
    }
    if (sku && t.checked == 0) {
        ctl_say("reconcile: no SKU %" PRId64, sku);
        return CTL_EXIT_STATE;
    }
    return t.drifted > 0 || t.invariant_broken ? CTL_EXIT_STATE : CTL_EXIT_OK;
}
