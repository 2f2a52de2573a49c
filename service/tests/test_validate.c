/* validate: pure unit tests, no services needed. */
#include "core/validate.h"

#include "core/timefmt.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_QTY 1000000

static char detail[256];

/* validate_order_body on a NUL-terminated body; outputs go to the globals. */
static int64_t got_uid, got_qty;
static int order(const char *body)
{
    got_uid = -7;
    got_qty = -7;
    detail[0] = '\0';
    return validate_order_body(body, strlen(body), MAX_QTY, &got_uid, &got_qty, detail,
                               sizeof(detail));
}

static void order_bad(const char *body, const char *detail_part)
{
    ck_assert_msg(order(body) == -1, "accepted: %s", body);
    ck_assert_int_eq(got_uid, -7); /* outputs untouched on failure */
    ck_assert_int_eq(got_qty, -7);
    ck_assert_msg(detail[0] != '\0', "no detail for: %s", body);
    if (detail_part != NULL)
        ck_assert_msg(strstr(detail, detail_part) != NULL, "body %s: detail '%s' lacks '%s'", body,
                      detail, detail_part);
    for (const char *p = detail; *p != '\0'; p++)
        ck_assert_msg(*p >= 0x20 && *p < 0x7f, "detail not printable ASCII: %s", detail);
}

/* ---- order body ---- */

START_TEST(test_order_valid)
{
    ck_assert_int_eq(order("{\"user_id\":1,\"qty\":1}"), 0);
    ck_assert_int_eq(got_uid, 1);
    ck_assert_int_eq(got_qty, 1);
    ck_assert_int_eq(order(" \n{ \"qty\" : 1000000 ,\t\"user_id\" : 9223372036854775807 }\r\n "),
                     0);
    ck_assert_int_eq(got_uid, INT64_MAX);
    ck_assert_int_eq(got_qty, MAX_QTY);
    ck_assert_int_eq(order("{\"user_id\":42,\"qty\":3}"), 0);
    ck_assert_int_eq(got_uid, 42);
    ck_assert_int_eq(got_qty, 3);
    /* the buyer comes from the token: user_id is optional, 0 when absent */
    ck_assert_int_eq(order("{\"qty\":2}"), 0);
    ck_assert_int_eq(got_uid, 0);
    ck_assert_int_eq(got_qty, 2);
}
END_TEST

START_TEST(test_order_integer_strictness)
{
    const char *msg = "qty must be an integer between 1 and 1000000";

    order_bad("{\"user_id\":1,\"qty\":1.0}", msg);
    order_bad("{\"user_id\":1,\"qty\":1e3}", msg);
    order_bad("{\"user_id\":1,\"qty\":1E0}", msg);
    order_bad("{\"user_id\":1,\"qty\":\"1\"}", msg);
    order_bad("{\"user_id\":1,\"qty\":true}", msg);
    order_bad("{\"user_id\":1,\"qty\":false}", msg);
    order_bad("{\"user_id\":1,\"qty\":null}", msg);
    order_bad("{\"user_id\":1,\"qty\":[1]}", msg);
    order_bad("{\"user_id\":1,\"qty\":{\"n\":1}}", msg);
    order_bad("{\"user_id\":1,\"qty\":-0}", msg);
    order_bad("{\"user_id\":1,\"qty\":-0.0}", msg);
    order_bad("{\"user_id\":\"1\",\"qty\":1}", "user_id must be an integer >= 1");
    order_bad("{\"user_id\":1.5,\"qty\":1}", "user_id");
    /* not JSON at all */
    order_bad("{\"user_id\":1,\"qty\":01}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":+1}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":0x1}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":NaN}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":Infinity}", "invalid JSON");
}
END_TEST

START_TEST(test_order_ranges)
{
    order_bad("{\"user_id\":1,\"qty\":0}", "qty must be an integer between 1 and 1000000");
    order_bad("{\"user_id\":1,\"qty\":-1}", "qty");
    order_bad("{\"user_id\":1,\"qty\":1000001}", "qty");
    order_bad("{\"user_id\":0,\"qty\":1}", "user_id must be an integer >= 1");
    order_bad("{\"user_id\":-1,\"qty\":1}", "user_id");
    order_bad("{\"user_id\":-9223372036854775808,\"qty\":1}", "user_id");
    /* INT64_MAX + 1 and beyond do not fit: jansson refuses them */
    order_bad("{\"user_id\":9223372036854775808,\"qty\":1}", "invalid JSON");
    order_bad("{\"user_id\":99999999999999999999999999999999,\"qty\":1}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":18446744073709551617}", "invalid JSON");
}
END_TEST

START_TEST(test_order_max_qty_parameter)
{
    int64_t u = -7, q = -7;
    const char *b = "{\"user_id\":5,\"qty\":10}";

    ck_assert_int_eq(validate_order_body(b, strlen(b), 10, &u, &q, detail, sizeof(detail)), 0);
    ck_assert_int_eq(q, 10);
    ck_assert_int_eq(validate_order_body(b, strlen(b), 9, &u, &q, detail, sizeof(detail)), -1);
    ck_assert_str_eq(detail, "qty must be an integer between 1 and 9");
    ck_assert_int_eq(validate_order_body(b, strlen(b), 0, &u, &q, detail, sizeof(detail)), -1);
    /* detail may be NULL */
    ck_assert_int_eq(validate_order_body(b, strlen(b), 9, &u, &q, NULL, 0), -1);
}
END_TEST

