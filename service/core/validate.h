/*
 * validate: parsing and validation of what clients send, for the HTTP
 * handlers.  Pure functions: no I/O, no globals, safe from any thread.
 *
 * Strict on purpose: a flash sale is attacked and fuzzed, and whatever is
 * accepted here is what later code has to get right.  So JSON bodies must be
 * one object (no BOM, no trailing bytes), keys may not repeat, unknown keys are
 * refused, and numbers must be JSON integers: 1.0, 1e3, "1", true and null are
 * not integers.
 *
 * Every function returns 0 when the input is valid and -1 when it is not.
 * Outputs are written only on success.  Where a function takes 'detail' and
 * 'cap', a short message fit for a 400 response is written there on failure
 * (always NUL-terminated when cap > 0; detail may be NULL).  Details are
 * printable ASCII: client bytes quoted in them are shortened and replaced.
 */
#ifndef SECKILL_VALIDATE_H
#define SECKILL_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#define VALIDATE_MUST_CHECK __attribute__((warn_unused_result))

#define VALIDATE_SKU_NAME_MAX 200          /* bytes of UTF-8 */
#define VALIDATE_STOCK_MAX 1000000000000LL /* 10^12 */
#define VALIDATE_PER_USER_LIMIT_MAX 1000000
#define VALIDATE_DELTA_MAX 1000000000000LL /* 10^12 */
#define VALIDATE_REASON_MAX 500            /* bytes of UTF-8 */
#define VALIDATE_WINDOW_MAX 2592000        /* payment window: 30 days, in seconds */
#define VALIDATE_BUCKETS_MAX 64            /* buckets of one SKU (migrations/0006_buckets.sql) */
#define VALIDATE_PAYMENT_REF_MAX 128       /* bytes of printable ASCII */

/*
 * Order body {"user_id"?: integer >= 1, "qty": integer 1..max_qty}, nothing
 * else.  The buyer is the one its token names: a user_id, when present, only
 * says whom the client believes it buys for, and *user_id is 0 without one.
 * body need not be NUL-terminated.  max_qty < 1 is a configuration error and
 * refuses every body.
 */
int validate_order_body(const char *body, size_t len, int64_t max_qty, int64_t *user_id,
                        int64_t *qty, char *detail, size_t cap) VALIDATE_MUST_CHECK;

/*
 * A numeric path segment such as the 42 of /skus/42: 1..19 ASCII digits, no
 * sign, no leading zero, no spaces, value 1..INT64_MAX.  s need not be
 * NUL-terminated; exactly len bytes are looked at.
 */
int validate_id_segment(const char *s, size_t len, int64_t *out) VALIDATE_MUST_CHECK;

/*
 * Idempotency-Key header value (NUL-terminated): 1..max_len bytes, each
 * printable ASCII 0x21..0x7e (no spaces: keys are compared byte for byte).
 * NULL is refused as missing.
 */
int validate_idempotency_key(const char *s, size_t max_len, char *detail,
                             size_t cap) VALIDATE_MUST_CHECK;

/*
 * Content-Type header value: the media type application/json (any case),
 * optionally followed by parameters as in RFC 9110 ("; charset=utf-8").  A
 * charset other than utf-8 is refused: JSON is UTF-8 (RFC 8259).  NULL is
 * refused.
 */
int validate_json_content_type(const char *header) VALIDATE_MUST_CHECK;

/* An admin "create SKU" request after validation. */
struct validate_sku {
    int has_id; /* 0: the database picks the id */
    int64_t id;
    char name[VALIDATE_SKU_NAME_MAX + 1]; /* NUL-terminated UTF-8 */
    int64_t stock;
    int64_t per_user_limit;
    int has_starts;    /* 0: absent or null */
    int64_t starts_ms; /* Unix epoch milliseconds */
    int has_ends;
    int64_t ends_ms;
    int64_t payment_window_s; /* 0: no payment step (absent) */
    int64_t buckets;          /* 1 (absent): an ordinary SKU; else its stock's buckets */
};

