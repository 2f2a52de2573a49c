#include "ctl/ctl_sku.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "ctl/ctl_admin.h"
#include "ctl/ctl_args.h"
#include "ctl/ctl_table.h"

/* The columns of `sku list`: the list's JSON field names. */
static const char *const list_cols[] = {"id",
                                        "name",
                                        "db_stock",
                                        "initial_stock",
                                        "per_user_limit",
                                        "payment_window_s",
                                        "buckets",
                                        "sale_starts_at",
                                        "sale_ends_at"};
#define LIST_COLS (sizeof list_cols / sizeof list_cols[0])

void ctl_sku_usage(FILE *out)
{
    fputs("  sku create --id N --name TEXT --stock N --per-user-limit N [--payment-window-s N]\n"
          "             [--buckets N] [--sale-starts-at RFC3339] [--sale-ends-at RFC3339]\n"
          "                                   put a SKU on sale (without --id the service\n"
          "                                   draws one)\n"
          "  sku show ID                      both stores' view of a SKU, its orders by state\n"
          "  sku list [--after ID] [--limit N]\n"
          "                                   the SKUs by id (every page, unless --limit)\n"
          "  sku adjust ID --delta +N|-N --reason TEXT [--idempotency-key K]\n"
          "                                   change the stock by a relative delta; with a key\n"
          "                                   a repeat is applied once\n"
          "  sku reload ID                    rebuild the SKU's Redis state from PostgreSQL\n"
          "  sku patch ID --payment-window-s N\n"
          "                                   the payment window of orders confirmed from now\n",
          out);
}

static void print_list(const json_t *o)
{
    ctl_table_print_items(json_object_get(o, "skus"), LIST_COLS, list_cols, stdout);
}

/* Checks body with the service's validator: 0, or CTL_EXIT_USAGE. */
static int check_body(const char *cmd, const json_t *body,
                      int (*check)(const char *, size_t, char *, size_t))
{
    char *text = json_dumps(body, JSON_COMPACT);
    char detail[200];
    int bad = check(text, strlen(text), detail, sizeof detail);
    free(text);
    return bad ? ctl_usage_error("%s: %s", cmd, detail) : 0;
}

static int check_create(const char *b, size_t n, char *d, size_t cap)
{
    struct validate_sku s;
    return validate_sku_body(b, n, &s, d, cap);
}

static int check_adjust(const char *b, size_t n, char *d, size_t cap)
{
    int64_t delta;
    char reason[VALIDATE_REASON_MAX + 1];
    return validate_adjust_body(b, n, &delta, reason, sizeof reason, d, cap);
}

static int check_window(const char *b, size_t n, char *d, size_t cap)
{
    int64_t w;
    return validate_window_body(b, n, &w, d, cap);
}

/* Sets member 'key' of o to the integer text v (when given).  Returns 0 or
 * CTL_EXIT_USAGE. */
static int set_int(json_t *o, const char *key, const char *flag, const char *v)
{
    int64_t n;
    if (!v)
        return 0;
    if (ctl_arg_i64(v, CTL_UNSIGNED, &n) != 0)
        return ctl_usage_error("%s needs a non-negative integer, not \"%s\"", flag, v);
    json_object_set_new(o, key, json_integer(n));
    return 0;
}

static int sku_create(struct ctl *ctl, int argc, char **argv)
{
    const char *id = NULL, *name = NULL, *stock = NULL, *limit = NULL, *window = NULL,
               *buckets = NULL, *starts = NULL, *ends = NULL;
    struct ctl_flag flags[] = {{"--id", &id},
                               {"--name", &name},
                               {"--stock", &stock},
                               {"--per-user-limit", &limit},
                               {"--payment-window-s", &window},
                               {"--buckets", &buckets},
                               {"--sale-starts-at", &starts},
                               {"--sale-ends-at", &ends},
                               {NULL, NULL}};
    int rc = ctl_admin_args("sku create", argc, argv, 0, NULL, flags);
    if (rc)
        return rc;
    if (!name || !stock || !limit)
        return ctl_usage_error("sku create needs --name, --stock and --per-user-limit");
    json_t *body = json_object();
    json_object_set_new(body, "name", json_string(name));
    if (!json_object_get(body, "name"))
        rc = ctl_usage_error("--name must be UTF-8 text");
    if (!rc)
        rc = set_int(body, "id", "--id", id);
    if (!rc)
        rc = set_int(body, "stock", "--stock", stock);
    if (!rc)
        rc = set_int(body, "per_user_limit", "--per-user-limit", limit);
    if (!rc)
        rc = set_int(body, "payment_window_s", "--payment-window-s", window);
    if (!rc)
        rc = set_int(body, "buckets", "--buckets", buckets);
    if (starts)
        json_object_set_new(body, "sale_starts_at", json_string(starts));
    if (ends)
        json_object_set_new(body, "sale_ends_at", json_string(ends));
    if (!rc)
        rc = check_body("sku create", body, check_create);
    if (!rc)
        rc = ctl_admin_run(ctl, "POST", "/admin/v1/skus", body, NULL);
    json_decref(body);
    return rc;
}

