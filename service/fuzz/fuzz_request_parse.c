/*
 * Fuzz target: the strict HTTP/1.1 parser, http_parse_feed(), over a stream
 * of pipelined requests, as the server reads them: one request after another
 * on one parser, http_parse_reset() between them, the bytes after a request's
 * end handed to the next.
 *
 * Input: one settings byte, then the stream.  Bits 0-1 of the settings pick
 * the limits (the defaults, the smallest the config allows, two smaller
 * still), bits 2-4 how the stream is cut into reads (see cut_stream).
 *
 * Properties: the parse is the same whatever the cuts (each request's verdict,
 * error status, end in the stream and everything parsed: method, version,
 * keep-alive, path, query, headers, body), and the same with a fresh parser
 * per request as with one reset between them; a parse under smaller limits
 * that accepts a request gives what the default limits give; `used` never
 * exceeds what was fed, and is all of it on NEED_MORE; after DONE or ERROR
 * nothing more is taken; the buffer never grows beyond max_header_bytes +
 * max_body_bytes + 1; an error is 400, 417, 431 or 501 with a printable
 * reason.  A request accepted has a known method, an origin-form path, a
 * version 1.0 or 1.1, header names that are tokens and values without
 * controls or surrounding whitespace, at most one of each single-valued
 * header and a Host in 1.1, no Expect but 100-continue; its keep-alive
 * follows Connection; its body is at most max_body_bytes and is exactly what
 * its framing says, restated here from the raw bytes: Content-Length bytes
 * after the head, the chunks of a "chunked" body, or nothing, and the request
 * ends where that framing ends.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz/fuzz.h"
#include "http/request_parse.h"

static const struct parse_limits {
    size_t header, body;
} limits_table[] = {
    {8192, 4096}, /* the config's defaults */
    {512, 64},    /* the config's smallest */
    {96, 8},
    {40, 0},
};
#define DEFAULT_LIMITS (&limits_table[0])

/* What one run of the parser over the stream gave, one entry per request
 * (a serialization compared byte for byte between runs). */
struct trace {
    char *buf;
    size_t len, cap;
    size_t entry_end[512];
    size_t entries;
    int truncated; /* more requests than entry_end holds: compared as a whole only */
};

static void trace_put(struct trace *t, const void *data, size_t n)
{
    if (t->len + n > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->len + n)
            cap *= 2;
        t->buf = realloc(t->buf, cap);
        if (t->buf == NULL)
            abort();
        t->cap = cap;
    }
    if (n > 0)
        memcpy(t->buf + t->len, data, n);
    t->len += n;
}

static void trace_size(struct trace *t, size_t v)
{
    trace_put(t, &v, sizeof v);
}

/* A string preceded by its length, so no two entries serialize alike. */
static void trace_bytes(struct trace *t, const char *s, size_t n)
{
    trace_size(t, n);
    trace_put(t, s, n);
}

static void trace_end_entry(struct trace *t)
{
    if (t->entries < sizeof t->entry_end / sizeof t->entry_end[0])
        t->entry_end[t->entries++] = t->len;
    else
        t->truncated = 1;
}

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Whether the comma-separated list v holds token (any case, OWS around). */
static int list_holds(const char *v, const char *token)
{
    size_t tl = strlen(token);

    for (const char *item = v;; item++) {
        const char *end = strchr(item, ',');
        size_t n = end ? (size_t)(end - item) : strlen(item);
        size_t a = 0, b = n;
        while (a < b && (item[a] == ' ' || item[a] == '\t'))
            a++;
        while (b > a && (item[b - 1] == ' ' || item[b - 1] == '\t'))
            b--;
        if (b - a == tl && strncasecmp(item + a, token, tl) == 0)
            return 1;
        if (end == NULL)
            return 0;
        item = end;
    }
}

/* The hex value of c, or -1. */
static int hex_digit(unsigned char c)
{
    const char *digits = "0123456789abcdef";
    const char *at = c ? strchr(digits, c | 0x20) : NULL;
    return at ? (int)(at - digits) : -1;
}

/*
 * De-chunks raw[0..n) plainly: chunks of "1..8 hex digits CRLF data CRLF",
 * ended by "0 CRLF CRLF".  Returns the bytes the framing spans and writes the
 * data to out (n bytes at most), or returns 0 when raw[0..n) does not hold a
 * whole, well-formed chunked body.
 */