/*
 * Admin "create SKU" body:
 *   "id"?            integer >= 1
 *   "name"           string of 1..200 bytes, valid UTF-8, no control
 *                    characters (C0, DEL, C1)
 *   "stock"          integer 0..10^12
 *   "per_user_limit" integer 1..1000000
 *   "sale_starts_at"? RFC 3339 string or null
 *   "sale_ends_at"?   RFC 3339 string or null; after sale_starts_at when both
 *                     are given
 *   "payment_window_s"? integer 0..VALIDATE_WINDOW_MAX (absent: 0)
 *   "buckets"?       integer 1..VALIDATE_BUCKETS_MAX (absent: 1)
 * Fills *out on success.
 */
int validate_sku_body(const char *body, size_t len, struct validate_sku *out, char *detail,
                      size_t cap) VALIDATE_MUST_CHECK;

/*
 * Admin stock adjustment {"delta": integer, non-zero, |delta| <= 10^12,
 * "reason": string of 1..500 bytes, valid UTF-8, no control characters}.
 * The reason is copied to 'reason' (NUL-terminated); a reason_cap too small
 * for it refuses the body.
 */
/* Admin change of a SKU {"payment_window_s": integer 0..VALIDATE_WINDOW_MAX}. */
int validate_window_body(const char *body, size_t len, int64_t *window_s, char *detail,
                         size_t cap) VALIDATE_MUST_CHECK;

/* Payment callback {"payment_ref": 1..VALIDATE_PAYMENT_REF_MAX bytes of printable
 * ASCII}, copied NUL-terminated into ref (VALIDATE_PAYMENT_REF_MAX + 1 bytes). */
int validate_payment_body(const char *body, size_t len, char *ref, char *detail,
                          size_t cap) VALIDATE_MUST_CHECK;

int validate_adjust_body(const char *body, size_t len, int64_t *delta, char *reason,
                         size_t reason_cap, char *detail, size_t cap) VALIDATE_MUST_CHECK;

/*
 * The token of an Authorization header "Bearer <token>" (scheme in any case,
 * one or more spaces): *token points into the header, *len is its length
 * (> 0).  Returns -1 for NULL, another scheme or an empty token.
 */
int validate_bearer_token(const char *authorization_header, const char **token,
                          size_t *len) VALIDATE_MUST_CHECK;

/*
 * Authorization header check: "Bearer <token>" (scheme in any case, one or
 * more spaces) whose token equals expected_token.  The comparison takes the
 * same time whatever the content of either token (it always walks the whole
 * expected token, and a length mismatch does not end it early).  Returns 1 on
 * a match, 0 otherwise -- also when either argument is NULL or empty.
 */
int validate_bearer(const char *authorization_header,
                    const char *expected_token) VALIDATE_MUST_CHECK;

/*
 * RFC 3339 date-time to Unix epoch milliseconds:
 * YYYY-MM-DDTHH:MM:SS[.fraction](Z|+hh:mm|-hh:mm), 'T' and 'Z' in either
 * case.  The fraction has 1..9 digits and is truncated to milliseconds.
 * Leap seconds (:60) are refused: Unix time has none.  So is an instant
 * outside the years 0000..9999 in UTC (an offset can move it there), which
 * the API, showing times in UTC, could not write in RFC 3339.  s is
 * NUL-terminated and must be nothing but the timestamp.
 */
int validate_rfc3339_ms(const char *s, int64_t *out_ms) VALIDATE_MUST_CHECK;

/*
 * The paging query of an admin list ("after=10&limit=50", either or both, in
 * any order, or NULL/"" for none): *after the last id of the previous page
 * (0: from the start), *limit the page's size, 1..max_limit (default_limit
 * when absent).  Anything else (another name, a repeated one, a value that
 * is not a decimal integer in range) returns -1 with the reason in detail;
 * *after and *limit are then unspecified.
 */
int validate_page_query(const char *query, int64_t default_limit, int64_t max_limit, int64_t *after,
                        int64_t *limit, char *detail, size_t cap) VALIDATE_MUST_CHECK;

#endif
