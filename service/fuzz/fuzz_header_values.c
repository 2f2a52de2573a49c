/*
 * Fuzz target: the header, path and time values a request carries, each
 * checked against a plain restatement of its rule in validate.h.  The first
 * input byte picks the function, the rest is the value:
 *
 *   'k' validate_idempotency_key  accepted exactly when 1..max bytes of 0x21..0x7e
 *   'c' validate_json_content_type accepted only as application/json (any case,
 *                                 after optional whitespace), then ';' or the end
 *   'i' validate_id_segment        accepted exactly when the decimal form of a
 *                                 value 1..INT64_MAX; over the exact bytes
 *   't' validate_rfc3339_ms        an accepted time, shown by timefmt_rfc3339 as
 *                                 the API shows it, parses back to the same ms
 *   'b' validate_bearer            "header NUL token": a match means the token
 *                                 after "Bearer " and its spaces is the expected
 *                                 one; "Bearer <token>" always matches
 * Other first bytes run nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/timefmt.h"
#include "core/validate.h"
#include "fuzz/fuzz.h"

/* Bounds of max_idempotency_key_bytes in cfg.c, and its default. */
static const size_t idem_max_lens[] = {8, 128, 200};

static void idempotency_key(const char *s)
{
    size_t n = strlen(s);
    int printable = 1;

    for (size_t i = 0; i < n; i++)
        printable &= s[i] >= 0x21 && s[i] <= 0x7e;
    for (size_t i = 0; i < sizeof idem_max_lens / sizeof idem_max_lens[0]; i++) {
        char detail[160];
        int ok = n >= 1 && n <= idem_max_lens[i] && printable;
        int rc = validate_idempotency_key(s, idem_max_lens[i], detail, sizeof detail);

        FUZZ_CHECK(rc == (ok ? 0 : -1));
        if (rc != 0)
            fuzz_check_detail(detail, sizeof detail);
    }
}

static void content_type(const char *s)
{
    if (validate_json_content_type(s) != 0)
        return;
    s += strspn(s, " \t");
    FUZZ_CHECK(strncasecmp(s, "application/json", 16) == 0);
    s += 16;
    s += strspn(s, " \t");
    FUZZ_CHECK(*s == '\0' || *s == ';');
}

/* data/size are the exact bytes; s is the same as a string. */
static void id_segment(const uint8_t *data, size_t size, const char *s)
{
    char *copy = malloc(size ? size : 1); /* exactly sized: an over-read is reported */
    int64_t v = -1;
    char shown[24];

    FUZZ_CHECK(copy != NULL);
    if (size > 0)
        memcpy(copy, data, size);
    int rc = validate_id_segment(copy, size, &v);
    if (rc == 0) {
        FUZZ_CHECK(v >= 1);
        snprintf(shown, sizeof shown, "%" PRId64, v);
        FUZZ_CHECK(strlen(shown) == size && memcmp(shown, copy, size) == 0);
    } else {
        /* refused: strtoll finds no value 1..INT64_MAX whose decimal form it is */
        char *end;
        errno = 0;
        long long ref = strtoll(s, &end, 10);
        FUZZ_CHECK(rc == -1 && v == -1);
        if (strlen(s) == size && *end == '\0' && errno == 0 && ref >= 1) {
            snprintf(shown, sizeof shown, "%lld", ref);
            FUZZ_CHECK(strcmp(shown, s) != 0);
        }
    }
    free(copy);
}

static void rfc3339(const char *s)
{
    int64_t ms = 0, again = 0;
    char shown[40]; /* sku.c's and db.c's size */

    if (validate_rfc3339_ms(s, &ms) != 0)
        return;
    timefmt_rfc3339(ms, shown, sizeof shown);
    if (validate_rfc3339_ms(shown, &again) != 0 || again != ms) {
        fprintf(stderr, "\"%s\" is %" PRId64 " ms, shown as \"%s\"\n", s, ms, shown);
        FUZZ_CHECK(!"an accepted time is shown as the same instant");
    }
}

static void bearer(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    char *header = fuzz_cstr(data, nul ? (size_t)(nul - data) : size);
    char *token = nul ? fuzz_cstr(nul + 1, size - (size_t)(nul - data) - 1) : fuzz_cstr(data, 0);

    if (validate_bearer(header, token) == 1) {
        const char *given = header + 7;
        FUZZ_CHECK(strncasecmp(header, "Bearer ", 7) == 0);
        given += strspn(given, " ");
        FUZZ_CHECK(token[0] != '\0' && strcmp(given, token) == 0);
    }
    if (token[0] != '\0' && token[0] != ' ') {
        char *plain = malloc(strlen(token) + 8);
        FUZZ_CHECK(plain != NULL);
        strcpy(plain, "Bearer ");
        strcat(plain, token);
        FUZZ_CHECK(validate_bearer(plain, token) == 1);
        free(plain);
    }
    free(header);
    free(token);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *s = fuzz_cstr(data + 1, size - 1);
    switch (data[0]) {
    case 'k':
        idempotency_key(s);
        break;
    case 'c':
        content_type(s);
        break;
    case 'i':
        id_segment(data + 1, size - 1, s);
        break;
    case 't':
        rfc3339(s);
        break;
    case 'b':
        bearer(data + 1, size - 1);
        break;
    default:
        break;
    }
    free(s);
    return 0;
}
