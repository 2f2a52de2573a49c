/*
 * seckillctl: operator commands for a seckill deployment.
 *
 *   seckillctl [--redis-url URL] lock list|inspect|force-release|hold ...
 *   seckillctl reconcile [--sku N] [--repair]
 *   seckillctl token --user N [--ttl S]
 *   seckillctl [--url URL] [--json] sku|order|sale|health ...   (the admin API)
 *
 * Settings come from the same table as the daemon's (SECKILL_* environment,
 * SECKILL_CONFIG file, defaults); --redis-url overrides redis_url.
 */
#include "ctl/ctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/embedded.h"
#include "core/log.h"
#include "ctl/ctl_admin.h"
#include "ctl/ctl_lock.h"
#include "ctl/ctl_order.h"
#include "ctl/ctl_reconcile.h"
#include "ctl/ctl_sku.h"
#include "ctl/ctl_token.h"
#include "store/pgwait.h"

static void usage(FILE *out)
{
    fputs("usage: seckillctl [--redis-url URL] <group> <command> [args]\n"
          "       seckillctl [--url URL] [--json] <group> <command> [args]  (admin API)\n\n",
          out);
    ctl_lock_usage(out);
    ctl_reconcile_usage(out);
    ctl_token_usage(out);
    ctl_sku_usage(out);
    ctl_order_usage(out);
    fputs("\nRedis: --redis-url (before or after the command; refused when it holds a password),\n"
          "else SECKILL_REDIS_URL or SECKILL_REDIS_URL_FILE and the other SECKILL_* settings of\n"
          "seckilld (see seckilld --help).\n"
          "reconcile also reads PostgreSQL: SECKILL_PG_DSN and PGPASSFILE, as seckilld.\n",
          out);
    ctl_admin_usage(out);
    fputs("\nExit status: 0 done; 1 error (a store, or the service, unreachable or failing\n"
          "(5xx), a lock lost while held, an instance not healthy); 2 usage error (nothing\n"
          "done, nothing sent); 3 lock busy (hold) or not held (inspect, force-release), Redis\n"
          "and PostgreSQL still disagree (reconcile), no such SKU or order (404); 4 the\n"
          "service refused the request (409 conflict, insufficient stock, a reused\n"
          "Idempotency-Key, 400, 429); 5 no admin token, or the service refused it (401).\n",
          out);
}

/* Removes every --redis-url flag from argv (it may follow the command),
 * applying it to the settings.  Returns 0, or a ctl_exit code. */
static int take_redis_url(struct ctl *ctl, int *argc, char **argv)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *url = NULL;
        if (strcmp(argv[i], "--redis-url") == 0) {
            if (i + 1 >= *argc)
                return ctl_usage_error("--redis-url needs a value");
            url = argv[++i];
        } else if (strncmp(argv[i], "--redis-url=", 12) == 0) {
            url = argv[i] + 12;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        char err[320];
        if (cfg_set_flag(&ctl->cfg, "redis_url", url, err, sizeof err) != 0)
            return ctl_usage_error("--redis-url: %s", err);
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

/* The groups that talk to the admin API (ctl_admin.h). */
static int admin_group(const char *g)
{
    return strcmp(g, "sku") == 0 || strcmp(g, "order") == 0 || strcmp(g, "sale") == 0 ||
           strcmp(g, "health") == 0;
}

int main(int argc, char **argv)
{
    static struct ctl ctl;
    char err[320];
    int args;

    /* Settings first (file, environment), so that flags override them. */
    cfg_defaults(&ctl.cfg);
    char *no_flags[] = {argv[0], NULL};
    if (cfg_load(&ctl.cfg, 1, no_flags, &args, err, sizeof err) != 0) {
        ctl_say("bad settings: %s", err);
        cfg_free(&ctl.cfg);
        return CTL_EXIT_USAGE;
    }
    if (log_set_level(ctl.cfg.log_level) != 0)
        (void)log_set_level("info");

    int rc = take_redis_url(&ctl, &argc, argv);
    if (rc == 0)
        rc = ctl_admin_take_flags(&ctl, &argc, argv);
    int help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                             strcmp(argv[1], "help") == 0);
    /* A bad address is a usage error, found before any command runs. */
    if (rc == 0 && !help && redis_conn_init(&ctl.redis, &ctl.cfg, err, sizeof err) != 0)
        rc = ctl_usage_error("bad Redis URL: %s", err); /* the URL may hold a password */
    if (rc == 0) {
        /* every script, the lock library's too, runs as a Redis function */
        embedded_init();
        if (argc < 2 || help) {
            usage(help ? stdout : stderr);
            rc = help ? CTL_EXIT_OK : CTL_EXIT_USAGE;
        } else if (ctl.admin_flags && !admin_group(argv[1])) {
            rc = ctl_usage_error("--url, --json, --timeout-ms and --token-file are for the sku, "
                                 "order, sale and health groups");
        } else if (strcmp(argv[1], "lock") == 0) {
            rc = ctl_lock_main(&ctl, argc - 2, argv + 2);
        } else if (strcmp(argv[1], "reconcile") == 0) {
            pgwait_set_default_timeout_ms((int)ctl.cfg.pg_client_timeout_ms);
            pgwait_set_host_timeout_ms((int)ctl.cfg.pg_connect_host_timeout_ms);
            rc = ctl_reconcile_main(&ctl, argc - 2, argv + 2);
        } else if (strcmp(argv[1], "token") == 0) {
            rc = ctl_token_main(&ctl, argc - 2, argv + 2);
        } else if (strcmp(argv[1], "sku") == 0) {
            rc = ctl_sku_main(&ctl, argc - 2, argv + 2);
        } else if (strcmp(argv[1], "order") == 0) {
            rc = ctl_order_main(&ctl, argc - 2, argv + 2);
        } else if (strcmp(argv[1], "sale") == 0) {
            rc = ctl_sale_main(&ctl, argc - 2, argv + 2);
        } else if (strcmp(argv[1], "health") == 0) {
            rc = ctl_health_main(&ctl, argc - 2, argv + 2);
        } else {
            rc = ctl_usage_error("unknown command group \"%s\"", argv[1]);
        }
    }
    redis_conn_close(&ctl.redis);
    cfg_free(&ctl.cfg);
    return rc;
}