static size_t plain_dechunk(const char *raw, size_t n, char *out, size_t *out_len)
{
    size_t i = 0;

    *out_len = 0;
    for (;;) {
        size_t size = 0, digits = 0;
        while (i < n && hex_digit((unsigned char)raw[i]) >= 0 && digits < 8) {
            size = size * 16 + (size_t)hex_digit((unsigned char)raw[i++]);
            digits++;
        }
        if (digits == 0 || n - i < 2 || raw[i] != '\r' || raw[i + 1] != '\n')
            return 0;
        i += 2;
        if (size == 0)
            return n - i >= 2 && raw[i] == '\r' && raw[i + 1] == '\n' ? i + 2 : 0;
        if (n - i < size + 2 || raw[i + size] != '\r' || raw[i + size + 1] != '\n')
            return 0;
        memcpy(out + *out_len, raw + i, size);
        *out_len += size;
        i += size + 2;
    }
}

/* The bytes of the blank lines (CRLF) before the request line in raw[0..n). */
static size_t blank_lines(const char *raw, size_t n)
{
    size_t i = 0;
    while (n - i >= 2 && raw[i] == '\r' && raw[i + 1] == '\n')
        i += 2;
    return i;
}

/* The head's length in raw[0..n): blank lines, request line, fields, empty line. */
static size_t head_length(const char *raw, size_t n)
{
    size_t i = blank_lines(raw, n);
    const char *end = memmem(raw + i, n - i, "\r\n\r\n", 4);
    FUZZ_CHECK(end != NULL);
    return (size_t)(end - raw) + 4;
}

/* Checks a request the parser accepted against its raw bytes raw[0..n). */
static void check_request(const struct http_parse_request *r, const struct parse_limits *lim,
                          const char *raw, size_t n)
{
    static const char *const singles[] = {"content-length", "transfer-encoding", "host",
                                          "authorization",  "content-type",      "idempotency-key"};
    const char *name = http_method_name(r->method);
    size_t name_len = strlen(name), head = head_length(raw, n), lead = blank_lines(raw, n);
    int has_close = 0, has_keep_alive = 0;

    FUZZ_CHECK(r->method != HTTP_METHOD_UNKNOWN && name_len > 0);
    FUZZ_CHECK(n - lead > name_len && memcmp(raw + lead, name, name_len) == 0 &&
               raw[lead + name_len] == ' ');
    FUZZ_CHECK(head <= lim->header);
    FUZZ_CHECK(r->path[0] == '/');
    for (const char *c = r->path; *c; c++)
        FUZZ_CHECK(*c > 0x20 && *c < 0x7f && *c != '?');
    if (r->query != NULL)
        for (const char *c = r->query; *c; c++)
            FUZZ_CHECK(*c > 0x20 && *c < 0x7f);
    FUZZ_CHECK(r->version_minor == 0 || r->version_minor == 1);

    FUZZ_CHECK(r->header_count <= HTTP_PARSE_MAX_HEADERS);
    for (size_t i = 0; i < r->header_count; i++) {
        const struct http_parse_header *h = &r->headers[i];
        FUZZ_CHECK(h->name[0] != '\0');
        for (const char *c = h->name; *c; c++)
            FUZZ_CHECK(is_tchar((unsigned char)*c));
        FUZZ_CHECK(strlen(h->value) == h->value_len);
        for (size_t k = 0; k < h->value_len; k++) {
            unsigned char c = (unsigned char)h->value[k];
            FUZZ_CHECK(c == '\t' || (c >= 0x20 && c != 0x7f));
        }
        if (h->value_len > 0) {
            FUZZ_CHECK(h->value[0] != ' ' && h->value[0] != '\t');
            FUZZ_CHECK(h->value[h->value_len - 1] != ' ' && h->value[h->value_len - 1] != '\t');
        }
        if (strcasecmp(h->name, "connection") == 0) {
            has_close |= list_holds(h->value, "close");
            has_keep_alive |= list_holds(h->value, "keep-alive");
        }
        if (r->version_minor == 1 && strcasecmp(h->name, "expect") == 0)
            FUZZ_CHECK(strcasecmp(h->value, "100-continue") == 0);
    }
    for (size_t s = 0; s < sizeof singles / sizeof singles[0]; s++) {
        size_t count = 0;
        for (size_t i = 0; i < r->header_count; i++)
            count += strcasecmp(r->headers[i].name, singles[s]) == 0;
        FUZZ_CHECK(count <= 1);
    }
    if (r->version_minor == 1)
        FUZZ_CHECK(http_parse_header_value(r, "host") != NULL);
    FUZZ_CHECK(r->keep_alive ==
               (r->version_minor == 1 ? !has_close : has_keep_alive && !has_close));

    /* The body and where the request ends, from the framing alone. */
    const char *cl = http_parse_header_value(r, "content-length");
    const char *te = http_parse_header_value(r, "transfer-encoding");
    FUZZ_CHECK(r->body != NULL && r->body[r->body_len] == '\0');
    FUZZ_CHECK(r->body_len <= lim->body);
    if (te != NULL) {
        FUZZ_CHECK(cl == NULL && r->version_minor == 1 && strcasecmp(te, "chunked") == 0);
        char *plain = malloc(n - head + 1);
        size_t plain_len;
        if (plain == NULL)
            abort();
        FUZZ_CHECK(head + plain_dechunk(raw + head, n - head, plain, &plain_len) == n);
        FUZZ_CHECK(plain_len == r->body_len && memcmp(plain, r->body, plain_len) == 0);
        free(plain);
    } else if (cl != NULL) {
        size_t v = 0;
        for (const char *c = cl; *c; c++) {
            FUZZ_CHECK(*c >= '0' && *c <= '9' && v <= lim->body);
            v = v * 10 + (size_t)(*c - '0');
        }
        FUZZ_CHECK(cl[0] != '\0' && v == r->body_len && n == head + v);
        FUZZ_CHECK(memcmp(raw + head, r->body, v) == 0);
    } else {
        FUZZ_CHECK(r->body_len == 0 && n == head);
    }
}