START_TEST(test_order_shape)
{
    order_bad("", "empty");
    order_bad("   ", "invalid JSON");
    order_bad("{}", "qty is required");
    order_bad("{\"user_id\":1}", "qty is required");
    order_bad("[{\"user_id\":1,\"qty\":1}]", "JSON object");
    order_bad("1", "invalid JSON");
    order_bad("\"x\"", "invalid JSON");
    order_bad("null", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":1,\"price\":0}", "unknown field \"price\"");
    order_bad("{\"user_id\":1,\"qty\":1,\"User_id\":1}", "unknown field");
    order_bad("{\"user_id\":1,\"qty\":1,\"meta\":{\"qty\":5}}", "unknown field \"meta\"");
    order_bad("{\"user_id\":1,\"qty\":1,\"qty\":2}", "duplicate");
    order_bad("{\"user_id\":1,\"user_id\":1,\"qty\":1}", "duplicate");
    order_bad("{\"user_id\":1,\"qty\":1}x", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":1}{}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":1},", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":1,}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":1", "invalid JSON");
    order_bad("{'user_id':1,'qty':1}", "invalid JSON");
    order_bad("\xEF\xBB\xBF{\"user_id\":1,\"qty\":1}", "invalid JSON"); /* BOM */
    order_bad("{\"user_id\":1,\"qty\":1,\"a\\u0000\":1}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":1,\"\xff\":1}", "invalid JSON");
    order_bad("{\"user_id\":1,\"qty\":1} /* c */", "invalid JSON");
}
END_TEST

