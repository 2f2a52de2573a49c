/*
 * The strict HTTP/1.1 parser (http/request_parse.h): every ambiguity that
 * lets two readers frame a request differently is refused with its status,
 * valid requests come out whole, and feeding byte by byte changes nothing.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "http/request_parse.h"

#define MAX_HEADER 1024
#define MAX_BODY 64

struct outcome {
    enum http_parse_result r;
    int status;
    size_t used;
};

/* Feeds text in one call (step 0) or 'step' bytes at a time. */
static struct outcome feed(struct http_parser *p, const char *text, size_t len, size_t step)
{
    struct outcome o = {HTTP_PARSE_NEED_MORE, 0, 0};
    size_t off = 0;
    while (off < len && o.r == HTTP_PARSE_NEED_MORE) {
        size_t n = step && len - off > step ? step : len - off;
        size_t used = 0;
        o.r = http_parse_feed(p, text + off, n, &used);
        ck_assert_msg(used <= n, "took more than it was given");
        if (o.r == HTTP_PARSE_NEED_MORE)
            ck_assert_msg(used == n, "NEED_MORE must take every byte");
        off += used;
    }
    o.used = off;
    o.status = http_parse_error(p, NULL);
    return o;
}

/* The status 'text' is refused with, the same whole and byte by byte. */
static int refused_with(const char *text, size_t len)
{
    int status = -1;
    static const size_t steps[] = {0, 1, 2, 7};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        struct http_parser p;
        http_parse_init(&p, MAX_HEADER, MAX_BODY);
        struct outcome o = feed(&p, text, len, steps[s]);
        int got = o.r == HTTP_PARSE_ERROR ? o.status : 0;
        http_parse_free(&p);
        if (s == 0)
            status = got;
        ck_assert_msg(got == status, "step %zu gave %d, whole gave %d: %s", steps[s], got, status,
                      text);
    }
    return status;
}

#define REFUSED(lit) refused_with(lit, sizeof(lit) - 1)

START_TEST(test_duplicate_content_length_is_refused)
{
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                             "Content-Length: 5\r\n\r\nhello"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
                             "Content-Length: 40\r\n\r\nGET /admin HTTP/1.1\r\nHost: a\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 5\r\n"
                             "CONTENT-LENGTH: 5\r\n\r\nhello"),
                     400);
}
END_TEST

START_TEST(test_content_length_must_be_plain_digits)
{
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello"), 400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n"), 400);
    ck_assert_int_eq(
        REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
        400);
}
END_TEST

START_TEST(test_transfer_encoding_with_content_length_is_refused)
{
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                             "Content-Length: 3\r\n\r\n0\r\n\r\n"),
                     400);
}
END_TEST

START_TEST(test_only_a_single_chunked_coding_is_accepted)
{
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n"
                             "\r\n0\r\n\r\n"),
                     501);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked"
                             "\r\n\r\n0\r\n\r\n"),
                     501);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n"),
                     501);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
                     400);
}
END_TEST

START_TEST(test_whitespace_before_the_colon_is_refused)
{
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n"
                             "\r\n0\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n"), 400);
}
END_TEST

START_TEST(test_malformed_chunk_sizes_are_refused)
{
    static const char *const sizes[] = {"0x18", "+18", " 18", "18 ", "18;ext=1",
                                        "18\t", "",    "-1",  "g",   "000000018"};
    char req[256];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int n = snprintf(req, sizeof req,
                         "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "%s\r\n012345678901234567890123\r\n0\r\n\r\n",
                         sizes[i]);
        ck_assert_msg(refused_with(req, (size_t)n) == 400, "chunk size \"%s\" accepted", sizes[i]);
    }
    /* data longer than its size, a bare LF after it, a trailer field */
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "2\r\nabc\r\n0\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "2\nab\r\n0\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "2\r\nab\n0\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "2\r\nab\r\n0\r\nX-Trailer: 1\r\n\r\n"),
                     400);
}
END_TEST

START_TEST(test_control_characters_and_empty_names_are_refused)
{
    static const char nul_value[] = "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n";
    static const char nul_name[] = "GET / HTTP/1.1\r\nHost: a\r\nX\0A: b\r\n\r\n";
    static const char nul_target[] = "GET /a\0b HTTP/1.1\r\nHost: a\r\n\r\n";
    ck_assert_int_eq(refused_with(nul_value, sizeof nul_value - 1), 400);
    ck_assert_int_eq(refused_with(nul_name, sizeof nul_name - 1), 400);
    ck_assert_int_eq(refused_with(nul_target, sizeof nul_target - 1), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\n: empty\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x7f\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\nno colon here\r\n\r\n"), 400);
}
END_TEST

START_TEST(test_folding_bare_lf_and_bare_cr_are_refused)
{
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\nHost: a\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\n\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\rX-A: b\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n"), 400);
}
END_TEST

START_TEST(test_duplicate_credentials_and_keys_are_refused)
{
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer good\r\n"
                             "Authorization: Bearer bad\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                             "Content-Type: text/plain\r\nContent-Length: 0\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nIdempotency-Key: k1\r\n"
                             "idempotency-key: k2\r\n\r\n"),
                     400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
}
END_TEST