static void trace_request(struct trace *t, const struct http_parse_request *r, size_t end)
{
    const char *m = http_method_name(r->method);

    trace_put(t, "D", 1);
    trace_size(t, end);
    trace_bytes(t, m, strlen(m));
    trace_size(t, (size_t)r->version_minor);
    trace_size(t, (size_t)r->keep_alive);
    trace_bytes(t, r->path, strlen(r->path));
    trace_size(t, r->query != NULL);
    if (r->query != NULL)
        trace_bytes(t, r->query, strlen(r->query));
    trace_size(t, r->header_count);
    for (size_t i = 0; i < r->header_count; i++) {
        trace_bytes(t, r->headers[i].name, strlen(r->headers[i].name));
        trace_bytes(t, r->headers[i].value, r->headers[i].value_len);
    }
    trace_bytes(t, r->body, r->body_len);
    trace_end_entry(t);
}

static void check_error(const struct http_parser *p)
{
    const char *reason = NULL;
    int status = http_parse_error(p, &reason);

    FUZZ_CHECK(status == 400 || status == 417 || status == 431 || status == 501);
    FUZZ_CHECK(reason != NULL && reason[0] != '\0');
    for (const char *c = reason; *c; c++)
        FUZZ_CHECK(*c >= 0x20 && *c < 0x7f);
    FUZZ_CHECK(http_parse_request(p) == NULL);
}

/*
 * Parses s[0..len) as the server would, each read ending at the next of
 * cuts[] (ascending, the last one len); fresh: a new parser per request
 * instead of http_parse_reset().  Appends what it parsed to t.
 */
