#include "ctl/ctl_http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"

int ctl_url_parse(const char *text, struct ctl_url *u, char *err, size_t errlen)
{
    static const char scheme[] = "http://";
    memset(u, 0, sizeof *u);
    if (strncasecmp(text, scheme, sizeof scheme - 1) != 0) {
        snprintf(err, errlen,
                 "\"%.80s\" is not an http:// URL (https is not supported: the "
                 "admin listener is internal)",
                 text);
        return -1;
    }
    const char *h = text + sizeof scheme - 1, *end;
    if (*h == '[') {
        end = strchr(h, ']');
        if (!end || end == h + 1)
            goto bad;
        u->v6 = 1;
        h++;
    } else {
        end = h + strcspn(h, ":/");
    }
    size_t hl = (size_t)(end - h);
    if (hl == 0 || hl >= sizeof u->host || memchr(h, '@', hl))
        goto bad; /* no user info: a password in a URL is a password in argv */
    memcpy(u->host, h, hl);
    const char *p = end + u->v6;
    u->port = 80;
    if (*p == ':') {
        char *num_end;
        long port = strtol(p + 1, &num_end, 10);
        if (num_end == p + 1 || port < 1 || port > 65535)
            goto bad;
        u->port = (int)port;
        p = num_end;
    }
    if (*p == '/')
        p++;
    if (*p == '\0')
        return 0;
bad:
    snprintf(err, errlen, "\"%.80s\" is not a service URL of the form http://HOST[:PORT]", text);
    return -1;
}

/* The value of header 'name' in the head [from, to), or NULL; *len its length. */
static const char *header_value(const char *from, const char *to, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    for (const char *line = from; line < to;) {
        const char *eol = memchr(line, '\n', (size_t)(to - line));
        if (!eol)
            eol = to;
        if ((size_t)(eol - line) > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            const char *e = eol;
            while (e > v && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
                e--;
            *len = (size_t)(e - v);
            return v;
        }
        line = eol + 1;
    }
    return NULL;
}

int ctl_http_parse(const char *buf, size_t len, int closed, int *status, size_t *body_off,
                   size_t *body_len)
{
    if (len >= 5 && memcmp(buf, "HTTP/", 5) != 0)
        return -1;
    const char *head_end = NULL;
    for (size_t i = 0; i + 3 < len && !head_end; i++)
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0)
            head_end = buf + i + 4;
    if (!head_end)
        return 1;
    /* "HTTP/1.x NNN reason" */
    if (len < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ' || buf[9] < '1' ||
        buf[9] > '5' || buf[10] < '0' || buf[10] > '9' || buf[11] < '0' || buf[11] > '9')
        return -1;
    *status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    size_t vl;
    const char *te = header_value(buf, head_end, "Transfer-Encoding", &vl);
    if (te)
        return -1;
    *body_off = (size_t)(head_end - buf);
    size_t have = len - *body_off;
    const char *cl = header_value(buf, head_end, "Content-Length", &vl);
    if (!cl) {
        *body_len = have;
        return closed ? 0 : 1; /* the body ends where the connection does */
    }
    size_t want = 0;
    for (size_t i = 0; i < vl; i++) {
        if (cl[i] < '0' || cl[i] > '9' || want > CTL_HTTP_ANSWER_MAX)
            return -1;
        want = want * 10 + (size_t)(cl[i] - '0');
    }
    if (vl == 0 || want > CTL_HTTP_ANSWER_MAX)
        return -1;
    if (have < want)
        return 1;
    *body_len = want;
    return 0;
}

/* Waits until fd is ready for 'events' or the deadline passes.  Returns 0,
 * or -1 (timed out, or poll failed) with err set. */
static int wait_fd(int fd, short events, int64_t deadline, const char *what, char *err,
                   size_t errlen)
{
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0) {
            snprintf(err, errlen, "timed out %s", what);
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR) {
            snprintf(err, errlen, "%s: %s", what, strerror(errno));
            return -1;
        }
    }
}