START_TEST(test_order_length_is_respected)
{
    /* the buffer is not NUL-terminated where len ends */
    const char buf[] = "{\"user_id\":7,\"qty\":2}garbage";
    const char with_nul[] = "{\"user_id\":7,\"qty\":2}\0{}";
    int64_t u = 0, q = 0;

    ck_assert_int_eq(validate_order_body(buf, 21, MAX_QTY, &u, &q, detail, sizeof(detail)), 0);
    ck_assert_int_eq(u, 7);
    ck_assert_int_eq(q, 2);
    ck_assert_int_eq(validate_order_body(buf, 20, MAX_QTY, &u, &q, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_order_body(with_nul, sizeof(with_nul) - 1, MAX_QTY, &u, &q, detail,
                                         sizeof(detail)),
                     -1);
    ck_assert_int_eq(validate_order_body(NULL, 0, MAX_QTY, &u, &q, detail, sizeof(detail)), -1);
}
END_TEST

START_TEST(test_order_huge_and_deep)
{
    size_t n = 100000;
    char *deep = malloc(2 * n + 64);
    char *big = malloc(n + 64);
    size_t i;

    ck_assert_ptr_nonnull(deep);
    ck_assert_ptr_nonnull(big);
    /* deep nesting is refused by jansson's depth limit, not by the stack */
    strcpy(deep, "{\"user_id\":1,\"qty\":");
    i = strlen(deep);
    for (size_t k = 0; k < n / 2; k++)
        deep[i++] = '[';
    for (size_t k = 0; k < n / 2; k++)
        deep[i++] = ']';
    deep[i++] = '}';
    deep[i] = '\0';
    ck_assert_int_eq(order(deep), -1);
    /* a number with 100000 digits */
    strcpy(big, "{\"user_id\":");
    i = strlen(big);
    for (size_t k = 0; k < n; k++)
        big[i++] = '9';
    strcpy(big + i, ",\"qty\":1}");
    ck_assert_int_eq(order(big), -1);
    ck_assert_msg(strlen(detail) < sizeof(detail), "detail overflow");
    free(deep);
    free(big);
}
END_TEST

START_TEST(test_detail_truncates_safely)
{
    char small[8];
    int64_t u, q;
    const char *b = "{\"user_id\":1,\"qty\":0}";

    memset(small, 'x', sizeof(small));
    ck_assert_int_eq(validate_order_body(b, strlen(b), MAX_QTY, &u, &q, small, sizeof(small)), -1);
    ck_assert_int_eq(strlen(small), 7);
    ck_assert_int_eq(validate_order_body(b, strlen(b), MAX_QTY, &u, &q, small, 0), -1);
}
END_TEST

/* ---- id segment ---- */

static int id_of(const char *s, int64_t *out)
{
    *out = -7;
    return validate_id_segment(s, strlen(s), out);
}

START_TEST(test_id_segment)
{
    int64_t v;
    static const char *const bad[] = {"",
                                      "0",
                                      "00",
                                      "01",
                                      "-1",
                                      "+1",
                                      "-0",
                                      " 1",
                                      "1 ",
                                      "1a",
                                      "a1",
                                      "1.0",
                                      "1e3",
                                      "0x10",
                                      "9223372036854775808",
                                      "9999999999999999999",
                                      "10000000000000000000",
                                      "18446744073709551615",
                                      "18446744073709551616",
                                      "99999999999999999999999999",
                                      "%31",
                                      "\xd9\xa1", /* ARABIC-INDIC DIGIT ONE */
                                      NULL};

    ck_assert_int_eq(id_of("1", &v), 0);
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(id_of("42", &v), 0);
    ck_assert_int_eq(v, 42);
    ck_assert_int_eq(id_of("1000000000000000000", &v), 0);
    ck_assert_int_eq(v, 1000000000000000000LL);
    ck_assert_int_eq(id_of("9223372036854775807", &v), 0);
    ck_assert_int_eq(v, INT64_MAX);
    ck_assert_int_eq(id_of("9223372036854775806", &v), 0);
    ck_assert_int_eq(v, INT64_MAX - 1);
    for (int i = 0; bad[i] != NULL; i++) {
        ck_assert_msg(id_of(bad[i], &v) == -1, "accepted id '%s'", bad[i]);
        ck_assert_int_eq(v, -7);
    }
    /* exactly len bytes are looked at */
    ck_assert_int_eq(validate_id_segment("123/orders", 3, &v), 0);
    ck_assert_int_eq(v, 123);
    ck_assert_int_eq(validate_id_segment("123/orders", 4, &v), -1);
    ck_assert_int_eq(validate_id_segment("1\0"
                                         "2",
                                         3, &v),
                     -1);
    ck_assert_int_eq(validate_id_segment(NULL, 3, &v), -1);
}
END_TEST

/* ---- Idempotency-Key ---- */

START_TEST(test_idempotency_key)
{
    char key[80];

    ck_assert_int_eq(validate_idempotency_key("abc", 64, detail, sizeof(detail)), 0);
    ck_assert_int_eq(validate_idempotency_key("a", 1, detail, sizeof(detail)), 0);
    ck_assert_int_eq(validate_idempotency_key("550e8400-e29b-41d4-a716-446655440000", 64, detail,
                                              sizeof(detail)),
                     0);
    /* every printable byte from '!' to '~' */
    for (int c = 0x21, i = 0; c <= 0x7e; c++, i++) {
        key[i % 60] = (char)c;
        key[i % 60 + 1] = '\0';
        ck_assert_msg(validate_idempotency_key(key, 64, detail, sizeof(detail)) == 0,
                      "refused byte 0x%02x", c);
    }
    memset(key, 'k', 64);
    key[64] = '\0';
    ck_assert_int_eq(validate_idempotency_key(key, 64, detail, sizeof(detail)), 0);
    key[64] = 'k';
    key[65] = '\0';
    ck_assert_int_eq(validate_idempotency_key(key, 64, detail, sizeof(detail)), -1);
    ck_assert_str_eq(detail, "Idempotency-Key must be 1 to 64 characters");

    ck_assert_int_eq(validate_idempotency_key("", 64, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_idempotency_key(NULL, 64, detail, sizeof(detail)), -1);
    ck_assert_str_eq(detail, "Idempotency-Key is required");
    ck_assert_int_eq(validate_idempotency_key("a b", 64, detail, sizeof(detail)), -1);
    ck_assert_msg(strstr(detail, "printable ASCII") != NULL, "%s", detail);
    ck_assert_int_eq(validate_idempotency_key(" ab", 64, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_idempotency_key("ab ", 64, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_idempotency_key("a\tb", 64, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_idempotency_key("a\r\nb", 64, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_idempotency_key("a\x7f", 64, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_idempotency_key("caf\xc3\xa9", 64, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_idempotency_key("abc", 0, detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_idempotency_key("abc", 64, NULL, 0), 0);
}
END_TEST

/* ---- Content-Type ---- */

START_TEST(test_json_content_type)
{
    static const char *const good[] = {"application/json",
                                       "Application/JSON",
                                       "APPLICATION/JSON",
                                       "application/json; charset=utf-8",
                                       "application/json;charset=UTF-8",
                                       "application/json ; charset=utf-8",
                                       "application/json;\tcharset=Utf-8",
                                       "application/json; charset=\"utf-8\"",
                                       "application/json; CHARSET=utf-8",
                                       "  application/json  ",
                                       "application/json;",
                                       "application/json; ;charset=utf-8",
                                       "application/json; foo=bar",
                                       "application/json; foo=\"a b;c\\\"d\"; charset=utf-8",
                                       NULL};
    static const char *const bad[] = {"",
                                      " ",
                                      "application",
                                      "application/",
                                      "application/jso",
                                      "application/jsonx",
                                      "application/json-patch+json",
                                      "application/json+ld",
                                      "application/json x",
                                      "application/json charset=utf-8",
                                      "application/json, text/plain",
                                      "text/json",
                                      "text/plain",
                                      "application/xml",
                                      "application/x-www-form-urlencoded",
                                      "multipart/form-data; boundary=x",
                                      "application/json; charset=latin1",
                                      "application/json; charset=utf-16",
                                      "application/json; charset=utf8",
                                      "application/json; charset=\"utf-8",
                                      "application/json; charset=",
                                      "application/json; charset",
                                      "application/json; =utf-8",
                                      "application/json; charset = utf-8",
                                      "application/json; charset=utf-8 x",
                                      "application/json; a=\"\x01\"",
                                      "application/json\r\nX-Evil: 1",
                                      "application/json; charset=utf-8-but-longer-than-buffer",
                                      NULL};

    for (int i = 0; good[i] != NULL; i++)
        ck_assert_msg(validate_json_content_type(good[i]) == 0, "refused '%s'", good[i]);
    for (int i = 0; bad[i] != NULL; i++)
        ck_assert_msg(validate_json_content_type(bad[i]) == -1, "accepted '%s'", bad[i]);
    ck_assert_int_eq(validate_json_content_type(NULL), -1);
}
END_TEST

/* ---- RFC 3339 ---- */

static void ts_ok(const char *s, int64_t want)
{
    int64_t got = -12345;

    ck_assert_msg(validate_rfc3339_ms(s, &got) == 0, "refused '%s'", s);
    ck_assert_msg(got == want, "'%s': got %lld, want %lld", s, (long long)got, (long long)want);
}

START_TEST(test_rfc3339_values)
{
    ts_ok("1970-01-01T00:00:00Z", 0);
    ts_ok("1970-01-01T00:00:00.001Z", 1);
    ts_ok("1969-12-31T23:59:59.999Z", -1);
    ts_ok("2024-02-29T12:34:56.789Z", 1709210096789LL);
    ts_ok("2024-02-29t12:34:56.789z", 1709210096789LL);
    ts_ok("2024-02-29T12:34:56.789+00:00", 1709210096789LL);
    ts_ok("2024-02-29T12:34:56.789-00:00", 1709210096789LL);
    ts_ok("2000-01-01T00:00:00+01:00", 946681200000LL);
    ts_ok("1999-12-31T23:00:00Z", 946681200000LL);
    ts_ok("2023-06-15T08:00:00-05:30", 1686835800000LL);
    ts_ok("2023-06-15T13:30:00Z", 1686835800000LL);
    ts_ok("2023-06-16T03:15:00+13:45", 1686835800000LL);
    ts_ok("2000-02-29T00:00:00Z", 951782400000LL);
    ts_ok("2038-01-19T03:14:08Z", 2147483648000LL); /* past 32-bit time_t */
    ts_ok("9999-12-31T23:59:59.999Z", 253402300799999LL);
    ts_ok("0001-01-01T00:00:00Z", -62135596800000LL);
    ts_ok("1970-01-01T00:00:00.5Z", 500);
    ts_ok("1970-01-01T00:00:00.12Z", 120);
    ts_ok("1970-01-01T00:00:00.123456789Z", 123); /* truncated, not rounded */
    ts_ok("1970-01-01T00:00:00.999999999Z", 999);
    ts_ok("1970-01-01T23:59:59+23:59", 86399000LL - (23 * 3600 + 59 * 60) * 1000LL);
}
END_TEST

START_TEST(test_rfc3339_invalid)
{
    static const char *const bad[] = {"",
                                      "2024-01-01",
                                      "2024-01-01T00:00:00",
                                      "2024-01-01T00:00Z",
                                      "2024-01-01 00:00:00Z",
                                      "2024-01-01T00:00:00 Z",
                                      "2024-01-01T00:00:00Z ",
                                      " 2024-01-01T00:00:00Z",
                                      "2024-01-01T00:00:00ZZ",
                                      "2024-01-01T00:00:00.Z",
                                      "2024-01-01T00:00:00.1234567890Z",
                                      "2024-01-01T00:00:00,5Z",
                                      "2024-02-30T00:00:00Z",
                                      "2023-02-29T00:00:00Z",
                                      "1900-02-29T00:00:00Z",
                                      "2024-04-31T00:00:00Z",
                                      "2024-13-01T00:00:00Z",
                                      "2024-00-10T00:00:00Z",
                                      "2024-01-00T00:00:00Z",
                                      "2024-01-32T00:00:00Z",
                                      "2024-01-01T24:00:00Z",
                                      "2024-01-01T23:60:00Z",
                                      "2024-01-01T23:59:60Z",
                                      "2024-01-01T00:00:00+24:00",
                                      "2024-01-01T00:00:00+05:60",
                                      "2024-01-01T00:00:00+0530",
                                      "2024-01-01T00:00:00+05",
                                      "2024-01-01T00:00:00+5:30",
                                      "24-01-01T00:00:00Z",
                                      "202-01-01T00:00:00Z",
                                      "20240-01-01T00:00:00Z",
                                      "2024-1-01T00:00:00Z",
                                      "2024-01-1T00:00:00Z",
                                      "2024/01/01T00:00:00Z",
                                      "2024-01-01T0:00:00Z",
                                      "+2024-01-01T00:00:00Z",
                                      "-2024-01-01T00:00:00Z",
                                      "2024-01-01T00:00:00UTC",
                                      "1700000000000",
                                      "2024-01-01T00:00:00\xef\xbc\xba",
                                      NULL};
    int64_t v = -7;

    for (int i = 0; bad[i] != NULL; i++) {
        ck_assert_msg(validate_rfc3339_ms(bad[i], &v) == -1, "accepted '%s'", bad[i]);
        ck_assert_int_eq(v, -7);
    }
    ck_assert_int_eq(validate_rfc3339_ms(NULL, &v), -1);
}
END_TEST

/* s is accepted and shown (timefmt_rfc3339, as the API answers it) as want. */
static void ts_shown(const char *s, const char *want)
{
    int64_t ms = 0, again = 0;
    char shown[40];

    ck_assert_msg(validate_rfc3339_ms(s, &ms) == 0, "refused '%s'", s);
    timefmt_rfc3339(ms, shown, sizeof shown);
    ck_assert_msg(strcmp(shown, want) == 0, "'%s' shown as '%s', want '%s'", s, shown, want);
    ck_assert_msg(validate_rfc3339_ms(shown, &again) == 0 && again == ms,
                  "'%s' shown as '%s', which is not the same instant", s, shown);
}

/* Found by fuzz_sku_body and fuzz_header_values: before 1970 a fraction was
 * shown as "1012-03-01T00:00:00.-877Z", a wrong instant in no valid format. */
START_TEST(test_rfc3339_accepted_times_are_shown_as_the_same_instant)
{
    ts_shown("1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.999Z");
    ts_shown("1012-02-29t23:59:59.1234567z", "1012-02-29T23:59:59.123Z");
    ts_shown("0224-02-29T23:59:59.999999999+14:00", "0224-02-29T09:59:59.999Z");
    ts_shown("0000-01-01T00:00:00.5Z", "0000-01-01T00:00:00.500Z");
    ts_shown("0000-01-01T00:01:00+00:01", "0000-01-01T00:00:00.000Z");
    ts_shown("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z");
    ts_shown("9999-12-31T23:58:59-00:01", "9999-12-31T23:59:59.000Z");
    ts_shown("1970-01-01T00:00:00.001-00:00", "1970-01-01T00:00:00.001Z");
    ts_shown("2030-01-01T10:30:00.5+01:00", "2030-01-01T09:30:00.500Z");
}
END_TEST

/* RFC 3339 years have four digits: an offset that moves the instant out of
 * 0000..9999 in UTC makes a time the API could not show. */
START_TEST(test_rfc3339_refuses_instants_outside_years_0000_to_9999)
{
    int64_t v = -7;

    ck_assert_int_eq(validate_rfc3339_ms("0000-01-01T00:00:00+00:01", &v), -1);
    ck_assert_int_eq(validate_rfc3339_ms("0000-01-01T23:58:59.999+23:59", &v), -1);
    ck_assert_int_eq(validate_rfc3339_ms("9999-12-31T23:59:00-00:01", &v), -1);
    ck_assert_int_eq(validate_rfc3339_ms("9999-12-31T00:01:00-23:59", &v), -1);
    ck_assert_int_eq(v, -7);
}
END_TEST

/* ---- SKU body ---- */

static struct validate_sku sku;

static int sku_body(const char *body)
{
    memset(&sku, 0x5a, sizeof(sku));
    detail[0] = '\0';
    return validate_sku_body(body, strlen(body), &sku, detail, sizeof(detail));
}

static void sku_bad(const char *body, const char *detail_part)
{
    ck_assert_msg(sku_body(body) == -1, "accepted: %s", body);
    ck_assert_int_eq(sku.stock, 0x5a5a5a5a5a5a5a5aLL); /* untouched */
    if (detail_part != NULL)
        ck_assert_msg(strstr(detail, detail_part) != NULL, "body %s: detail '%s' lacks '%s'", body,
                      detail, detail_part);
}

START_TEST(test_sku_valid)
{
    ck_assert_int_eq(sku_body("{\"name\":\"Phone\",\"stock\":10,\"per_user_limit\":2}"), 0);
    ck_assert_int_eq(sku.has_id, 0);
    ck_assert_str_eq(sku.name, "Phone");
    ck_assert_int_eq(sku.stock, 10);
    ck_assert_int_eq(sku.per_user_limit, 2);
    ck_assert_int_eq(sku.has_starts, 0);
    ck_assert_int_eq(sku.has_ends, 0);

    ck_assert_int_eq(sku_body("{\"id\":9223372036854775807,\"name\":\"T\\u00e9l\\u00e9phone "
                              "\xf0\x9f\x93\xb1\",\"stock\":1000000000000,"
                              "\"per_user_limit\":1000000,"
                              "\"sale_starts_at\":\"2030-01-01T10:00:00+02:00\","
                              "\"sale_ends_at\":\"2030-01-01T08:00:00.001Z\"}"),
                     0);
    ck_assert_int_eq(sku.has_id, 1);
    ck_assert_int_eq(sku.id, INT64_MAX);
    ck_assert_str_eq(sku.name, "T\xc3\xa9l\xc3\xa9phone \xf0\x9f\x93\xb1");
    ck_assert_int_eq(sku.stock, 1000000000000LL);
    ck_assert_int_eq(sku.per_user_limit, 1000000);
    ck_assert_int_eq(sku.has_starts, 1);
    ck_assert_int_eq(sku.starts_ms, 1893484800000LL);
    ck_assert_int_eq(sku.has_ends, 1);
    ck_assert_int_eq(sku.ends_ms, 1893484800001LL);

    ck_assert_int_eq(sku_body("{\"name\":\"x\",\"stock\":0,\"per_user_limit\":1,"
                              "\"sale_starts_at\":null,\"sale_ends_at\":\"2030-01-01T00:00:00Z\"}"),
                     0);
    ck_assert_int_eq(sku.stock, 0);
    ck_assert_int_eq(sku.has_starts, 0);
    ck_assert_int_eq(sku.has_ends, 1);
    ck_assert_int_eq(sku.ends_ms, 1893456000000LL);
    ck_assert_int_eq(sku_body("{\"name\":\"x\",\"stock\":0,\"per_user_limit\":1,"
                              "\"sale_starts_at\":\"2030-01-01T00:00:00Z\",\"sale_ends_at\":null}"),
                     0);
    ck_assert_int_eq(sku.has_starts, 1);
    ck_assert_int_eq(sku.has_ends, 0);
}
END_TEST

START_TEST(test_sku_buckets)
{
    ck_assert_int_eq(sku_body("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1}"), 0);
    ck_assert_int_eq(sku.buckets, 1); /* absent: an ordinary SKU */
    ck_assert_int_eq(sku_body("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"buckets\":64}"),
                     0);
    ck_assert_int_eq(sku.buckets, 64);
    ck_assert_int_eq(sku_body("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"buckets\":1}"),
                     0);
    ck_assert_int_eq(sku.buckets, 1);
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"buckets\":0}", "buckets");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"buckets\":65}", "buckets");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"buckets\":\"2\"}", "buckets");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"buckets\":2.5}", "buckets");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"buckets\":null}", "buckets");
}
END_TEST

START_TEST(test_sku_name_rules)
{
    char body[1200];
    char name[700];

    /* 200 one-byte characters, then 201 */
    memset(name, 'n', 200);
    name[200] = '\0';
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"stock\":1,\"per_user_limit\":1}", name);
    ck_assert_int_eq(sku_body(body), 0);
    ck_assert_int_eq(strlen(sku.name), 200);
    name[200] = 'n';
    name[201] = '\0';
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"stock\":1,\"per_user_limit\":1}", name);
    sku_bad(body, "name must be 1 to 200 bytes long");
    /* 100 two-byte characters are 200 bytes; 67 three-byte ones are 201 */
    name[0] = '\0';
    for (int i = 0; i < 100; i++)
        strcat(name, "\xc3\xa9");
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"stock\":1,\"per_user_limit\":1}", name);
    ck_assert_int_eq(sku_body(body), 0);
    name[0] = '\0';
    for (int i = 0; i < 67; i++)
        strcat(name, "\xe2\x82\xac");
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"stock\":1,\"per_user_limit\":1}", name);
    sku_bad(body, "200 bytes");

    sku_bad("{\"name\":\"\",\"stock\":1,\"per_user_limit\":1}", "name must be 1 to 200");
    sku_bad("{\"name\":\"a\\nb\",\"stock\":1,\"per_user_limit\":1}", "control characters");
    sku_bad("{\"name\":\"a\\tb\",\"stock\":1,\"per_user_limit\":1}", "control characters");
    sku_bad("{\"name\":\"a\\u001bb\",\"stock\":1,\"per_user_limit\":1}", "control characters");
    sku_bad("{\"name\":\"a\\u007fb\",\"stock\":1,\"per_user_limit\":1}", "control characters");
    sku_bad("{\"name\":\"a\\u0085b\",\"stock\":1,\"per_user_limit\":1}", "control characters");
    sku_bad("{\"name\":\"a\\u009fb\",\"stock\":1,\"per_user_limit\":1}", "control characters");
    sku_bad("{\"name\":\"a\\u0000b\",\"stock\":1,\"per_user_limit\":1}", "invalid JSON");
    sku_bad("{\"name\":\"a\xffz\",\"stock\":1,\"per_user_limit\":1}", "invalid JSON");
    sku_bad("{\"name\":\"\\ud800\",\"stock\":1,\"per_user_limit\":1}", "invalid JSON");
    sku_bad("{\"name\":\"\xc0\xaf\",\"stock\":1,\"per_user_limit\":1}", "invalid JSON");
    sku_bad("{\"name\":5,\"stock\":1,\"per_user_limit\":1}", "name must be a string");
    sku_bad("{\"name\":null,\"stock\":1,\"per_user_limit\":1}", "name must be a string");
    sku_bad("{\"name\":[\"a\"],\"stock\":1,\"per_user_limit\":1}", "name must be a string");
    sku_bad("{\"stock\":1,\"per_user_limit\":1}", "name is required");
    /* U+00A0 (just above C1) and U+2028 are not control characters */
    ck_assert_int_eq(sku_body("{\"name\":\"a\\u00a0b\\u2028\",\"stock\":1,\"per_user_limit\":1}"),
                     0);
}
END_TEST