static void run(const struct parse_limits *lim, const char *s, size_t len, const size_t *cuts,
                int fresh, struct trace *t)
{
    struct http_parser p;
    size_t off = 0, start = 0, c = 0;

    http_parse_init(&p, lim->header, lim->body);
    while (off < len) {
        while (cuts[c] <= off)
            c++;
        size_t n = cuts[c] - off, used = n + 1;
        enum http_parse_result r = http_parse_feed(&p, s + off, n, &used);
        FUZZ_CHECK(used <= n);
        FUZZ_CHECK(p.cap <= lim->header + lim->body + 1);
        FUZZ_CHECK(http_parse_started(&p));
        if (r == HTTP_PARSE_NEED_MORE) {
            FUZZ_CHECK(used == n);
            FUZZ_CHECK(http_parse_request(&p) == NULL && http_parse_error(&p, NULL) == 0);
            off += n;
            continue;
        }
        off += used;
        if (r == HTTP_PARSE_ERROR) {
            check_error(&p);
            FUZZ_CHECK(http_parse_feed(&p, s + off, len - off, &used) == HTTP_PARSE_ERROR &&
                       used == 0);
            trace_put(t, "E", 1);
            trace_size(t, (size_t)http_parse_error(&p, NULL));
            trace_end_entry(t);
            http_parse_free(&p);
            return;
        }
        FUZZ_CHECK(r == HTTP_PARSE_DONE);
        const struct http_parse_request *req = http_parse_request(&p);
        FUZZ_CHECK(req != NULL && http_parse_error(&p, NULL) == 0);
        FUZZ_CHECK(!http_parse_wants_continue(&p));
        check_request(req, lim, s + start, off - start);
        trace_request(t, req, off);
        FUZZ_CHECK(http_parse_feed(&p, s + off, len - off, &used) == HTTP_PARSE_DONE && used == 0);
        if (fresh) {
            http_parse_free(&p);
            http_parse_init(&p, lim->header, lim->body);
        } else {
            http_parse_reset(&p);
        }
        FUZZ_CHECK(!http_parse_started(&p) && http_parse_request(&p) == NULL);
        start = off;
    }
    /* The stream ran out: an unfinished request, or none. */
    trace_put(t, "N", 1);
    trace_size(t, (size_t)http_parse_started(&p));
    trace_end_entry(t);
    http_parse_free(&p);
}

/*
 * Where the reads end under pattern 0..7: every byte, every 2, 3 or 7 bytes;
 * after each LF (whole lines); before each LF (a CR parted from its LF); at
 * the middle; lengths of 1..16 from a generator seeded by the input.  Fills
 * cuts[] (len + 1 entries at most) and ends it with len.
 */
static void cut_stream(unsigned pattern, const char *s, size_t len, size_t *cuts)
{
    static const size_t steps[] = {1, 2, 3, 7};
    size_t k = 0;
    uint32_t state = (uint32_t)len * 2654435761u + pattern;

    for (size_t at = 1; at < len; at++) {
        int cut;
        switch (pattern) {
        case 0:
        case 1:
        case 2:
        case 3:
            cut = at % steps[pattern] == 0;
            break;
        case 4:
            cut = s[at - 1] == '\n';
            break;
        case 5:
            cut = s[at] == '\n';
            break;
        case 6:
            cut = at == len / 2;
            break;
        default:
            state = state * 1103515245u + 12345u;
            cut = (state >> 16) % 16 == 0;
            break;
        }
        if (cut)
            cuts[k++] = at;
    }
    cuts[k] = len;
}

/* Whether two runs parsed the same. */
static int same_trace(const struct trace *a, const struct trace *b)
{
    return a->len == b->len && memcmp(a->buf, b->buf, a->len) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const struct parse_limits *lim = &limits_table[data[0] & 3];
    unsigned pattern = (data[0] >> 2) & 7;
    const char *s = (const char *)data + 1;
    size_t len = size - 1;
    size_t *whole = malloc(sizeof *whole), *cuts = malloc((len + 1) * sizeof *cuts);
    struct trace once = {0}, split = {0}, fresh = {0};

    if (whole == NULL || cuts == NULL)
        abort();
    whole[0] = len;
    cut_stream(pattern, s, len, cuts);
    run(lim, s, len, whole, 0, &once);
    run(lim, s, len, cuts, 0, &split);
    run(lim, s, len, whole, 1, &fresh);
    FUZZ_CHECK(same_trace(&once, &split));
    FUZZ_CHECK(same_trace(&once, &fresh));

    /* Larger limits accept what smaller ones do, the same way: every request
     * accepted under lim comes out alike under the defaults. */
    if (lim != DEFAULT_LIMITS && !once.truncated) {
        struct trace wide = {0};
        run(DEFAULT_LIMITS, s, len, whole, 0, &wide);
        for (size_t i = 0; i < once.entries && once.buf[i ? once.entry_end[i - 1] : 0] == 'D';
             i++) {
            size_t from = i ? once.entry_end[i - 1] : 0;
            FUZZ_CHECK(i < wide.entries && wide.entry_end[i] == once.entry_end[i] &&
                       memcmp(wide.buf + from, once.buf + from, once.entry_end[i] - from) == 0);
        }
        free(wide.buf);
    }
    free(once.buf);
    free(split.buf);
    free(fresh.buf);
    free(whole);
    free(cuts);
    return 0;
}
