#include "http/request_parse.h"
#include "core/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The buffer's first size; most requests of a sale fit in it. */
#define FIRST_BUFFER_BYTES 1024

/* Single-valued headers: a second one is ambiguous (which one did the proxy
 * in front of us read?), so it is refused. */
enum single_header {
    SINGLE_CONTENT_LENGTH = 1u << 0,
    SINGLE_TRANSFER_ENCODING = 1u << 1,
    SINGLE_HOST = 1u << 2,
    SINGLE_AUTHORIZATION = 1u << 3,
    SINGLE_CONTENT_TYPE = 1u << 4,
    SINGLE_IDEMPOTENCY_KEY = 1u << 5,
};

static const struct {
    const char *name;
    unsigned bit;
} singles[] = {
    {"content-length", SINGLE_CONTENT_LENGTH},
    {"transfer-encoding", SINGLE_TRANSFER_ENCODING},
    {"host", SINGLE_HOST},
    {"authorization", SINGLE_AUTHORIZATION},
    {"content-type", SINGLE_CONTENT_TYPE},
    {"idempotency-key", SINGLE_IDEMPOTENCY_KEY},
};

static const char *const method_names[] = {
    [HTTP_METHOD_UNKNOWN] = "",    [HTTP_METHOD_GET] = "GET",
    [HTTP_METHOD_HEAD] = "HEAD",   [HTTP_METHOD_POST] = "POST",
    [HTTP_METHOD_PUT] = "PUT",     [HTTP_METHOD_DELETE] = "DELETE",
    [HTTP_METHOD_PATCH] = "PATCH", [HTTP_METHOD_OPTIONS] = "OPTIONS",
    [HTTP_METHOD_TRACE] = "TRACE", [HTTP_METHOD_CONNECT] = "CONNECT",
};

const char *http_method_name(enum http_method m)
{
    return (size_t)m < sizeof method_names / sizeof method_names[0] ? method_names[m] : "";
}

/* RFC 9110 5.6.2 tchar. */
static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A byte allowed in a field value: visible, space, tab, or obs-text. */
static int is_value_byte(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void http_parse_init(struct http_parser *p, size_t max_header_bytes, size_t max_body_bytes)
{
    memset(p, 0, sizeof *p);
    p->max_header_bytes = max_header_bytes;
    p->max_body_bytes = max_body_bytes;
}

void http_parse_reset(struct http_parser *p)
{
    if (p->cap > FIRST_BUFFER_BYTES) { /* a large request: an idle connection keeps less */
        free(p->buf);
        p->buf = NULL;
        p->cap = 0;
    }
    char *buf = p->buf;
    size_t cap = p->cap, mh = p->max_header_bytes, mb = p->max_body_bytes;
    /* Only the scalars: the request's header array is rewritten at DONE. */
    memset(p, 0, offsetof(struct http_parser, name_off));
    p->error_status = 0;
    p->error_reason = NULL;
    p->req.header_count = 0;
    p->buf = buf;
    p->cap = cap;
    p->max_header_bytes = mh;
    p->max_body_bytes = mb;
}

size_t http_parse_buffer_bytes(const struct http_parser *p)
{
    return p->cap;
}

void http_parse_free(struct http_parser *p)
{
    free(p->buf);
    p->buf = NULL;
    p->cap = p->len = 0;
}

static enum http_parse_result fail(struct http_parser *p, int status, const char *reason)
{
    p->state = HTTP_PARSE_S_ERROR;
    p->error_status = status;
    p->error_reason = reason;
    return HTTP_PARSE_ERROR;
}

/* Appends n bytes, keeping one spare byte for a terminating NUL. */
static void append(struct http_parser *p, const char *data, size_t n)
{
    if (p->len + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : FIRST_BUFFER_BYTES;
        while (cap < p->len + n + 1)
            cap *= 2;
        size_t most = p->max_header_bytes + p->max_body_bytes + 1;
        if (cap > most)
            cap = most;
        char *b = xrealloc(p->buf, cap);
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, data, n);
    p->len += n;
}

static enum http_method method_of(const char *s, size_t n)
{
    for (size_t m = HTTP_METHOD_GET; m < sizeof method_names / sizeof method_names[0]; m++)
        if (strlen(method_names[m]) == n && memcmp(method_names[m], s, n) == 0)
            return (enum http_method)m;
    return HTTP_METHOD_UNKNOWN;
}

/* `method SP origin-form SP HTTP/1.x`, in line[0..n) (CRLF already cut). */
static enum http_parse_result request_line(struct http_parser *p, char *line, size_t n)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i == n || line[i] != ' ')
        return fail(p, 400, "malformed request line");
    enum http_method m = method_of(line, i);
    size_t t = ++i;
    if (i == n || line[i] != '/')
        return fail(p, 400, "request target must be an absolute path");
    size_t q = 0;
    while (i < n && line[i] > 0x20 && line[i] < 0x7f) {
        if (line[i] == '?' && !q)
            q = i;
        i++;
    }
    static const char v10[] = " HTTP/1.0", v11[] = " HTTP/1.1";
    size_t vlen = sizeof v11 - 1;
    if (n - i != vlen || (memcmp(line + i, v11, vlen) != 0 && memcmp(line + i, v10, vlen) != 0))
        return fail(p, 400, "malformed request line or unsupported HTTP version");
    if (m == HTTP_METHOD_UNKNOWN)
        return fail(p, 501, "unknown method");
    p->req.method = m;
    p->req.version_minor = line[n - 1] - '0';
    line[i] = '\0';
    if (q) {
        line[q] = '\0';
        p->query_off = (size_t)(line - p->buf) + q + 1;
    }
    p->path_off = (size_t)(line - p->buf) + t;
    p->have_line = 1;
    return HTTP_PARSE_NEED_MORE;
}