START_TEST(test_sku_numbers)
{
    sku_bad("{\"name\":\"x\",\"stock\":1000000000001,\"per_user_limit\":1}",
            "stock must be an integer between 0 and 1000000000000");
    sku_bad("{\"name\":\"x\",\"stock\":-1,\"per_user_limit\":1}", "stock");
    sku_bad("{\"name\":\"x\",\"stock\":1.0,\"per_user_limit\":1}", "stock");
    sku_bad("{\"name\":\"x\",\"stock\":\"5\",\"per_user_limit\":1}", "stock");
    sku_bad("{\"name\":\"x\",\"per_user_limit\":1}", "stock is required");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":0}",
            "per_user_limit must be an integer between 1 and 1000000");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1000001}", "per_user_limit");
    sku_bad("{\"name\":\"x\",\"stock\":1}", "per_user_limit is required");
    sku_bad("{\"id\":0,\"name\":\"x\",\"stock\":1,\"per_user_limit\":1}",
            "id must be an integer >= 1");
    sku_bad("{\"id\":null,\"name\":\"x\",\"stock\":1,\"per_user_limit\":1}", "id");
    sku_bad("{\"id\":\"7\",\"name\":\"x\",\"stock\":1,\"per_user_limit\":1}", "id");
    sku_bad("{\"id\":9223372036854775808,\"name\":\"x\",\"stock\":1,\"per_user_limit\":1}",
            "invalid JSON");
}
END_TEST

