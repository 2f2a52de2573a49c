/*
 * Fuzz target: the admin "create SKU" body, validate_sku_body().
 *
 * Properties: every accepted value is within the bounds validate.h states
 * (name 1..200 bytes, stock, per_user_limit, id, sale end after start,
 * payment window); the
 * SKU written out again the way the API shows it (times through
 * timefmt_rfc3339, as sku.c answers them) is accepted again as the same SKU,
 * so whatever we accept we can show; a refusal leaves *out alone and says why
 * in printable ASCII.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timefmt.h"
#include "core/validate.h"
#include "fuzz/fuzz.h"

/* A time as the API shows it (sku.c), JSON null when absent. */
static json_t *shown_time(int has, int64_t ms)
{
    char buf[40]; /* sku.c's size */

    if (!has)
        return json_null();
    timefmt_rfc3339(ms, buf, sizeof buf);
    return json_string(buf);
}

static int same_sku(const struct validate_sku *a, const struct validate_sku *b)
{
    return a->has_id == b->has_id && a->id == b->id && strcmp(a->name, b->name) == 0 &&
           a->stock == b->stock && a->per_user_limit == b->per_user_limit &&
           a->has_starts == b->has_starts && a->starts_ms == b->starts_ms &&
           a->has_ends == b->has_ends && a->ends_ms == b->ends_ms &&
           a->payment_window_s == b->payment_window_s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct validate_sku v, untouched;
    char detail[160];

    memset(&untouched, 0x5a, sizeof untouched);
    v = untouched;
    if (validate_sku_body((const char *)data, size, &v, detail, sizeof detail) != 0) {
        FUZZ_CHECK(memcmp(&v, &untouched, sizeof v) == 0);
        fuzz_check_detail(detail, sizeof detail);
        return 0;
    }
    size_t n = strnlen(v.name, sizeof v.name);
    FUZZ_CHECK(n >= 1 && n <= VALIDATE_SKU_NAME_MAX);
    FUZZ_CHECK(!v.has_id || v.id >= 1);
    FUZZ_CHECK(v.stock >= 0 && v.stock <= VALIDATE_STOCK_MAX);
    FUZZ_CHECK(v.per_user_limit >= 1 && v.per_user_limit <= VALIDATE_PER_USER_LIMIT_MAX);
    FUZZ_CHECK(!v.has_starts || !v.has_ends || v.ends_ms > v.starts_ms);
    FUZZ_CHECK(v.payment_window_s >= 0 && v.payment_window_s <= VALIDATE_WINDOW_MAX);

    json_t *shown = json_pack("{s:s, s:I, s:I, s:o, s:o}", "name", v.name, "stock",
                              (json_int_t)v.stock, "per_user_limit", (json_int_t)v.per_user_limit,
                              "sale_starts_at", shown_time(v.has_starts, v.starts_ms),
                              "sale_ends_at", shown_time(v.has_ends, v.ends_ms));
    FUZZ_CHECK(shown != NULL);
    if (v.has_id)
        json_object_set_new(shown, "id", json_integer(v.id));
    json_object_set_new(shown, "payment_window_s", json_integer(v.payment_window_s));
    char *text = json_dumps(shown, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    struct validate_sku again;
    char detail2[160];
    if (validate_sku_body(text, strlen(text), &again, detail2, sizeof detail2) != 0) {
        fprintf(stderr, "shown as %s, refused: %s\n", text, detail2);
        FUZZ_CHECK(!"an accepted SKU is accepted again as shown");
    }
    /* timefmt shows milliseconds: the same instant, to the millisecond */
    FUZZ_CHECK(same_sku(&again, &v));
    free(text);
    json_decref(shown);
    return 0;
}