/* Whether the comma-separated list 'v' holds 'token' (case-insensitive). */
static int list_has(const char *v, const char *token)
{
    size_t tl = strlen(token);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        size_t n = strcspn(v, ",");
        size_t k = n;
        while (k && (v[k - 1] == ' ' || v[k - 1] == '\t'))
            k--;
        if (k == tl && strncasecmp(v, token, tl) == 0)
            return 1;
        v += n;
    }
    return 0;
}

/* What a header means for framing and the connection. */
static enum http_parse_result header_meaning(struct http_parser *p, const char *name,
                                             const char *value, size_t vlen)
{
    for (size_t i = 0; i < sizeof singles / sizeof singles[0]; i++)
        if (strcasecmp(name, singles[i].name) == 0) {
            if (p->seen & singles[i].bit)
                return fail(p, 400, "a header that must be single came twice");
            p->seen |= singles[i].bit;
        }
    if (strcasecmp(name, "content-length") == 0) {
        if (vlen == 0)
            return fail(p, 400, "Content-Length is not a number");
        size_t v = 0;
        for (size_t i = 0; i < vlen; i++) {
            if (value[i] < '0' || value[i] > '9')
                return fail(p, 400, "Content-Length is not a number");
            if (v > (SIZE_MAX - 9) / 10) /* whatever the limit, no wrap-around */
                return fail(p, 400, "body larger than max_body_bytes");
            v = v * 10 + (size_t)(value[i] - '0');
            if (v > p->max_body_bytes)
                return fail(p, 400, "body larger than max_body_bytes");
        }
        p->content_length = v;
    } else if (strcasecmp(name, "transfer-encoding") == 0) {
        if (strcasecmp(value, "chunked") != 0)
            return fail(p, 501, "only a single \"chunked\" transfer coding is supported");
        p->chunked = 1;
    } else if (strcasecmp(name, "connection") == 0) {
        p->conn_close |= list_has(value, "close");
        p->conn_keep_alive |= list_has(value, "keep-alive");
    } else if (strcasecmp(name, "expect") == 0) {
        if (strcasecmp(value, "100-continue") == 0)
            p->expect_continue = 1;
        else
            p->expect_other = 1;
    }
    return HTTP_PARSE_NEED_MORE;
}