START_TEST(test_sku_times)
{
    sku_bad(
        "{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,"
        "\"sale_starts_at\":\"2030-01-01T10:00:00Z\",\"sale_ends_at\":\"2030-01-01T09:00:00Z\"}",
        "sale_ends_at must be after sale_starts_at");
    /* the same instant written in two offsets is not "after" */
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,"
            "\"sale_starts_at\":\"2030-01-01T10:00:00+01:00\","
            "\"sale_ends_at\":\"2030-01-01T09:00:00Z\"}",
            "after");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,"
            "\"sale_starts_at\":\"2030-02-30T10:00:00Z\"}",
            "sale_starts_at must be null or an RFC 3339 timestamp");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"sale_ends_at\":1893456000000}",
            "sale_ends_at must be null or an RFC 3339");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"sale_ends_at\":\"\"}",
            "sale_ends_at");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"sale_ends_at\":false}",
            "sale_ends_at");
}
END_TEST

START_TEST(test_sku_shape)
{
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1,\"price\":5}",
            "unknown field \"price\"");
    sku_bad("{\"name\":\"x\",\"name\":\"y\",\"stock\":1,\"per_user_limit\":1}", "duplicate");
    sku_bad("[]", "JSON object");
    sku_bad("", "empty");
    sku_bad("{\"name\":\"x\",\"stock\":1,\"per_user_limit\":1}\n}", "invalid JSON");
    /* an unknown key full of control bytes is echoed as printable ASCII only */
    sku_bad("{\"\\u001b[31mred\":1}", "unknown field \"?[31mred\"");
}
END_TEST