START_TEST(test_bad_request_lines_are_refused)
{
    static const char *const lines[] = {
        "GET  / HTTP/1.1",
        "GET /  HTTP/1.1",
        "GET http://a/ HTTP/1.1",
        "GET * HTTP/1.1",
        "GET / HTTP/1.2",
        "GET / HTTP/2.0",
        "GET / http/1.1",
        "GET /\tx HTTP/1.1",
        "GET / HTTP/1.1 ",
        "GET /",
        "GET",
        " GET / HTTP/1.1",
        "GET / HTTP/1.10",
        "CONNECT a:443 HTTP/1.1",
        "G(T / HTTP/1.1",
        "GET /a b HTTP/1.1",
    };
    char req[256];
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        int n = snprintf(req, sizeof req, "%s\r\nHost: a\r\n\r\n", lines[i]);
        ck_assert_msg(refused_with(req, (size_t)n) == 400, "request line \"%s\" accepted",
                      lines[i]);
    }
    ck_assert_int_eq(REFUSED("BREW / HTTP/1.1\r\nHost: a\r\n\r\n"), 501);
    ck_assert_int_eq(REFUSED("get / HTTP/1.1\r\nHost: a\r\n\r\n"), 501);
}
END_TEST

START_TEST(test_http11_without_host_is_refused)
{
    ck_assert_int_eq(REFUSED("GET / HTTP/1.1\r\nX-A: b\r\n\r\n"), 400);
    ck_assert_int_eq(REFUSED("GET / HTTP/1.0\r\nX-A: b\r\n\r\n"), 0); /* 1.0 needs no Host */
}
END_TEST

START_TEST(test_limits_answer_431_and_400)
{
    char req[MAX_HEADER * 2];
    int n = snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: a\r\nX-Big: %0*d\r\n\r\n",
                     MAX_HEADER, 0);
    ck_assert_int_eq(refused_with(req, (size_t)n), 431);
    size_t len = (size_t)snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 0; i <= HTTP_PARSE_MAX_HEADERS; i++)
        len += (size_t)snprintf(req + len, sizeof req - len, "X%d: 1\r\n", i);
    len += (size_t)snprintf(req + len, sizeof req - len, "\r\n");
    ck_assert_int_eq(refused_with(req, len), 431);
    n = snprintf(req, sizeof req, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n",
                 MAX_BODY + 1);
    ck_assert_int_eq(refused_with(req, (size_t)n), 400);
    /* de-chunked, the body counts the same */
    n = snprintf(req, sizeof req,
                 "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "20\r\n%032d\r\n21\r\n%033d\r\n0\r\n\r\n",
                 0, 0);
    ck_assert_int_eq(refused_with(req, (size_t)n), 400);
}
END_TEST

START_TEST(test_unknown_expectation_is_refused_with_417)
{
    ck_assert_int_eq(REFUSED("POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n"
                             "Content-Length: 0\r\n\r\n"),
                     417);
}
END_TEST

/* Parses a valid request whole and byte by byte; checks both agree and
 * leaves the whole parse in p (caller frees). */
static void parse_valid(struct http_parser *p, const char *text, size_t len, size_t *used)
{
    struct http_parser q;
    http_parse_init(&q, MAX_HEADER, MAX_BODY);
    struct outcome one = feed(&q, text, len, 1);
    ck_assert_msg(one.r == HTTP_PARSE_DONE, "byte by byte: %d (%d) for %s", one.r, one.status,
                  text);
    http_parse_init(p, MAX_HEADER, MAX_BODY);
    struct outcome all = feed(p, text, len, 0);
    ck_assert_msg(all.r == HTTP_PARSE_DONE, "whole: %d (%d) for %s", all.r, all.status, text);
    ck_assert_uint_eq(one.used, all.used);
    const struct http_parse_request *a = http_parse_request(p), *b = http_parse_request(&q);
    ck_assert_int_eq(a->method, b->method);
    ck_assert_str_eq(a->path, b->path);
    ck_assert_uint_eq(a->body_len, b->body_len);
    ck_assert(memcmp(a->body, b->body, a->body_len) == 0);
    ck_assert_uint_eq(a->header_count, b->header_count);
    http_parse_free(&q);
    *used = all.used;
}