/* A non-blocking socket connected to u by the deadline, or -1 with err. */
static int dial(const struct ctl_url *u, int64_t deadline, char *err, size_t errlen)
{
    char port[8];
    snprintf(port, sizeof port, "%d", u->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(u->host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", u->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    snprintf(err, errlen, "no address for %s", u->host);
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        if (!ok && errno == EINPROGRESS) {
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (wait_fd(fd, POLLOUT, deadline, "connecting", err, errlen) == 0) {
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
                    soerr = errno;
                ok = soerr == 0;
                if (!ok)
                    snprintf(err, errlen, "connect: %s", strerror(soerr));
            }
        } else if (!ok) {
            snprintf(err, errlen, "connect: %s", strerror(errno));
        }
        if (!ok) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* Writes all of buf by the deadline.  Returns 0 or -1 with err. */
static int send_all(int fd, const char *buf, size_t len, int64_t deadline, char *err, size_t errlen)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT, deadline, "sending the request", err, errlen) != 0)
                return -1;
        } else {
            snprintf(err, errlen, "sending the request: %s", strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The request's text (malloc'd); the token only ever goes here. */
static char *request_text(const struct ctl_url *u, const struct ctl_http_request *q, size_t *len)
{
    size_t blen = q->body ? strlen(q->body) : 0;
    size_t cap = 512 + strlen(q->path) + strlen(u->host) + blen +
                 (q->token ? strlen(q->token) : 0) + (q->idem ? strlen(q->idem) : 0);
    char *t = xmalloc(cap);
    int n = snprintf(t, cap,
                     "%s %s HTTP/1.1\r\nHost: %s%s%s:%d\r\nConnection: close\r\n"
                     "Accept: application/json\r\nUser-Agent: seckillctl\r\n",
                     q->method, q->path, u->v6 ? "[" : "", u->host, u->v6 ? "]" : "", u->port);
    if (q->token)
        n += snprintf(t + n, cap - (size_t)n, "Authorization: Bearer %s\r\n", q->token);
    if (q->idem)
        n += snprintf(t + n, cap - (size_t)n, "Idempotency-Key: %s\r\n", q->idem);
    if (q->body)
        n += snprintf(t + n, cap - (size_t)n,
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
    else if (strcmp(q->method, "GET") != 0)
        n += snprintf(t + n, cap - (size_t)n, "Content-Length: 0\r\n");
    n += snprintf(t + n, cap - (size_t)n, "\r\n%s", q->body ? q->body : "");
    *len = (size_t)n;
    return t;
}

int ctl_http_do(const struct ctl_url *u, const struct ctl_http_request *q,
                struct ctl_http_answer *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    int64_t deadline = clock_mono_ms() + q->timeout_ms;
    int fd = dial(u, deadline, err, errlen);
    if (fd < 0)
        return -1;
    size_t len;
    char *req = request_text(u, q, &len);
    int rc = send_all(fd, req, len, deadline, err, errlen);
    memset(req, 0, len); /* it held the token */
    free(req);
    size_t cap = 4096, got = 0, off = 0, blen = 0;
    char *buf = xmalloc(cap + 1);
    int parsed = 1;
    while (rc == 0 && parsed == 1) {
        if (got == cap) {
            if (cap >= CTL_HTTP_ANSWER_MAX) {
                snprintf(err, errlen, "the answer is longer than %d bytes", CTL_HTTP_ANSWER_MAX);
                rc = -1;
                break;
            }
            cap *= 2;
            buf = xrealloc(buf, cap + 1);
        }
        ssize_t n = recv(fd, buf + got, cap - got, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            rc = wait_fd(fd, POLLIN, deadline, "waiting for the answer", err, errlen);
            continue;
        }
        if (n < 0) {
            snprintf(err, errlen, "reading the answer: %s", strerror(errno));
            rc = -1;
            break;
        }
        got += (size_t)n;
        parsed = ctl_http_parse(buf, got, n == 0, &a->status, &off, &blen);
        if (parsed < 0) {
            snprintf(err, errlen, "the answer is not HTTP/1.x as seckilld writes it");
            rc = -1;
        } else if (n == 0 && parsed == 1) {
            snprintf(err, errlen, "the connection closed %s the answer",
                     got ? "in the middle of" : "without");
            rc = -1;
        }
    }
    close(fd);
    if (rc != 0) {
        free(buf);
        memset(a, 0, sizeof *a);
        return -1;
    }
    memmove(buf, buf + off, blen);
    buf[blen] = '\0';
    a->body = buf;
    a->body_len = blen;
    return 0;
}

void ctl_http_answer_free(struct ctl_http_answer *a)
{
    free(a->body);
    a->body = NULL;
}