/* ---- adjustment body ---- */

static int64_t got_delta;
static char reason[VALIDATE_REASON_MAX + 1];

static int adjust(const char *body)
{
    got_delta = -7;
    strcpy(reason, "untouched");
    detail[0] = '\0';
    return validate_adjust_body(body, strlen(body), &got_delta, reason, sizeof(reason), detail,
                                sizeof(detail));
}

static void adjust_bad(const char *body, const char *detail_part)
{
    ck_assert_msg(adjust(body) == -1, "accepted: %s", body);
    ck_assert_int_eq(got_delta, -7);
    ck_assert_str_eq(reason, "untouched");
    if (detail_part != NULL)
        ck_assert_msg(strstr(detail, detail_part) != NULL, "body %s: detail '%s' lacks '%s'", body,
                      detail, detail_part);
}

START_TEST(test_adjust)
{
    char body[1200], text[600];
    int64_t d;
    char tiny[4];
    const char *b = "{\"delta\":1,\"reason\":\"restock\"}";

    ck_assert_int_eq(adjust("{\"delta\":5,\"reason\":\"restock\"}"), 0);
    ck_assert_int_eq(got_delta, 5);
    ck_assert_str_eq(reason, "restock");
    ck_assert_int_eq(adjust("{\"reason\":\"damaged\",\"delta\":-3}"), 0);
    ck_assert_int_eq(got_delta, -3);
    ck_assert_int_eq(adjust("{\"delta\":1000000000000,\"reason\":\"r\"}"), 0);
    ck_assert_int_eq(got_delta, 1000000000000LL);
    ck_assert_int_eq(adjust("{\"delta\":-1000000000000,\"reason\":\"r\"}"), 0);
    ck_assert_int_eq(got_delta, -1000000000000LL);

    adjust_bad("{\"delta\":0,\"reason\":\"r\"}", "delta must not be 0");
    adjust_bad("{\"delta\":-0,\"reason\":\"r\"}", "delta must not be 0");
    adjust_bad("{\"delta\":1000000000001,\"reason\":\"r\"}",
               "delta must be an integer between -1000000000000 and 1000000000000");
    adjust_bad("{\"delta\":-1000000000001,\"reason\":\"r\"}", "delta");
    adjust_bad("{\"delta\":-9223372036854775808,\"reason\":\"r\"}", "delta");
    adjust_bad("{\"delta\":9223372036854775807,\"reason\":\"r\"}", "delta");
    adjust_bad("{\"delta\":1.5,\"reason\":\"r\"}", "delta");
    adjust_bad("{\"delta\":\"5\",\"reason\":\"r\"}", "delta");
    adjust_bad("{\"delta\":true,\"reason\":\"r\"}", "delta");
    adjust_bad("{\"reason\":\"r\"}", "delta is required");
    adjust_bad("{\"delta\":1}", "reason is required");
    adjust_bad("{\"delta\":1,\"reason\":\"\"}", "reason must be 1 to 500 bytes");
    adjust_bad("{\"delta\":1,\"reason\":null}", "reason must be a string");
    adjust_bad("{\"delta\":1,\"reason\":\"a\\r\\nb\"}", "control characters");
    adjust_bad("{\"delta\":1,\"reason\":\"r\",\"sku_id\":1}", "unknown field \"sku_id\"");
    adjust_bad("{\"delta\":1,\"delta\":2,\"reason\":\"r\"}", "duplicate");
    adjust_bad("{\"delta\":1,\"reason\":\"r\"} x", "invalid JSON");

    memset(text, 'r', 500);
    text[500] = '\0';
    snprintf(body, sizeof(body), "{\"delta\":1,\"reason\":\"%s\"}", text);
    ck_assert_int_eq(adjust(body), 0);
    ck_assert_int_eq(strlen(reason), 500);
    text[500] = 'r';
    text[501] = '\0';
    snprintf(body, sizeof(body), "{\"delta\":1,\"reason\":\"%s\"}", text);
    adjust_bad(body, "reason must be 1 to 500 bytes");

    /* a caller buffer too small refuses instead of truncating */
    ck_assert_int_eq(
        validate_adjust_body(b, strlen(b), &d, tiny, sizeof(tiny), detail, sizeof(detail)), -1);
    ck_assert_int_eq(validate_adjust_body(b, strlen(b), &d, NULL, 0, detail, sizeof(detail)), -1);
}
END_TEST