/* A command on one SKU without flags: GET it, or POST to its 'sub' path. */
static int sku_simple(struct ctl *ctl, const char *cmd, const char *method, const char *sub,
                      int argc, char **argv)
{
    const char *pos[1];
    int64_t id;
    int rc = ctl_admin_args(cmd, argc, argv, 1, pos, NULL);
    if (!rc)
        rc = ctl_admin_id("the SKU id", pos[0], &id);
    if (rc)
        return rc;
    char path[96];
    snprintf(path, sizeof path, "/admin/v1/skus/%" PRId64 "%s", id, sub);
    return ctl_admin_run(ctl, method, path, NULL, NULL);
}

static int sku_adjust(struct ctl *ctl, int argc, char **argv)
{
    const char *pos[1], *delta = NULL, *reason = NULL, *idem = NULL;
    struct ctl_flag flags[] = {
        {"--delta", &delta}, {"--reason", &reason}, {"--idempotency-key", &idem}, {NULL, NULL}};
    int64_t id, d;
    int rc = ctl_admin_args("sku adjust", argc, argv, 1, pos, flags);
    if (!rc)
        rc = ctl_admin_id("the SKU id", pos[0], &id);
    if (rc)
        return rc;
    if (!delta || !reason)
        return ctl_usage_error("sku adjust needs --delta +N|-N and --reason TEXT");
    if (ctl_arg_i64(delta, CTL_SIGNED, &d) != 0 || d == 0)
        return ctl_usage_error("--delta must be a non-zero integer such as +10 or -5, not \"%s\"",
                               delta);
    char detail[200];
    if (idem && validate_idempotency_key(idem, (size_t)ctl->cfg.max_idempotency_key_bytes, detail,
                                         sizeof detail) != 0)
        return ctl_usage_error("--idempotency-key: %s", detail);
    json_t *body = json_pack("{s:I, s:s?}", "delta", (json_int_t)d, "reason", reason);
    if (!body || !json_object_get(body, "reason")) {
        json_decref(body);
        return ctl_usage_error("--reason must be UTF-8 text");
    }
    rc = check_body("sku adjust", body, check_adjust);
    char path[96];
    snprintf(path, sizeof path, "/admin/v1/skus/%" PRId64 "/stock-adjustments", id);
    if (!rc)
        rc = ctl_admin_run(ctl, "POST", path, body, idem);
    json_decref(body);
    return rc;
}

static int sku_patch(struct ctl *ctl, int argc, char **argv)
{
    const char *pos[1], *window = NULL;
    struct ctl_flag flags[] = {{"--payment-window-s", &window}, {NULL, NULL}};
    int64_t id;
    int rc = ctl_admin_args("sku patch", argc, argv, 1, pos, flags);
    if (!rc)
        rc = ctl_admin_id("the SKU id", pos[0], &id);
    if (rc)
        return rc;
    if (!window)
        return ctl_usage_error("sku patch needs --payment-window-s N");
    json_t *body = json_object();
    rc = set_int(body, "payment_window_s", "--payment-window-s", window);
    if (!rc)
        rc = check_body("sku patch", body, check_window);
    char path[64];
    snprintf(path, sizeof path, "/admin/v1/skus/%" PRId64, id);
    if (!rc)
        rc = ctl_admin_run(ctl, "PATCH", path, body, NULL);
    json_decref(body);
    return rc;
}

static int sku_list(struct ctl *ctl, int argc, char **argv)
{
    return ctl_admin_pages(ctl, "sku list", "/admin/v1/skus", argc, argv, print_list);
}

int ctl_sku_main(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        return ctl_usage_error("sku needs a command: create, show, list, adjust, reload, patch");
    const char *cmd = argv[0];
    if (strcmp(cmd, "create") == 0)
        return sku_create(ctl, argc - 1, argv + 1);
    if (strcmp(cmd, "show") == 0)
        return sku_simple(ctl, "sku show", "GET", "", argc - 1, argv + 1);
    if (strcmp(cmd, "list") == 0)
        return sku_list(ctl, argc - 1, argv + 1);
    if (strcmp(cmd, "adjust") == 0)
        return sku_adjust(ctl, argc - 1, argv + 1);
    if (strcmp(cmd, "reload") == 0)
        return sku_simple(ctl, "sku reload", "POST", "/reload", argc - 1, argv + 1);
    if (strcmp(cmd, "patch") == 0)
        return sku_patch(ctl, argc - 1, argv + 1);
    return ctl_usage_error("unknown sku command \"%s\"", cmd);
}
