/*
 * request_parse: a strict, incremental HTTP/1.1 request parser.  Pure: no
 * I/O, no event loop, no clock; the server (http/server.c) feeds it the bytes
 * it reads, the fuzz target feeds it anything.
 *
 * Strict means: what two HTTP implementations could read differently (the
 * stuff of request smuggling) is refused, never guessed.  Refused, with 400
 * unless said otherwise:
 *   - a request line that is not `token SP origin-form SP HTTP/1.1|HTTP/1.0`;
 *     an unknown method is 501; empty lines before it are skipped (RFC 9112
 *     2.2), and count against the header limit;
 *   - lines not ended by CRLF (a bare LF or a bare CR), obsolete line folding,
 *     a header name that is empty or not a token (so also whitespace before
 *     the colon), control characters or NUL in names or values;
 *   - a second Content-Length, Transfer-Encoding, Host, Authorization,
 *     Content-Type or Idempotency-Key; Content-Length that is not plain
 *     digits; Content-Length together with Transfer-Encoding;
 *     Transfer-Encoding in an HTTP/1.0 request; a missing Host in HTTP/1.1;
 *   - any transfer coding but one `chunked` (501); chunk sizes that are not
 *     1..HTTP_PARSE_MAX_CHUNK_DIGITS hex digits followed by CRLF (no "0x",
 *     sign, whitespace or chunk extension); chunk data not followed by CRLF;
 *     trailer fields (nothing here reads them);
 *   - Expect other than 100-continue (417);
 *   - a header block over max_header_bytes or more than HTTP_PARSE_MAX_HEADERS
 *     fields (431); a body (declared or de-chunked) over max_body_bytes (400,
 *     the answer the API has always given for it).
 *
 * Memory: one buffer per parser, grown on demand and never beyond
 * max_header_bytes + max_body_bytes + 1; reused by the next request.
 */
#ifndef SECKILL_REQUEST_PARSE_H
#define SECKILL_REQUEST_PARSE_H

#include <stddef.h>

/* Header fields per request; more is an abuse, not a buyer (431). */
#define HTTP_PARSE_MAX_HEADERS 64
/* Hex digits of one chunk size: 8 already exceed any body limit we accept. */
#define HTTP_PARSE_MAX_CHUNK_DIGITS 8

enum http_method {
    HTTP_METHOD_UNKNOWN, /* never in a parsed request: answered 501 */
    HTTP_METHOD_GET,
    HTTP_METHOD_HEAD,
    HTTP_METHOD_POST,
    HTTP_METHOD_PUT,
    HTTP_METHOD_DELETE,
    HTTP_METHOD_PATCH,
    HTTP_METHOD_OPTIONS,
    HTTP_METHOD_TRACE,
    HTTP_METHOD_CONNECT
};

enum http_parse_result {
    HTTP_PARSE_NEED_MORE, /* every byte given was taken; feed more */
    HTTP_PARSE_DONE,      /* a whole request: http_parse_request() */
    HTTP_PARSE_ERROR      /* refused: http_parse_error(); the connection must close */
};

struct http_parse_header {
    const char *name;  /* as sent, NUL-terminated */
    const char *value; /* without surrounding whitespace, NUL-terminated */
    size_t value_len;
};

/* A parsed request.  Every pointer points into the parser's buffer and is
 * valid until http_parse_reset() or http_parse_free(). */
struct http_parse_request {
    enum http_method method;
    const char *path;  /* origin-form target up to '?', starts with '/' */
    const char *query; /* after '?', or NULL */
    int version_minor; /* HTTP/1.<version_minor>: 0 or 1 */
    int keep_alive;    /* 1.1 without "Connection: close", 1.0 with "keep-alive" */
    size_t header_count;
    struct http_parse_header headers[HTTP_PARSE_MAX_HEADERS];
    const char *body; /* de-chunked, NUL-terminated (also when empty) */
    size_t body_len;
};

enum http_parse_state {
    HTTP_PARSE_S_HEAD,
    HTTP_PARSE_S_BODY,
    HTTP_PARSE_S_CHUNK_SIZE,
    HTTP_PARSE_S_CHUNK_SIZE_LF,
    HTTP_PARSE_S_CHUNK_DATA,
    HTTP_PARSE_S_CHUNK_DATA_CR,
    HTTP_PARSE_S_CHUNK_DATA_LF,
    HTTP_PARSE_S_TRAILER_CR,
    HTTP_PARSE_S_TRAILER_LF,
    HTTP_PARSE_S_DONE,
    HTTP_PARSE_S_ERROR
};

/* The parser's state: treat as opaque (it is here so it can be embedded). */
struct http_parser {
    size_t max_header_bytes, max_body_bytes;
    char *buf;
    size_t len, cap;
    enum http_parse_state state;
    size_t line_start; /* offset of the head line being read */
    size_t head_len;   /* bytes of the head, once read */
    size_t remaining;  /* body or chunk bytes still to come */
    size_t chunk_digits;
    unsigned seen; /* single-valued headers seen (bit per kind) */
    int have_line; /* the request line was read */
    int chunked, expect_continue, expect_other, conn_close, conn_keep_alive;
    size_t content_length;
    size_t path_off, query_off; /* query_off 0: none */
    size_t name_off[HTTP_PARSE_MAX_HEADERS], value_off[HTTP_PARSE_MAX_HEADERS];
    int error_status;
    const char *error_reason;
    struct http_parse_request req;
};

/* Prepares p for its first request.  Allocates nothing yet; never fails. */
void http_parse_init(struct http_parser *p, size_t max_header_bytes, size_t max_body_bytes);

/* Forgets the request (done or not) and makes p ready for the next one; keeps
 * the buffer unless a large request made it grow past its first size (then
 * it is freed: an idle keep-alive connection holds little).  Pointers from
 * http_parse_request() become invalid. */
void http_parse_reset(struct http_parser *p);

/* The bytes p's buffer holds now (0 before the first byte, after a reset
 * that freed it, or after http_parse_free()). */
size_t http_parse_buffer_bytes(const struct http_parser *p);

/* Frees p's buffer.  p may be reused after http_parse_init(). */
void http_parse_free(struct http_parser *p);

/*
 * Takes bytes of one request from data[0..len).  *used gets how many it took:
 * all of them on NEED_MORE; on DONE the bytes up to the request's end (the
 * rest belongs to the next, pipelined request); on ERROR as far as it read.
 * After DONE or ERROR it takes nothing until http_parse_reset().  Aborts only
 * when memory runs out.
 */
enum http_parse_result http_parse_feed(struct http_parser *p, const char *data, size_t len,
                                       size_t *used);

/* 1 once any byte of the current request was taken. */
int http_parse_started(const struct http_parser *p);

/* 1 when the head is complete, asked for "Expect: 100-continue" and the body
 * has not all arrived: the client may wait for an interim 100 answer. */
int http_parse_wants_continue(const struct http_parser *p);

/* The request after DONE, else NULL. */
const struct http_parse_request *http_parse_request(const struct http_parser *p);

/* After ERROR: the status to answer (400, 417, 431 or 501) and a short
 * reason (static text); 0 and NULL otherwise. */
int http_parse_error(const struct http_parser *p, const char **reason);

/* The value of header 'name' (case-insensitive), or NULL; the first one when
 * a multi-valued header came more than once. */
const char *http_parse_header_value(const struct http_parse_request *r, const char *name);

/* "GET", "POST", ...; "" for HTTP_METHOD_UNKNOWN. */
const char *http_method_name(enum http_method m);

#endif