/* ---- bearer ---- */

START_TEST(test_bearer)
{
    const char *tok = "s3cr3t-t0ken";

    ck_assert_int_eq(validate_bearer("Bearer s3cr3t-t0ken", tok), 1);
    ck_assert_int_eq(validate_bearer("bearer s3cr3t-t0ken", tok), 1);
    ck_assert_int_eq(validate_bearer("BEARER s3cr3t-t0ken", tok), 1);
    ck_assert_int_eq(validate_bearer("Bearer   s3cr3t-t0ken", tok), 1);

    ck_assert_int_eq(validate_bearer("Bearer s3cr3t-t0kem", tok), 0);  /* last byte */
    ck_assert_int_eq(validate_bearer("Bearer t3cr3t-t0ken", tok), 0);  /* first byte */
    ck_assert_int_eq(validate_bearer("Bearer S3CR3T-T0KEN", tok), 0);  /* token is case-sensitive */
    ck_assert_int_eq(validate_bearer("Bearer s3cr3t", tok), 0);        /* prefix */
    ck_assert_int_eq(validate_bearer("Bearer s3cr3t-t0ken-", tok), 0); /* longer */
    ck_assert_int_eq(validate_bearer("Bearer s3cr3t-t0kenX", tok), 0);
    ck_assert_int_eq(validate_bearer("Bearer s3cr3t-t0ken ", tok), 0); /* trailing space */
    ck_assert_int_eq(validate_bearer("Bearer s3cr3t-t0ke", tok), 0);   /* one shorter */
    ck_assert_int_eq(validate_bearer("Bearer ", tok), 0);
    ck_assert_int_eq(validate_bearer("Bearer", tok), 0);
    ck_assert_int_eq(validate_bearer("Bearers3cr3t-t0ken", tok), 0);
    ck_assert_int_eq(validate_bearer("Bearer\ts3cr3t-t0ken", tok), 0);
    ck_assert_int_eq(validate_bearer("Basic s3cr3t-t0ken", tok), 0);
    ck_assert_int_eq(validate_bearer("s3cr3t-t0ken", tok), 0);
    ck_assert_int_eq(validate_bearer(" Bearer s3cr3t-t0ken", tok), 0);
    ck_assert_int_eq(validate_bearer("", tok), 0);
    ck_assert_int_eq(validate_bearer(NULL, tok), 0);
    ck_assert_int_eq(validate_bearer("Bearer s3cr3t-t0ken", NULL), 0);
    /* an empty expected token disables access instead of matching an empty one */
    ck_assert_int_eq(validate_bearer("Bearer ", ""), 0);
    ck_assert_int_eq(validate_bearer("Bearer x", ""), 0);
    ck_assert_int_eq(validate_bearer("Bearer ", " "), 0);
}
END_TEST