START_TEST(test_valid_get_with_query_and_headers)
{
    static const char t[] = "\r\nGET /api/v1/skus/1?x=1&y HTTP/1.1\r\nHost: shop\r\n"
                            "X-Spaced:  \t padded value \t \r\nAccept: */*\r\n\r\n";
    struct http_parser p;
    size_t used;
    parse_valid(&p, t, sizeof t - 1, &used);
    const struct http_parse_request *r = http_parse_request(&p);
    ck_assert_uint_eq(used, sizeof t - 1);
    ck_assert_int_eq(r->method, HTTP_METHOD_GET);
    ck_assert_str_eq(r->path, "/api/v1/skus/1");
    ck_assert_str_eq(r->query, "x=1&y");
    ck_assert_int_eq(r->version_minor, 1);
    ck_assert_int_eq(r->keep_alive, 1);
    ck_assert_str_eq(http_parse_header_value(r, "x-spaced"), "padded value");
    ck_assert_str_eq(http_parse_header_value(r, "HOST"), "shop");
    ck_assert_ptr_null(http_parse_header_value(r, "Cookie"));
    ck_assert_uint_eq(r->body_len, 0);
    ck_assert_str_eq(r->body, "");
    http_parse_free(&p);
}
END_TEST

START_TEST(test_connection_keep_alive_rules)
{
    static const char close11[] =
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, close\r\n\r\n";
    static const char plain10[] = "GET / HTTP/1.0\r\n\r\n";
    static const char ka10[] = "HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    struct http_parser p;
    size_t used;
    parse_valid(&p, close11, sizeof close11 - 1, &used);
    ck_assert_int_eq(http_parse_request(&p)->keep_alive, 0);
    http_parse_free(&p);
    parse_valid(&p, plain10, sizeof plain10 - 1, &used);
    ck_assert_int_eq(http_parse_request(&p)->keep_alive, 0);
    ck_assert_int_eq(http_parse_request(&p)->version_minor, 0);
    http_parse_free(&p);
    parse_valid(&p, ka10, sizeof ka10 - 1, &used);
    ck_assert_int_eq(http_parse_request(&p)->keep_alive, 1);
    ck_assert_int_eq(http_parse_request(&p)->method, HTTP_METHOD_HEAD);
    http_parse_free(&p);
}
END_TEST

START_TEST(test_content_length_body)
{
    static const char t[] =
        "POST /o HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n{\"qty\": 1 }";
    struct http_parser p;
    size_t used;
    parse_valid(&p, t, sizeof t - 1, &used);
    const struct http_parse_request *r = http_parse_request(&p);
    ck_assert_int_eq(r->method, HTTP_METHOD_POST);
    ck_assert_uint_eq(r->body_len, 11);
    ck_assert_str_eq(r->body, "{\"qty\": 1 }");
    http_parse_free(&p);
}
END_TEST

START_TEST(test_chunked_body_is_dechunked)
{
    static const char t[] = "POST /o HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"
                            "5\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n00\r\n\r\n";
    struct http_parser p;
    size_t used;
    parse_valid(&p, t, sizeof t - 1, &used);
    const struct http_parse_request *r = http_parse_request(&p);
    ck_assert_uint_eq(used, sizeof t - 1);
    ck_assert_uint_eq(r->body_len, 16);
    ck_assert_str_eq(r->body, "hello 0123456789");
    http_parse_free(&p);
}
END_TEST

START_TEST(test_pipelined_requests_are_read_one_at_a_time)
{
    static const char t[] = "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nxy"
                            "GET /b HTTP/1.1\r\nHost: a\r\n\r\n"
                            "GET /c HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    static const char *const paths[] = {"/a", "/b", "/c"};
    for (size_t step = 0; step <= 3; step++) {
        struct http_parser p;
        http_parse_init(&p, MAX_HEADER, MAX_BODY);
        size_t off = 0;
        for (size_t i = 0; i < 3; i++) {
            struct outcome o = feed(&p, t + off, sizeof t - 1 - off, step);
            ck_assert_int_eq(o.r, HTTP_PARSE_DONE);
            ck_assert_str_eq(http_parse_request(&p)->path, paths[i]);
            /* a finished request takes nothing more until reset */
            size_t more = 1;
            ck_assert_int_eq(http_parse_feed(&p, t, 1, &more), HTTP_PARSE_DONE);
            ck_assert_uint_eq(more, 0);
            off += o.used;
            http_parse_reset(&p);
        }
        ck_assert_uint_eq(off, sizeof t - 1);
        http_parse_free(&p);
    }
}
END_TEST

