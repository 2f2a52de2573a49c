/*
 * Fuzz target: the order body, validate_order_body(), as handle_order_place
 * calls it, under the smallest, the default and the largest max_qty the
 * settings allow.
 *
 * Properties: an accepted order has user_id >= 1, or 0 when the body names
 * none (the buyer is the token's), and qty in 1..max_qty; what
 * a smaller max_qty accepts a larger one accepts the same; an accepted order
 * written out plainly is accepted again as the same order; a refusal leaves
 * the outputs alone and says why in printable ASCII.  And the verdict is the
 * one restated here from jansson (an object without duplicate keys, only
 * "qty" and "user_id", both JSON integers in range): validate.c reads the
 * common bodies by hand, everything else with jansson, and both must agree.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/validate.h"
#include "fuzz/fuzz.h"

/* The verdict from jansson alone: 1 with *user and *qty when acceptable. */
static int jansson_verdict(const uint8_t *data, size_t size, int64_t max_qty, int64_t *user,
                           int64_t *qty)
{
    json_t *o = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    int ok = json_is_object(o);
    const char *key;
    json_t *v;
    if (ok) {
        json_object_foreach(o, key, v)
        {
            if (strcmp(key, "qty") != 0 && strcmp(key, "user_id") != 0)
                ok = 0;
        }
        (void)v;
    }
    json_t *q = ok ? json_object_get(o, "qty") : NULL,
           *u = ok ? json_object_get(o, "user_id") : NULL;
    ok = ok && json_is_integer(q) && json_integer_value(q) >= 1 &&
         json_integer_value(q) <= max_qty &&
         (!u || (json_is_integer(u) && json_integer_value(u) >= 1));
    if (ok) {
        *qty = json_integer_value(q);
        *user = u ? json_integer_value(u) : 0;
    }
    json_decref(o);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int64_t max_qtys[] = {1, 1000, 1000000}; /* cfg: min, default, max */
    int accepted_before = 0;
    int64_t user_before = 0, qty_before = 0;

    for (size_t i = 0; i < sizeof max_qtys / sizeof max_qtys[0]; i++) {
        int64_t user = -1, qty = -1;
        char detail[160]; /* the handler's size */
        int rc = validate_order_body((const char *)data, size, max_qtys[i], &user, &qty, detail,
                                     sizeof detail);

        int64_t juser = -1, jqty = -1;
        int jok = jansson_verdict(data, size, max_qtys[i], &juser, &jqty);
        FUZZ_CHECK(jok == (rc == 0));
        FUZZ_CHECK(!jok || (juser == user && jqty == qty));
        if (rc != 0) {
            FUZZ_CHECK(rc == -1 && user == -1 && qty == -1);
            FUZZ_CHECK(!accepted_before);
            fuzz_check_detail(detail, sizeof detail);
            continue;
        }
        FUZZ_CHECK(user >= 0 && qty >= 1 && qty <= max_qtys[i]);
        FUZZ_CHECK(!accepted_before || (user == user_before && qty == qty_before));

        char plain[96];
        int n = user ? snprintf(plain, sizeof plain,
                                "{\"user_id\":%" PRId64 ",\"qty\":%" PRId64 "}", user, qty)
                     : snprintf(plain, sizeof plain, "{\"qty\":%" PRId64 "}", qty);
        int64_t user2 = -1, qty2 = -1;
        FUZZ_CHECK(validate_order_body(plain, (size_t)n, max_qtys[i], &user2, &qty2, NULL, 0) == 0);
        FUZZ_CHECK(user2 == user && qty2 == qty);
        accepted_before = 1, user_before = user, qty_before = qty;
    }
    return 0;
}