START_TEST(test_page_query_takes_after_and_limit_in_range)
{
    int64_t after = -1, limit = -1;
    char d[160];
    ck_assert_int_eq(validate_page_query(NULL, 50, 100, &after, &limit, d, sizeof d), 0);
    ck_assert_int_eq(after, 0);
    ck_assert_int_eq(limit, 50);
    ck_assert_int_eq(validate_page_query("", 50, 100, &after, &limit, d, sizeof d), 0);
    ck_assert_int_eq(limit, 50);
    ck_assert_int_eq(
        validate_page_query("limit=100&after=42", 50, 100, &after, &limit, d, sizeof d), 0);
    ck_assert_int_eq(after, 42);
    ck_assert_int_eq(limit, 100);
    ck_assert_int_eq(validate_page_query("after=0", 50, 100, &after, &limit, d, sizeof d), 0);
    ck_assert_int_eq(after, 0);
    ck_assert_int_eq(
        validate_page_query("after=9223372036854775807", 50, 100, &after, &limit, d, sizeof d), 0);
    ck_assert(after == INT64_MAX);
}
END_TEST

START_TEST(test_page_query_refuses_anything_else)
{
    static const char *const bad[] = {
        "limit=0",         "limit=101", "limit=-1",
        "limit=",          "limit",     "after=-1",
        "after=01",        "after=x",   "after=1&after=2",
        "limit=1&limit=1", "page=2",    "after=9223372036854775808",
        "limit=1e2",       "&",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t after, limit;
        char d[160] = "";
        ck_assert_msg(validate_page_query(bad[i], 50, 100, &after, &limit, d, sizeof d) != 0,
                      "accepted \"%s\"", bad[i]);
        ck_assert_msg(d[0], "no reason for \"%s\"", bad[i]);
    }
}
END_TEST

static Suite *validate_suite(void)
{
    Suite *s = suite_create("validate");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_order_valid);
    tcase_add_test(tc, test_order_integer_strictness);
    tcase_add_test(tc, test_order_ranges);
    tcase_add_test(tc, test_order_max_qty_parameter);
    tcase_add_test(tc, test_order_shape);
    tcase_add_test(tc, test_order_length_is_respected);
    tcase_add_test(tc, test_order_huge_and_deep);
    tcase_add_test(tc, test_detail_truncates_safely);
    tcase_add_test(tc, test_id_segment);
    tcase_add_test(tc, test_idempotency_key);
    tcase_add_test(tc, test_json_content_type);
    tcase_add_test(tc, test_rfc3339_values);
    tcase_add_test(tc, test_rfc3339_invalid);
    tcase_add_test(tc, test_rfc3339_accepted_times_are_shown_as_the_same_instant);
    tcase_add_test(tc, test_rfc3339_refuses_instants_outside_years_0000_to_9999);
    tcase_add_test(tc, test_sku_valid);
    tcase_add_test(tc, test_sku_buckets);
    tcase_add_test(tc, test_sku_name_rules);
    tcase_add_test(tc, test_sku_numbers);
    tcase_add_test(tc, test_sku_times);
    tcase_add_test(tc, test_sku_shape);
    tcase_add_test(tc, test_adjust);
    tcase_add_test(tc, test_bearer);
    tcase_add_test(tc, test_page_query_takes_after_and_limit_in_range);
    tcase_add_test(tc, test_page_query_refuses_anything_else);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(validate_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