/* One header field line[0..n) (CRLF already cut). */
static enum http_parse_result header_line(struct http_parser *p, char *line, size_t n)
{
    if (line[0] == ' ' || line[0] == '\t')
        return fail(p, 400, "obsolete line folding");
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i == n || line[i] != ':')
        return fail(p, 400, "malformed header name");
    size_t c = p->req.header_count;
    if (c == HTTP_PARSE_MAX_HEADERS)
        return fail(p, 431, "too many header fields");
    line[i] = '\0';
    size_t v = i + 1;
    while (v < n && (line[v] == ' ' || line[v] == '\t'))
        v++;
    size_t e = n;
    while (e > v && (line[e - 1] == ' ' || line[e - 1] == '\t'))
        e--;
    for (size_t k = v; k < e; k++)
        if (!is_value_byte((unsigned char)line[k]))
            return fail(p, 400, "control character in a header value");
    line[e] = '\0';
    p->name_off[c] = (size_t)(line - p->buf);
    p->value_off[c] = (size_t)(line - p->buf) + v;
    p->req.headers[c].value_len = e - v;
    p->req.header_count = c + 1;
    return header_meaning(p, line, line + v, e - v);
}

/* The empty line: decides how the body is framed. */
static enum http_parse_result head_end(struct http_parser *p)
{
    p->head_len = p->len;
    if (p->req.version_minor == 1 && !(p->seen & SINGLE_HOST))
        return fail(p, 400, "HTTP/1.1 request without Host");
    if (p->chunked && (p->seen & SINGLE_CONTENT_LENGTH))
        return fail(p, 400, "both Transfer-Encoding and Content-Length");
    if (p->chunked && p->req.version_minor == 0)
        return fail(p, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (p->expect_other && p->req.version_minor == 1)
        return fail(p, 417, "only \"Expect: 100-continue\" is supported");
    p->req.keep_alive =
        p->req.version_minor == 1 ? !p->conn_close : (p->conn_keep_alive && !p->conn_close);
    if (p->chunked) {
        p->state = HTTP_PARSE_S_CHUNK_SIZE;
        return HTTP_PARSE_NEED_MORE;
    }
    if (p->content_length) {
        p->remaining = p->content_length;
        p->state = HTTP_PARSE_S_BODY;
        return HTTP_PARSE_NEED_MORE;
    }
    p->state = HTTP_PARSE_S_DONE;
    return HTTP_PARSE_DONE;
}

/* A complete head line ends at p->len. */
static enum http_parse_result head_line(struct http_parser *p)
{
    char *line = p->buf + p->line_start;
    size_t n = p->len - p->line_start;
    p->line_start = p->len;
    if (n < 2 || line[n - 2] != '\r')
        return fail(p, 400, "line not ended by CRLF");
    n -= 2;
    /* A CR or NUL inside the line is a control character: refused below
     * (request target, name and value checks all exclude it). */
    if (!p->have_line)
        return n == 0 ? HTTP_PARSE_NEED_MORE : request_line(p, line, n);
    if (n == 0)
        return head_end(p);
    return header_line(p, line, n);
}

/* Fills p->req's pointers once the buffer no longer moves. */
static void finish(struct http_parser *p)
{
    p->buf[p->len] = '\0';
    p->req.path = p->buf + p->path_off;
    p->req.query = p->query_off ? p->buf + p->query_off : NULL;
    for (size_t i = 0; i < p->req.header_count; i++) {
        p->req.headers[i].name = p->buf + p->name_off[i];
        p->req.headers[i].value = p->buf + p->value_off[i];
    }
    p->req.body = p->buf + p->head_len;
    p->req.body_len = p->len - p->head_len;
}

/* The chunked body, byte by byte but for the data itself. */
static enum http_parse_result chunked_step(struct http_parser *p, const char *data, size_t len,
                                           size_t *i)
{
    unsigned char c = (unsigned char)data[*i];
    switch (p->state) {
    case HTTP_PARSE_S_CHUNK_SIZE: {
        int h = hex_value(c);
        if (h >= 0) {
            if (++p->chunk_digits > HTTP_PARSE_MAX_CHUNK_DIGITS)
                return fail(p, 400, "chunk size too long");
            p->remaining = p->remaining * 16 + (size_t)h;
        } else if (c == '\r' && p->chunk_digits) {
            p->state = HTTP_PARSE_S_CHUNK_SIZE_LF;
        } else {
            return fail(p, 400, "malformed chunk size");
        }
        (*i)++;
        return HTTP_PARSE_NEED_MORE;
    }
    case HTTP_PARSE_S_CHUNK_SIZE_LF:
        if (c != '\n')
            return fail(p, 400, "chunk size not ended by CRLF");
        (*i)++;
        p->chunk_digits = 0;
        if (p->remaining == 0) {
            p->state = HTTP_PARSE_S_TRAILER_CR;
        } else if (p->remaining > p->max_body_bytes - (p->len - p->head_len)) {
            return fail(p, 400, "body larger than max_body_bytes");
        } else {
            p->state = HTTP_PARSE_S_CHUNK_DATA;
        }
        return HTTP_PARSE_NEED_MORE;
    case HTTP_PARSE_S_CHUNK_DATA: {
        size_t take = len - *i < p->remaining ? len - *i : p->remaining;
        append(p, data + *i, take);
        *i += take;
        p->remaining -= take;
        if (p->remaining == 0)
            p->state = HTTP_PARSE_S_CHUNK_DATA_CR;
        return HTTP_PARSE_NEED_MORE;
    }
    case HTTP_PARSE_S_CHUNK_DATA_CR:
    case HTTP_PARSE_S_TRAILER_CR:
        if (c != '\r')
            return fail(p, 400,
                        p->state == HTTP_PARSE_S_TRAILER_CR ? "trailer fields are not accepted"
                                                            : "chunk data longer than its size");
        p->state = p->state == HTTP_PARSE_S_TRAILER_CR ? HTTP_PARSE_S_TRAILER_LF
                                                       : HTTP_PARSE_S_CHUNK_DATA_LF;
        (*i)++;
        return HTTP_PARSE_NEED_MORE;
    case HTTP_PARSE_S_CHUNK_DATA_LF:
    case HTTP_PARSE_S_TRAILER_LF:
        if (c != '\n')
            return fail(p, 400, "chunk not ended by CRLF");
        (*i)++;
        if (p->state == HTTP_PARSE_S_TRAILER_LF) {
            p->state = HTTP_PARSE_S_DONE;
            return HTTP_PARSE_DONE;
        }
        p->state = HTTP_PARSE_S_CHUNK_SIZE;
        return HTTP_PARSE_NEED_MORE;
    default:
        return fail(p, 400, "parser state");
    }
}

enum http_parse_result http_parse_feed(struct http_parser *p, const char *data, size_t len,
                                       size_t *used)
{
    size_t i = 0;
    enum http_parse_result r = HTTP_PARSE_NEED_MORE;
    if (p->state == HTTP_PARSE_S_DONE || p->state == HTTP_PARSE_S_ERROR) {
        *used = 0;
        return p->state == HTTP_PARSE_S_DONE ? HTTP_PARSE_DONE : HTTP_PARSE_ERROR;
    }
    while (i < len && r == HTTP_PARSE_NEED_MORE) {
        if (p->state == HTTP_PARSE_S_HEAD) {
            const char *nl = memchr(data + i, '\n', len - i);
            size_t take = nl ? (size_t)(nl - (data + i)) + 1 : len - i;
            if (p->len + take > p->max_header_bytes) {
                r = fail(p, 431, "header block larger than max_header_bytes");
                break;
            }
            append(p, data + i, take);
            i += take;
            if (nl)
                r = head_line(p);
        } else if (p->state == HTTP_PARSE_S_BODY) {
            size_t take = len - i < p->remaining ? len - i : p->remaining;
            append(p, data + i, take);
            i += take;
            p->remaining -= take;
            if (p->remaining == 0) {
                p->state = HTTP_PARSE_S_DONE;
                r = HTTP_PARSE_DONE;
            }
        } else {
            r = chunked_step(p, data, len, &i);
        }
    }
    if (r == HTTP_PARSE_DONE)
        finish(p);
    *used = i;
    return r;
}

int http_parse_started(const struct http_parser *p)
{
    return p->len > 0 || p->state != HTTP_PARSE_S_HEAD;
}

int http_parse_wants_continue(const struct http_parser *p)
{
    return p->expect_continue && p->req.version_minor == 1 && p->len == p->head_len &&
           (p->state == HTTP_PARSE_S_BODY || p->state == HTTP_PARSE_S_CHUNK_SIZE);
}

const struct http_parse_request *http_parse_request(const struct http_parser *p)
{
    return p->state == HTTP_PARSE_S_DONE ? &p->req : NULL;
}

int http_parse_error(const struct http_parser *p, const char **reason)
{
    if (reason)
        *reason = p->error_reason;
    return p->error_status;
}

const char *http_parse_header_value(const struct http_parse_request *r, const char *name)
{
    for (size_t i = 0; i < r->header_count; i++)
        if (strcasecmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}
