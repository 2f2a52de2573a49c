/*
 * Fuzz target: the bodies of the order's life, validate_payment_body() (the
 * payment callback) and validate_window_body() (a SKU's payment window).
 * The first byte picks which; the rest is the body.
 *
 * Properties: an accepted payment_ref is 1..VALIDATE_PAYMENT_REF_MAX bytes of
 * printable ASCII without space, NUL-terminated, and the body written out
 * again with it is accepted as the same reference; an accepted window is in
 * 0..VALIDATE_WINDOW_MAX and round-trips the same way; a refusal leaves the
 * outputs alone and says why in printable ASCII.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "fuzz.h"

static void payment(const char *body, size_t len)
{
    char ref[VALIDATE_PAYMENT_REF_MAX + 1], untouched[sizeof ref], detail[160];
    memset(ref, 0x5a, sizeof ref);
    memcpy(untouched, ref, sizeof ref);
    if (validate_payment_body(body, len, ref, detail, sizeof detail) != 0) {
        FUZZ_CHECK(memcmp(ref, untouched, sizeof ref) == 0);
        fuzz_check_detail(detail, sizeof detail);
        return;
    }
    size_t n = strnlen(ref, sizeof ref);
    FUZZ_CHECK(n >= 1 && n <= VALIDATE_PAYMENT_REF_MAX);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ref[i] > ' ' && ref[i] <= '~');
    json_t *shown = json_pack("{s:s}", "payment_ref", ref);
    char *text = json_dumps(shown, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    char again[sizeof ref];
    FUZZ_CHECK(validate_payment_body(text, strlen(text), again, detail, sizeof detail) == 0);
    FUZZ_CHECK(strcmp(again, ref) == 0);
    free(text);
    json_decref(shown);
}

static void window(const char *body, size_t len)
{
    int64_t w = -7, untouched = -7;
    char detail[160];
    if (validate_window_body(body, len, &w, detail, sizeof detail) != 0) {
        FUZZ_CHECK(w == untouched);
        fuzz_check_detail(detail, sizeof detail);
        return;
    }
    FUZZ_CHECK(w >= 0 && w <= VALIDATE_WINDOW_MAX);
    char text[64], detail2[160];
    snprintf(text, sizeof text, "{\"payment_window_s\":%lld}", (long long)w);
    int64_t again = -1;
    FUZZ_CHECK(validate_window_body(text, strlen(text), &again, detail2, sizeof detail2) == 0);
    FUZZ_CHECK(again == w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *body = (const char *)data + 1;
    if (data[0] & 1)
        window(body, size - 1);
    else
        payment(body, size - 1);
    return 0;
}