START_TEST(test_expect_100_continue_is_announced_after_the_head)
{
    static const char head[] = "POST /o HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                               "Content-Length: 2\r\n\r\n";
    struct http_parser p;
    http_parse_init(&p, MAX_HEADER, MAX_BODY);
    ck_assert_int_eq(http_parse_started(&p), 0);
    size_t used;
    ck_assert_int_eq(http_parse_feed(&p, head, 10, &used), HTTP_PARSE_NEED_MORE);
    ck_assert_int_eq(http_parse_started(&p), 1);
    ck_assert_int_eq(http_parse_wants_continue(&p), 0);
    ck_assert_int_eq(http_parse_feed(&p, head + 10, sizeof head - 11, &used), HTTP_PARSE_NEED_MORE);
    ck_assert_int_eq(http_parse_wants_continue(&p), 1);
    ck_assert_int_eq(http_parse_feed(&p, "ok", 2, &used), HTTP_PARSE_DONE);
    ck_assert_str_eq(http_parse_request(&p)->body, "ok");
    http_parse_free(&p);
}
END_TEST

START_TEST(test_every_known_method_is_named)
{
    static const char *const m[] = {"GET",   "HEAD",    "POST",  "PUT",    "DELETE",
                                    "PATCH", "OPTIONS", "TRACE", "CONNECT"};
    char req[128];
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        int n = snprintf(req, sizeof req, "%s /x HTTP/1.1\r\nHost: a\r\n\r\n", m[i]);
        struct http_parser p;
        size_t used;
        parse_valid(&p, req, (size_t)n, &used);
        ck_assert_str_eq(http_method_name(http_parse_request(&p)->method), m[i]);
        http_parse_free(&p);
    }
}
END_TEST

/* An idle keep-alive connection must not keep the buffer of the largest
 * request it ever sent. */
START_TEST(test_a_large_request_gives_its_buffer_back_at_reset)
{
    struct http_parser p;
    http_parse_init(&p, MAX_HEADER, MAX_BODY);
    /* a head near MAX_HEADER and a body of MAX_BODY: more than the first
     * buffer holds */
    char req[MAX_HEADER + MAX_BODY], pad[MAX_HEADER - 80];
    memset(pad, 'p', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    int n = snprintf(req, sizeof req,
                     "POST / HTTP/1.1\r\nHost: a\r\nX-Pad: %s\r\nContent-Length: %d\r\n\r\n", pad,
                     MAX_BODY);
    ck_assert(n > 0 && (size_t)n <= MAX_HEADER);
    memset(req + n, 'x', MAX_BODY);
    struct outcome o = feed(&p, req, (size_t)n + MAX_BODY, 0);
    ck_assert_int_eq(o.r, HTTP_PARSE_DONE);
    size_t grown = http_parse_buffer_bytes(&p);
    ck_assert_uint_gt(grown, 1024);
    http_parse_reset(&p);
    ck_assert_uint_eq(http_parse_buffer_bytes(&p), 0);
    /* a small one keeps its small buffer across resets */
    static const char small[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    o = feed(&p, small, sizeof small - 1, 0);
    ck_assert_int_eq(o.r, HTTP_PARSE_DONE);
    size_t kept = http_parse_buffer_bytes(&p);
    ck_assert_uint_gt(kept, 0);
    http_parse_reset(&p);
    ck_assert_uint_eq(http_parse_buffer_bytes(&p), kept);
    http_parse_free(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("request_parse");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_duplicate_content_length_is_refused);
    tcase_add_test(tc, test_content_length_must_be_plain_digits);
    tcase_add_test(tc, test_transfer_encoding_with_content_length_is_refused);
    tcase_add_test(tc, test_only_a_single_chunked_coding_is_accepted);
    tcase_add_test(tc, test_whitespace_before_the_colon_is_refused);
    tcase_add_test(tc, test_malformed_chunk_sizes_are_refused);
    tcase_add_test(tc, test_control_characters_and_empty_names_are_refused);
    tcase_add_test(tc, test_folding_bare_lf_and_bare_cr_are_refused);
    tcase_add_test(tc, test_duplicate_credentials_and_keys_are_refused);
    tcase_add_test(tc, test_bad_request_lines_are_refused);
    tcase_add_test(tc, test_http11_without_host_is_refused);
    tcase_add_test(tc, test_limits_answer_431_and_400);
    tcase_add_test(tc, test_unknown_expectation_is_refused_with_417);
    tcase_add_test(tc, test_valid_get_with_query_and_headers);
    tcase_add_test(tc, test_connection_keep_alive_rules);
    tcase_add_test(tc, test_content_length_body);
    tcase_add_test(tc, test_chunked_body_is_dechunked);
    tcase_add_test(tc, test_pipelined_requests_are_read_one_at_a_time);
    tcase_add_test(tc, test_expect_100_continue_is_announced_after_the_head);
    tcase_add_test(tc, test_every_known_method_is_named);
    tcase_add_test(tc, test_a_large_request_gives_its_buffer_back_at_reset);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
