/*
 * ctl_http: the small blocking HTTP/1.1 client of seckillctl's admin
 * commands (sku, order, sale, health), one request per connection.
 *
 * Plain http:// only (the admin API is on the internal listener, on a
 * trusted network or loopback).  Every wait -- connect, write, read -- ends
 * at one deadline, the request's whole time (--timeout-ms); the answer is
 * read until the server closes (the request says Connection: close) or its
 * Content-Length is in, at most CTL_HTTP_ANSWER_MAX bytes.  A host name is
 * resolved by getaddrinfo, bounded by the resolver's own timeouts (an
 * address never waits on it).
 */
#ifndef SECKILL_CTL_HTTP_H
#define SECKILL_CTL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define CTL_HTTP_ANSWER_MAX (16 * 1024 * 1024) /* bytes of one answer, head and body */
#define CTL_HTTP_HOST_MAX 256

/* A service URL: http://HOST[:PORT][/], HOST a name, an IPv4 address or an
 * IPv6 one in brackets. */
struct ctl_url {
    char host[CTL_HTTP_HOST_MAX]; /* without brackets */
    int port;
    int v6; /* the host was bracketed: write it so in Host */
};

/* Parses text into u.  Returns 0, or -1 with the reason in err. */
int ctl_url_parse(const char *text, struct ctl_url *u, char *err, size_t errlen);

/* One request's answer. */
struct ctl_http_answer {
    int status;
    char *body; /* NUL-terminated, malloc'd (caller frees); "" when none */
    size_t body_len;
};

/* One request: what to send. */
struct ctl_http_request {
    const char *method; /* "GET", "POST", "PATCH" */
    const char *path;   /* "/admin/v1/skus?after=0", already escaped */
    const char *token;  /* bearer token, or NULL */
    const char *body;   /* JSON text, or NULL */
    const char *idem;   /* Idempotency-Key, or NULL */
    int64_t timeout_ms; /* the whole exchange */
};

/* Sends q to u and reads the answer into a.  Returns 0, or -1 with the
 * reason in err (unreachable, timed out, a malformed or too long answer);
 * a is then empty.  The token is never written anywhere but the request. */
int ctl_http_do(const struct ctl_url *u, const struct ctl_http_request *q,
                struct ctl_http_answer *a, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Parses the answer read so far (buf[0..len); 'closed': the server has
 * closed, nothing more comes): the status, and the body's offset and length
 * (Content-Length when given, else all that follows the head).  Returns 0
 * when it is whole, 1 when more must be read (the head is not complete, the
 * body is shorter than its Content-Length, or it has none and the server
 * has not closed), -1 when it is not an HTTP/1.x answer or is chunked (the
 * service never chunks).  Pure. */
int ctl_http_parse(const char *buf, size_t len, int closed, int *status, size_t *body_off,
                   size_t *body_len);

void ctl_http_answer_free(struct ctl_http_answer *a);

#endif
