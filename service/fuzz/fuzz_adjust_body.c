/*
 * Fuzz target: the admin stock adjustment body, validate_adjust_body(), with
 * the handler's reason buffer and with one too small for most reasons.
 *
 * Properties: an accepted delta is non-zero with |delta| <= 10^12; the reason
 * is 1..500 bytes, NUL-terminated inside its buffer; a small buffer accepts
 * only what the large one accepts, the same; an accepted body rebuilt from
 * its values is accepted again the same; a refusal leaves the outputs alone
 * and says why in printable ASCII.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "fuzz/fuzz.h"

#define SMALL_CAP 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char reason[VALIDATE_REASON_MAX + 1] = "untouched"; /* the handler's size */
    char small[SMALL_CAP] = "no";
    char detail[160];
    int64_t delta = 0, small_delta = 0;
    int rc = validate_adjust_body((const char *)data, size, &delta, reason, sizeof reason, detail,
                                  sizeof detail);
    int small_rc =
        validate_adjust_body((const char *)data, size, &small_delta, small, sizeof small, NULL, 0);

    if (rc != 0) {
        FUZZ_CHECK(rc == -1 && delta == 0 && strcmp(reason, "untouched") == 0);
        FUZZ_CHECK(small_rc == -1 && small_delta == 0 && strcmp(small, "no") == 0);
        fuzz_check_detail(detail, sizeof detail);
        return 0;
    }
    size_t n = strnlen(reason, sizeof reason);
    FUZZ_CHECK(delta != 0 && delta >= -VALIDATE_DELTA_MAX && delta <= VALIDATE_DELTA_MAX);
    FUZZ_CHECK(n >= 1 && n <= VALIDATE_REASON_MAX);
    if (small_rc == 0)
        FUZZ_CHECK(small_delta == delta && strcmp(small, reason) == 0);
    else
        FUZZ_CHECK(n >= SMALL_CAP && small_delta == 0 && strcmp(small, "no") == 0);

    json_t *again = json_pack("{s:I, s:s}", "delta", (json_int_t)delta, "reason", reason);
    FUZZ_CHECK(again != NULL);
    char *text = json_dumps(again, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    char reason2[sizeof reason];
    int64_t delta2 = 0;
    FUZZ_CHECK(
        validate_adjust_body(text, strlen(text), &delta2, reason2, sizeof reason2, NULL, 0) == 0);
    FUZZ_CHECK(delta2 == delta && strcmp(reason2, reason) == 0);
    free(text);
    json_decref(again);
    return 0;
}
