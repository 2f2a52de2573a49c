#include "ctl/ctl_order.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "ctl/ctl_admin.h"
#include "ctl/ctl_table.h"

/* The columns of `sale status`: the sale status's JSON field names. */
static const char *const sale_cols[] = {
    "id",           "name",          "db_stock",      "available",  "in_flight_units",
    "sold_out",     "sold_out_flag", "stream_length", "stream_lag", "adjustments_open",
    "dead_letters", "drift_units"};
#define SALE_COLS (sizeof sale_cols / sizeof sale_cols[0])

/* The columns of `health`: the URL, then /healthz's fields. */
static const char *const health_cols[] = {"url",      "http_status",     "status", "redis",
                                          "postgres", "redis_functions", "detail"};
#define HEALTH_COLS (sizeof health_cols / sizeof health_cols[0])

void ctl_order_usage(FILE *out)
{
    fputs("  order show ID                    any buyer's order, as its buyer sees it\n"
          "  order pay ID --payment-ref REF   record its payment (as the payment callback)\n"
          "  order cancel ID                  cancel it as its buyer may: pending, or\n"
          "                                   confirmed within its payment window; a repeat\n"
          "                                   answers replayed\n"
          "  sale status [--after ID] [--limit N]\n"
          "                                   every SKU on sale: stock in both stores, units\n"
          "                                   in flight, stream lag, sold-out state and this\n"
          "                                   instance's flag, drift\n"
          "  health                           /healthz of each --url: the instance and its\n"
          "                                   stores (no token needed)\n",
          out);
}

static void print_sale(const json_t *o)
{
    ctl_table_print_items(json_object_get(o, "skus"), SALE_COLS, sale_cols, stdout);
}

static void print_health(const json_t *o)
{
    ctl_table_print_items(o, HEALTH_COLS, health_cols, stdout);
}

/* order show|cancel ID, and pay ID --payment-ref REF. */
static int order_cmd(struct ctl *ctl, const char *cmd, int argc, char **argv)
{
    const char *pos[1], *ref = NULL;
    int pay = strcmp(cmd, "pay") == 0, show = strcmp(cmd, "show") == 0;
    struct ctl_flag flags[] = {{"--payment-ref", &ref}, {NULL, NULL}};
    char name[32];
    snprintf(name, sizeof name, "order %s", cmd);
    int64_t id;
    int rc = ctl_admin_args(name, argc, argv, 1, pos, pay ? flags : NULL);
    if (!rc)
        rc = ctl_admin_id("the order id", pos[0], &id);
    if (rc)
        return rc;
    json_t *body = NULL;
    if (pay) {
        if (!ref)
            return ctl_usage_error("order pay needs --payment-ref REF");
        body = json_pack("{s:s?}", "payment_ref", ref);
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        char detail[200], got[VALIDATE_PAYMENT_REF_MAX + 1];
        if (!text)
            snprintf(detail, sizeof detail, "must be printable ASCII");
        int bad = !text || validate_payment_body(text, strlen(text), got, detail, sizeof detail);
        free(text);
        if (bad) {
            json_decref(body);
            return ctl_usage_error("--payment-ref: %s", detail);
        }
    }
    char path[96];
    snprintf(path, sizeof path, "/admin/v1/orders/%" PRId64 "%s", id,
             show  ? ""
             : pay ? "/payment"
                   : "/cancel");
    rc = ctl_admin_run(ctl, show ? "GET" : "POST", path, body, NULL);
    json_decref(body);
    return rc;
}

int ctl_order_main(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        return ctl_usage_error("order needs a command: show, pay, cancel");
    if (strcmp(argv[0], "show") == 0 || strcmp(argv[0], "pay") == 0 ||
        strcmp(argv[0], "cancel") == 0)
        return order_cmd(ctl, argv[0], argc - 1, argv + 1);
    return ctl_usage_error("unknown order command \"%s\"", argv[0]);
}

int ctl_sale_main(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1 || strcmp(argv[0], "status") != 0)
        return ctl_usage_error("sale needs a command: status");
    return ctl_admin_pages(ctl, "sale status", "/admin/v1/sale", argc - 1, argv + 1, print_sale);
}

/* One instance's row: /healthz's JSON (200 or 503) with the URL and the
 * HTTP status, or why it could not be asked.  Returns whether it is ok. */
static int health_of(struct ctl *ctl, int at, json_t *rows)
{
    struct ctl_http_request q = {
        .method = "GET", .path = "/healthz", .timeout_ms = ctl->timeout_ms};
    struct ctl_http_answer a;
    char err[200];
    json_t *row = NULL;
    int ok = 0;
    if (ctl_http_do(&ctl->urls[at], &q, &a, err, sizeof err) != 0) {
        row = json_pack("{s:s, s:s}", "status", "unreachable", "detail", err);
    } else {
        row = json_loadb(a.body, a.body_len, 0, NULL);
        /* a 200 of something else on that port is no healthy seckilld */
        ok = a.status == 200 && json_is_object(row);
        if (!json_is_object(row) || (a.status != 200 && a.status != 503)) {
            json_decref(row);
            row = json_pack("{s:s, s:s}", "status", "unexpected", "detail",
                            "the answer is not seckilld's /healthz");
        }
        json_object_set_new(row, "http_status", json_integer(a.status));
        ctl_http_answer_free(&a);
    }
    json_object_set_new(row, "url", json_string(ctl->url_text[at]));
    json_array_append_new(rows, row);
    return ok;
}

int ctl_health_main(struct ctl *ctl, int argc, char **argv)
{
    if (argc > 0)
        return ctl_usage_error("health: unexpected argument \"%s\"", argv[0]);
    json_t *rows = json_array();
    int all_ok = 1;
    for (int i = 0; i < ctl->nurls; i++)
        all_ok &= health_of(ctl, i, rows);
    ctl_admin_print(ctl, rows, print_health);
    return all_ok ? CTL_EXIT_OK : CTL_EXIT_ERROR;
}
