#include "http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/fmt.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/validate.h"
#include "http/peer_key.h"
#include "http/proxy_header.h"

/* How often a closing loop looks whether its reservations in flight ended. */
#define SHUTDOWN_POLL_US 10000
/* One read() per readable event takes at most this much; a request of ours
 * (headers and body within their limits) is far smaller. */
#define READ_CHUNK_BYTES 16384
/* What a connection's buffers start at, and go back to once a larger
 * request or answer is done: a buyer's requests and answers fit, and one big
 * answer (a /metrics scrape) must not stay held by an idle connection. */
#define CONN_BUF_BASE_BYTES (READ_CHUNK_BYTES / 4)
/* Connections accepted per wake-up of one loop, so that a burst of new
 * connections cannot starve the requests of open ones. */
#define ACCEPT_BATCH 64
/* Out of file descriptors: the listener rests this long instead of waking
 * again at once for the connection it cannot take. */
#define ACCEPT_PAUSE_MS 100
/* The answer's first bytes grow by at most this much (status line, date,
 * length, connection) beyond the handler's headers. */
#define HEAD_SLACK_BYTES 256
/* Buckets of the per-address table: a power of two above the connection cap
 * keeps chains short. */
#define ADDR_BUCKETS_PER_CONNECTION 2
/* HTTP-date: "Sun, 06 Nov 1994 08:49:37 GMT" and its NUL. */
#define HTTP_DATE_BYTES 30

/* What the server answers before (or instead of) a route. */
const struct http_answer http_protocol_answers[] = {
    {400, "invalid_request"},    /* malformed or ambiguous framing, body over max_body_bytes */
    {408, "request_timeout"},    /* not complete within http_request_timeout_ms */
    {417, "expectation_failed"}, /* an Expect other than 100-continue */
    {431, "headers_too_large"},  /* header block over max_header_bytes */
    {501, "not_implemented"},    /* unknown method, transfer coding other than chunked */
    {0, NULL}};
#define PROTOCOL_ANSWERS 5
_Static_assert(sizeof http_protocol_answers / sizeof http_protocol_answers[0] ==
                   PROTOCOL_ANSWERS + 1,
               "PROTOCOL_ANSWERS counts http_protocol_answers");

/* The latency histograms of the answers above, route="protocol" (made at start). */
static struct metrics_hist *protocol_hists[PROTOCOL_ANSWERS];

/* One client (its peer_key_of key: an IPv6 /64 is one client) and its open
 * connections (the per-address cap). */
struct addr_count {
    struct addr_count *next;
    long n;
    char key[PEER_KEY_MAX];
};

enum conn_timer { TIMER_NONE, TIMER_IDLE, TIMER_REQUEST, TIMER_WRITE };

struct http_conn {
    struct http_loop *loop;
    struct http_conn *prev, *next; /* the loop's connections, open or closed-but-held */
    evutil_socket_t fd;            /* -1 once closed */
    struct event ev_read, ev_write, ev_timer;
    enum conn_timer timer;
    struct http_parser parser;
    char peer[INET6_ADDRSTRLEN];
    /* bytes read past the current request (pipelined), not parsed yet */
    char *pend;
    size_t pend_off, pend_len, pend_cap;
    /* the answer being written */
    char *out;
    size_t out_off, out_len, out_cap;
    /* headers the handler added, "Name: value\r\n" each */
    char *xh;
    size_t xh_len, xh_cap;
    int busy;          /* a request is with the handler: dispatched, not answered */
    int replying;      /* out holds an answer (not just "100 Continue") */
    int close_after;   /* close once the answer is written */
    int continue_sent; /* "100 Continue" went out for this request */
    int head;          /* the request is a HEAD: headers only */
    int keep_alive;
    int version_minor;
    int64_t started_us;              /* the request's first byte (clock_mono_us) */
    struct metrics_hist *reply_hist; /* the answer's latency histogram, set by its check */
    int counted;                     /* holds a place under the per-address cap for 'peer' */
    int awaiting_proxy;              /* a trusted proxy's connection: its PROXY header first */
    char proxy_buf[PROXY_HEADER_MAX];
    size_t proxy_len;
};

struct http_loop {
    struct http_server *srv;
    struct event_base *base;
    evutil_socket_t listen_fd;
    struct event ev_accept, ev_accept_pause;
    int accepting;
    void *state; /* its listener's hooks' (struct http_loop_hooks), or NULL */
    struct http_conn *conns;
    time_t date_at;
    char date[HTTP_DATE_BYTES];
    char rbuf[READ_CHUNK_BYTES];
    pthread_t tid;
    int started;
};

struct http_server {
    const struct cfg *cfg;
    struct http_listen ln;
    struct workers *workers;
    http_dispatch_fn *dispatch;
    size_t n;
    struct http_loop *loops;
    atomic_long open; /* connections open, all loops */
    pthread_mutex_t addr_mu;
    struct addr_count **addr_buckets;
    size_t addr_nbuckets; /* a power of two */
    uint64_t addr_seed;   /* this process's own: nobody can aim keys at one chain */
};

const struct cfg *http_loop_cfg(const struct http_loop *l)
{
    return l->srv->cfg;
}

struct event_base *http_loop_base(const struct http_loop *l)
{
    return l->base;
}

void *http_loop_state(struct http_loop *l)
{
    return l->state;
}

static struct timeval ms_to_tv(int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* ---- the per-address cap ----------------------------------------------- */

static size_t addr_hash(const struct http_server *s, const char *key)
{
    return (size_t)peer_key_hash(s->addr_seed, key) & (s->addr_nbuckets - 1);
}

/* Counts one more connection of 'addr'.  Returns 0, or -1 (nothing counted)
 * when the client already holds http_max_connections_per_addr. */
static int addr_take(struct http_server *s, const char *addr)
{
    int rc = 0;
    char key[PEER_KEY_MAX];
    peer_key_of(addr, key, sizeof key);
    pthread_mutex_lock(&s->addr_mu);
    struct addr_count **b = &s->addr_buckets[addr_hash(s, key)], *e = *b;
    while (e && strcmp(e->key, key) != 0)
        e = e->next;
    if (!e) {
        e = xcalloc(1, sizeof *e);
        snprintf(e->key, sizeof e->key, "%s", key);
        e->next = *b;
        *b = e;
    }
    if (e->n >= s->cfg->http_max_connections_per_addr)
        rc = -1;
    else
        e->n++;
    pthread_mutex_unlock(&s->addr_mu);
    return rc;
}

/* Counts one connection of 'addr' less; forgets the address at zero. */
static void addr_give(struct http_server *s, const char *addr)
{
    char key[PEER_KEY_MAX];
    peer_key_of(addr, key, sizeof key);
    pthread_mutex_lock(&s->addr_mu);
    struct addr_count **p = &s->addr_buckets[addr_hash(s, key)];
    while (*p && strcmp((*p)->key, key) != 0)
        p = &(*p)->next;
    struct addr_count *e = *p;
    if (e && --e->n <= 0) {
        *p = e->next;
        free(e);
    }
    pthread_mutex_unlock(&s->addr_mu);
}

/* ---- connections -------------------------------------------------------- */

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);
static void on_timer(evutil_socket_t fd, short what, void *arg);
static void protocol_error(struct http_conn *c, int status, const char *reason);

/* Makes room for n more bytes in a connection buffer (aborts without
 * memory); seckill_http_connection_buffer_bytes counts what they hold. */
static void reserve_bytes(char **buf, size_t *cap, size_t len, size_t n)
{
    if (len + n <= *cap)
        return;
    size_t want = *cap ? *cap : CONN_BUF_BASE_BYTES;
    while (want < len + n)
        want *= 2;
    char *b = xrealloc(*buf, want);
    metrics_add(M_HTTP_BUFFER_BYTES, (long)(want - *cap));
    *buf = b;
    *cap = want;
}

/* Gives an empty buffer that grew past CONN_BUF_BASE_BYTES back (the next
 * use starts at the base again); 'all': whatever its size (the connection
 * goes). */
static void release_bytes(char **buf, size_t *cap, int all)
{
    if (*cap == 0 || (!all && *cap <= CONN_BUF_BASE_BYTES))
        return;
    metrics_add(M_HTTP_BUFFER_BYTES, -(long)*cap);
    free(*buf);
    *buf = NULL;
    *cap = 0;
}

/* The deadlines are read as each is set: a reload changes them for the
 * next one set, never one that runs. */
static void set_timer(struct http_conn *c, enum conn_timer t)
{
    const struct cfg *cfg = c->loop->srv->cfg;
    c->timer = t;
    if (t == TIMER_NONE) {
        evtimer_del(&c->ev_timer);
        return;
    }
    struct timeval tv = ms_to_tv(t == TIMER_IDLE      ? CFG_LIVE(cfg, http_idle_timeout_ms)
                                 : t == TIMER_REQUEST ? CFG_LIVE(cfg, http_request_timeout_ms)
                                                      : CFG_LIVE(cfg, http_write_timeout_ms));
    evtimer_add(&c->ev_timer, &tv);
}

/* Frees c: its socket is closed and no handler holds it. */
static void conn_free(struct http_conn *c)
{
    struct http_loop *l = c->loop;
    if (c->prev)
        c->prev->next = c->next;
    else
        l->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    metrics_add(M_HTTP_BUFFER_BYTES, -(long)http_parse_buffer_bytes(&c->parser));
    http_parse_free(&c->parser);
    release_bytes(&c->pend, &c->pend_cap, 1);
    release_bytes(&c->out, &c->out_cap, 1);
    release_bytes(&c->xh, &c->xh_cap, 1);
    free(c);
}

/* Closes c's socket and gives back its places under the caps; frees c unless
 * a handler still holds its request (then the reply frees it).  The caller
 * must not touch c afterwards. */
static void conn_close(struct http_conn *c)
{
    if (c->fd >= 0) {
        event_del(&c->ev_read);
        event_del(&c->ev_write);
        evtimer_del(&c->ev_timer);
        evutil_closesocket(c->fd);
        c->fd = -1;
        atomic_fetch_sub(&c->loop->srv->open, 1);
        metrics_add(M_HTTP_CONNECTIONS_OPEN, -1);
        if (c->counted)
            addr_give(c->loop->srv, c->peer);
    }
    if (!c->busy)
        conn_free(c);
}

/* Ready for the next request: read it from what is pending, else from the
 * socket, within http_idle_timeout_ms. */
static void conn_next(struct http_conn *c)
{
    size_t held = http_parse_buffer_bytes(&c->parser);
    http_parse_reset(&c->parser);
    metrics_add(M_HTTP_BUFFER_BYTES, (long)http_parse_buffer_bytes(&c->parser) - (long)held);
    c->xh_len = 0;
    release_bytes(&c->xh, &c->xh_cap, 0);
    c->continue_sent = 0;
    c->replying = 0;
    set_timer(c, TIMER_IDLE);
    event_add(&c->ev_read, NULL);
    /* Pipelined bytes are parsed from the loop, never from inside the reply
     * that just ended: no recursion however many requests are queued. */
    if (c->pend_off < c->pend_len)
        event_active(&c->ev_read, EV_READ, 0);
}

/* Writes what out holds.  Returns 0, or -1 when c was closed (and maybe
 * freed).  When an answer is complete, moves on to the next request. */
static int conn_flush(struct http_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(&c->ev_write, NULL);
            /* One deadline for the whole answer, from its first stall: a
             * client reading a byte now and then must not keep its place by
             * re-arming it. */
            if (c->replying && c->timer != TIMER_WRITE)
                set_timer(c, TIMER_WRITE);
            return 0;
        }
        conn_close(c);
        return -1;
    }
    c->out_off = c->out_len = 0;
    release_bytes(&c->out, &c->out_cap, 0);
    event_del(&c->ev_write);
    if (!c->replying)
        return 0; /* an interim "100 Continue": the request goes on */
    if (c->close_after) {
        conn_close(c);
        return -1;
    }
    conn_next(c);
    return 0;
}

/* The loop's cached HTTP-date of this second. */
static const char *loop_date(struct http_loop *l)
{
    time_t now = time(NULL);
    if (now != l->date_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(l->date, sizeof l->date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        l->date_at = now;
    }
    return l->date;
}

static const char *reason_phrase(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 417:
        return "Expectation Failed";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

/* Appends s (n bytes) to c's answer. */
static void out_add(struct http_conn *c, const char *s, size_t n)
{
    reserve_bytes(&c->out, &c->out_cap, c->out_len, n);
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
}

/*
 * The one way an answer leaves: status line, our headers, the handler's,
 * body parts b1 and b2 (either may be empty; none for HEAD).  Ends the
 * request: a handler's request is released (a connection closed meanwhile is
 * freed here).
 */
static void send_answer(struct http_conn *c, int status, const char *content_type,
                        const char *extra_headers, const char *b1, size_t n1, const char *b2,
                        size_t n2)
{
    /* The request's latency: first byte to answer queued (a few nanoseconds,
     * no lock: core/metrics.h). */
    metrics_hist_observe(c->reply_hist, clock_mono_us() - c->started_us);
    c->reply_hist = NULL;
    c->busy = 0;
    if (c->fd < 0) {
        conn_free(c); /* the client left while the handler worked */
        return;
    }
    if (!c->keep_alive)
        c->close_after = 1;
    /* "HTTP/1.1 <status> <reason>\r\nDate: <date>\r\nContent-Type: <type>\r\n
     * Content-Length: <n>\r\n[Connection: ...\r\n]", written by hand: the
     * snprintf was a tenth of an answer's instructions. */
    char head[HEAD_SLACK_BYTES + HTTP_DATE_BYTES], *p = head;
    const char *reason = reason_phrase(status), *date = loop_date(c->loop);
    const char *conn = c->close_after          ? "Connection: close\r\n"
                       : c->version_minor == 0 ? "Connection: keep-alive\r\n"
                                               : "";
    size_t rl = strlen(reason), dl = strlen(date), tl = strlen(content_type), cl = strlen(conn);
    if (status < 100 || status > 999 || rl + dl + tl + cl + 80 + FMT_I64_MAX > sizeof head)
        abort(); /* the fixed parts cannot outgrow head */
    memcpy(p, "HTTP/1.1 ", 9);
    p += 9 + fmt_i64(p + 9, status);
    *p++ = ' ';
    memcpy(p, reason, rl);
    p += rl;
    memcpy(p, "\r\nDate: ", 8);
    memcpy(p + 8, date, dl);
    p += 8 + dl;
    memcpy(p, "\r\nContent-Type: ", 16);
    memcpy(p + 16, content_type, tl);
    p += 16 + tl;
    memcpy(p, "\r\nContent-Length: ", 18);
    p += 18 + fmt_i64(p + 18, (int64_t)(n1 + n2));
    memcpy(p, "\r\n", 2);
    memcpy(p + 2, conn, cl);
    p += 2 + cl;
    size_t n = (size_t)(p - head);
    size_t body = c->head ? 0 : n1 + n2;
    reserve_bytes(&c->out, &c->out_cap, c->out_len,
                  n + strlen(extra_headers) + c->xh_len + 2 + body);
    out_add(c, head, n);
    out_add(c, extra_headers, strlen(extra_headers));
    out_add(c, c->xh ? c->xh : "", c->xh_len);
    out_add(c, "\r\n", 2);
    if (!c->head) {
        out_add(c, b1, n1);
        out_add(c, b2, n2);
    }
    c->replying = 1;
    event_del(&c->ev_read);
    set_timer(c, TIMER_NONE);
    (void)conn_flush(c);
}

/* Answers what the parser refused (or a late request) and closes. */
static void protocol_error(struct http_conn *c, int status, const char *reason)
{
    const char *code = "invalid_request";
    for (size_t i = 0; http_protocol_answers[i].status; i++)
        if (http_protocol_answers[i].status == status) {
            code = http_protocol_answers[i].error;
            c->reply_hist = protocol_hists[i];
        }
    json_t *o = json_pack("{s:s,s:s}", "error", code, "detail", reason ? reason : "");
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (!text)
        abort();
    json_decref(o);
    c->close_after = 1;
    c->head = 0;
    c->xh_len = 0;
    send_answer(c, status, "application/json", "Cache-Control: no-store\r\n", text, strlen(text),
                "\n", 1);
    free(text);
}

/* A whole request: hand it to the router. */
static void dispatch_request(struct http_conn *c)
{
    const struct http_parse_request *rq = http_parse_request(&c->parser);
    event_del(&c->ev_read); /* the next request waits for this answer */
    set_timer(c, TIMER_NONE);
    c->busy = 1;
    c->head = rq->method == HTTP_METHOD_HEAD;
    c->keep_alive = rq->keep_alive;
    c->version_minor = rq->version_minor;
    /* One deadline for every store wait of the request, from now: the time
     * the client took to send it is http_request_timeout_ms's. */
    struct http_req r = {.conn = c,
                         .loop = c->loop,
                         .deadline_ms =
                             clock_mono_ms() + CFG_LIVE(c->loop->srv->cfg, request_deadline_ms)};
    c->loop->srv->dispatch(&r);
}

/* Feeds data[0..len) to the parser.  'from_pend': data lies in c->pend. */
static void conn_feed(struct http_conn *c, const char *data, size_t len, int from_pend)
{
    if (!http_parse_started(&c->parser)) {
        set_timer(c, TIMER_REQUEST); /* from the first byte to the last, not per read */
        c->started_us = clock_mono_us();
    }
    size_t used = 0, held = http_parse_buffer_bytes(&c->parser);
    enum http_parse_result r = http_parse_feed(&c->parser, data, len, &used);
    metrics_add(M_HTTP_BUFFER_BYTES, (long)http_parse_buffer_bytes(&c->parser) - (long)held);
    if (from_pend) {
        c->pend_off += used;
        if (c->pend_off == c->pend_len) {
            c->pend_off = c->pend_len = 0;
            release_bytes(&c->pend, &c->pend_cap, 0);
        }
    } else if (r == HTTP_PARSE_DONE && used < len) {
        reserve_bytes(&c->pend, &c->pend_cap, c->pend_len, len - used);
        memcpy(c->pend + c->pend_len, data + used, len - used);
        c->pend_len += len - used;
    }
    if (r == HTTP_PARSE_ERROR) {
        const char *reason;
        int status = http_parse_error(&c->parser, &reason);
        metrics_add(M_HTTP_MALFORMED, 1);
        protocol_error(c, status, reason);
    } else if (r == HTTP_PARSE_DONE) {
        dispatch_request(c);
    } else if (http_parse_wants_continue(&c->parser) && !c->continue_sent) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        c->continue_sent = 1;
        out_add(c, cont, sizeof cont - 1);
        (void)conn_flush(c);
    }
}

/* A trusted proxy's connection begins with its PROXY header: read it from
 * data[0..len), then feed what follows as HTTP.  The client it names is the
 * connection's peer from then on (rate limits, logs); a bad header closes
 * the connection (the proxy is misconfigured, or not what it claims). */
static void proxy_feed(struct http_conn *c, const char *data, size_t len)
{
    if (c->proxy_len == 0)
        set_timer(c, TIMER_REQUEST); /* the header within the request deadline, too */
    size_t take = sizeof c->proxy_buf - c->proxy_len;
    if (take > len)
        take = len;
    memcpy(c->proxy_buf + c->proxy_len, data, take);
    size_t have = c->proxy_len + take, used = 0;
    char src[PROXY_ADDR_MAX];
    enum proxy_header_result r = proxy_header_parse(c->proxy_buf, have, src, sizeof src, &used);
    if (r == PROXY_HEADER_MORE) {
        c->proxy_len = have;
        return;
    }
    if (r == PROXY_HEADER_BAD) {
        metrics_add(M_HTTP_MALFORMED, 1);
        log_warn("http: a bad PROXY header from trusted proxy %s; closing", c->peer);
        conn_close(c);
        return;
    }
    c->awaiting_proxy = 0;
    if (src[0])
        snprintf(c->peer, sizeof c->peer, "%s", src);
    /* The header's deadline runs on until the request's first byte, which
     * starts the request's own (conn_feed): a proxy sends both at once. */
    /* the bytes after the header: those of this read past it */
    size_t rest_at = used - c->proxy_len;
    c->proxy_len = 0;
    if (rest_at < len)
        conn_feed(c, data + rest_at, len - rest_at, 0);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    (void)what;
    if (c->pend_off < c->pend_len) {
        conn_feed(c, c->pend + c->pend_off, c->pend_len - c->pend_off, 1);
        return;
    }
    char *buf = c->loop->rbuf;
    ssize_t n = recv(fd, buf, READ_CHUNK_BYTES, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        conn_close(c); /* the client is gone; a half-sent request goes with it */
        return;
    }
    if (c->awaiting_proxy)
        proxy_feed(c, buf, (size_t)n);
    else
        conn_feed(c, buf, (size_t)n, 0);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)conn_flush(arg);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    (void)fd;
    (void)what;
    switch (c->timer) {
    case TIMER_REQUEST:
        metrics_add(M_HTTP_REQUEST_TIMEOUTS, 1);
        protocol_error(c, 408, "request not complete within http_request_timeout_ms");
        return;
    case TIMER_WRITE:
        metrics_add(M_HTTP_WRITE_TIMEOUTS, 1);
        conn_close(c);
        return;
    default: /* idle keep-alive connection */
        conn_close(c);
        return;
    }
}

/* A new connection (already counted under the global cap, and under the
 * per-address one unless it comes from a trusted proxy). */
static void conn_open(struct http_loop *l, evutil_socket_t fd, const char *peer, int proxied)
{
    const struct cfg *cfg = l->srv->cfg;
    struct http_conn *c = xcalloc(1, sizeof *c);
    c->loop = l;
    c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    c->counted = !proxied && !l->srv->ln.internal;
    c->awaiting_proxy = proxied;
    http_parse_init(&c->parser, (size_t)cfg->max_header_bytes, (size_t)cfg->max_body_bytes);
    event_assign(&c->ev_read, l->base, fd, EV_READ | EV_PERSIST, on_read, c);
    event_assign(&c->ev_write, l->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
    evtimer_assign(&c->ev_timer, l->base, on_timer, c);
    c->next = l->conns;
    if (l->conns)
        l->conns->prev = c;
    l->conns = c;
    metrics_add(M_HTTP_CONNECTIONS_OPEN, 1);
    set_timer(c, TIMER_IDLE);
    event_add(&c->ev_read, NULL);
}

/* A new connection from 'peer' under both caps: served (0), or closed at
 * once, unread and counted (-1). */
static int conn_admit(struct http_loop *l, evutil_socket_t fd, const char *peer)
{
    struct http_server *s = l->srv;
    if (atomic_fetch_add(&s->open, 1) >= s->ln.max_connections) {
        atomic_fetch_sub(&s->open, 1);
        metrics_add(M_HTTP_REFUSED_GLOBAL, 1);
        evutil_closesocket(fd);
        return -1;
    }
    /* A load balancer's connections are many from one address: its own
     * maxconn caps them, and the clients they carry are told apart by its
     * PROXY header. */
    int proxied = !s->ln.internal && proxy_header_trusted(s->cfg->http_trusted_proxies, peer);
    if (!proxied && !s->ln.internal && addr_take(s, peer) != 0) {
        atomic_fetch_sub(&s->open, 1);
        metrics_add(M_HTTP_REFUSED_PER_ADDR, 1);
        evutil_closesocket(fd);
        return -1;
    }
    conn_open(l, fd, peer, proxied);
    return 0;
}

static void peer_text(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    const void *a = ss->ss_family == AF_INET6
                        ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
                        : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;
    if (!inet_ntop(ss->ss_family, a, out, (socklen_t)cap))
        snprintf(out, cap, "unknown");
}

static void on_accept_pause_end(evutil_socket_t fd, short what, void *arg)
{
    struct http_loop *l = arg;
    (void)fd;
    (void)what;
    if (l->accepting)
        event_add(&l->ev_accept, NULL);
}

/* New connections: past a cap they are closed at once, before any byte of
 * theirs is read (no parsing, no buffer: a flood costs an accept and a close). */
static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct http_loop *l = arg;
    (void)what;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        evutil_socket_t fd =
            accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                log_warn("accept: %s; pausing the listener", strerror(errno));
                event_del(&l->ev_accept);
                struct timeval tv = ms_to_tv(ACCEPT_PAUSE_MS);
                evtimer_add(&l->ev_accept_pause, &tv);
            }
            return; /* EAGAIN: taken by another loop or none left; others: that one failed */
        }
        char peer[INET6_ADDRSTRLEN];
        peer_text(&ss, peer, sizeof peer);
        (void)conn_admit(l, fd, peer);
    }
}

/* ---- replies ----------------------------------------------------------- */

/* Counts and logs an answer the request's route did not declare; picks the
 * answer's latency histogram (one of the same status for an undeclared one). */
static void check_answer(const struct http_req *r, int status, const char *error)
{
    struct http_conn *c = r->conn;
    c->reply_hist = NULL;
    for (size_t i = 0; r->answers && r->answers[i].status; i++) {
        const struct http_answer *a = &r->answers[i];
        if (a->status != status)
            continue;
        if (r->answer_hists && !c->reply_hist)
            c->reply_hist = r->answer_hists[i];
        if (a->error == error || (a->error && error && strcmp(a->error, error) == 0)) {
            if (r->answer_hists)
                c->reply_hist = r->answer_hists[i];
            return;
        }
    }
    metrics_add(M_HTTP_UNDECLARED, 1);
    log_error("%s answered %d %s, which the route does not declare",
              r->route ? r->route : "(no route)", status, error ? error : "(no error code)");
}

void http_add_header(const struct http_req *r, const char *name, const char *value)
{
    struct http_conn *c = r->conn;
    size_t nl = strlen(name), vl = strlen(value);
    reserve_bytes(&c->xh, &c->xh_cap, c->xh_len, nl + vl + 4);
    memcpy(c->xh + c->xh_len, name, nl);
    memcpy(c->xh + c->xh_len + nl, ": ", 2);
    memcpy(c->xh + c->xh_len + nl + 2, value, vl);
    memcpy(c->xh + c->xh_len + nl + 2 + vl, "\r\n", 2);
    c->xh_len += nl + vl + 4;
}

void http_reply_raw(const struct http_req *r, int status, const char *content_type,
                    const char *body, size_t len)
{
    check_answer(r, status, NULL);
    send_answer(r->conn, status, content_type, "", body, len, "", 0);
}

/* Sends JSON text as the one reply; 'error' is its code, for the check. */
static void send_json(const struct http_req *r, int status, const char *error, const char *text,
                      size_t len)
{
    check_answer(r, status, error);
    send_answer(r->conn, status, "application/json", "Cache-Control: no-store\r\n", text, len, "\n",
                len ? 1 : 0);
}

void http_reply_text(const struct http_req *r, int status, const char *json, size_t len)
{
    send_json(r, status, NULL, json, len);
}

void http_reply_json(const struct http_req *r, int status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text)
        abort();
    send_json(r, status, json_string_value(json_object_get(body, "error")), text ? text : "",
              text ? strlen(text) : 0);
    free(text);
    json_decref(body);
}

void http_reply_error(const struct http_req *r, int status, const char *error, const char *detail)
{
    json_t *o = json_pack("{s:s}", "error", error);
    if (detail)
        json_object_set_new(o, "detail", json_string(detail));
    http_reply_json(r, status, o);
}

void http_reply_unavailable(const struct http_req *r)
{
    http_add_header(r, "Retry-After", "1");
    http_reply_error(r, 503, "unavailable",
                     r->deadline_ms > 0 && clock_mono_ms() >= r->deadline_ms
                         ? "the backing stores did not answer within request_deadline_ms; try "
                           "again"
                         : "a backing store did not answer; try again");
}

void http_reply_store_full(const struct http_req *r, const char *detail)
{
    char secs[24];
    snprintf(secs, sizeof secs, "%lld", (long long)http_loop_cfg(r->loop)->full_retry_after_s);
    http_add_header(r, "Retry-After", secs);
    http_reply_error(r, 503, "store_full",
                     detail ? detail
                            : "the reservation store is full and nothing was taken or changed; "
                              "try again later");
}

/* ---- request intake ---------------------------------------------------- */

const char *http_header(const struct http_req *r, const char *name)
{
    return http_parse_header_value(&r->conn->parser.req, name);
}

enum http_method http_method(const struct http_req *r)
{
    return r->conn->parser.req.method;
}

const char *http_path(const struct http_req *r)
{
    return r->conn->parser.req.path;
}

const char *http_query(const struct http_req *r)
{
    return r->conn->parser.req.query;
}

const char *http_peer_addr(const struct http_req *r)
{
    return r->conn->peer;
}

char *http_take_json(const struct http_req *r, size_t *len)
{
    if (validate_json_content_type(http_header(r, "Content-Type")) != 0) {
        http_reply_error(r, 400, "invalid_request", "Content-Type must be application/json");
        return NULL;
    }
    const struct http_parse_request *rq = &r->conn->parser.req;
    const struct cfg *c = r->loop->srv->cfg;
    *len = rq->body_len;
    if (*len > (size_t)c->max_body_bytes) { /* the parser refuses it first; kept as a guard */
        char d[96];
        snprintf(d, sizeof d, "body larger than %" PRId64 " bytes", c->max_body_bytes);
        http_reply_error(r, 400, "invalid_request", d);
        return NULL;
    }
    char *b = xmalloc(*len + 1);
    memcpy(b, rq->body, *len);
    b[*len] = '\0';
    return b;
}

size_t http_body_len(const struct http_req *r)
{
    return r->conn->parser.req.body_len;
}

int http_try_submit(const struct http_req *r, struct job *j, int urgent)
{
    j->base = r->loop->base;
    j->urgent = urgent;
    j->deadline_ms = r->deadline_ms;
    return r->loop->srv->workers && workers_submit(r->loop->srv->workers, j) == 0 ? 0 : -1;
}

int http_submit(const struct http_req *r, struct job *j, int urgent)
{
    if (http_try_submit(r, j, urgent) == 0)
        return 0;
    http_reply_unavailable(r);
    return -1;
}

void http_health_read(const struct http_req *r, struct health_report rep[HEALTH_STORES])
{
    struct workers *ws = r->loop->srv->workers;
    health_read(ws ? workers_health(ws) : NULL, rep);
}

int http_req_internal(const struct http_req *r)
{
    return r->loop->srv->ln.internal;
}

/* ---- threads ----------------------------------------------------------- */

static void *loop_main(void *arg)
{
    struct http_loop *th = arg;
    event_base_loop(th->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* Opens the listening socket on "host:port" with our own backlog (libevent's
 * default of 128 overflows when a sale opens thousands of connections at
 * once, and the overflow retries only after a second).  Returns the
 * non-blocking socket, or -1 with err set. */
static evutil_socket_t listen_on(const char *setting, const char *addr, int backlog, char *err,
                                 size_t errlen)
{
    const char *colon = strrchr(addr, ':');
    char host[256];
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host || !colon[1]) {
        snprintf(err, errlen, "%s must be host:port, not \"%s\"", setting, addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                    .ai_socktype = SOCK_STREAM,
                                    .ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_NUMERICSERV};
    struct evutil_addrinfo *ai = NULL;
    if (evutil_getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai) {
        snprintf(err, errlen, "%s \"%s\" does not resolve", setting, addr);
        return -1;
    }
    evutil_socket_t fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    int ok = fd >= 0 && evutil_make_listen_socket_reuseable(fd) == 0 &&
             bind(fd, ai->ai_addr, (socklen_t)ai->ai_addrlen) == 0 && listen(fd, backlog) == 0 &&
             evutil_make_socket_nonblocking(fd) == 0 && evutil_make_socket_closeonexec(fd) == 0;
    evutil_freeaddrinfo(ai);
    if (!ok) {
        snprintf(err, errlen, "%s: cannot listen on %s: %s", setting, addr, strerror(errno));
        if (fd >= 0)
            evutil_closesocket(fd);
        return -1;
    }
    return fd;
}

/* The loop's own parts: its event base. */
static int loop_init(struct http_loop *l, struct http_server *s, char *err, size_t errlen)
{
    l->srv = s;
    l->base = event_base_new();
    if (!l->base) {
        snprintf(err, errlen, "cannot create the HTTP event loop");
        return -1;
    }
    return 0;
}

static int thread_init(struct http_loop *l, struct http_server *s, evutil_socket_t fd, char *err,
                       size_t errlen)
{
    l->listen_fd = fd;
    if (loop_init(l, s, err, errlen) != 0)
        return -1;
    event_assign(&l->ev_accept, l->base, fd, EV_READ | EV_PERSIST, on_accept, l);
    evtimer_assign(&l->ev_accept_pause, l->base, on_accept_pause_end, l);
    if (event_add(&l->ev_accept, NULL) != 0) {
        snprintf(err, errlen, "cannot watch the listening socket");
        return -1;
    }
    l->accepting = 1;
    const struct http_loop_hooks *h = s->ln.hooks;
    if (!h)
        return 0;
    l->state = h->start(l->base, h->arg, err, errlen);
    return l->state ? 0 : -1;
}

/* As many connections as the hard limit allows: each is a descriptor, and
 * the soft limit (often 1024) is far below http_max_connections (a flash
 * sale is thousands of simultaneous connections). */
static void raise_fd_limit(const struct cfg *c)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            log_warn("cannot raise the open file limit");
            return;
        }
    }
    if (rl.rlim_cur != RLIM_INFINITY && (int64_t)rl.rlim_cur < c->http_max_connections)
        log_warn("RLIMIT_NOFILE is %llu, below http_max_connections (%" PRId64
                 "): accept pauses when descriptors run out",
                 (unsigned long long)rl.rlim_cur, c->http_max_connections);
}

/* A server of ln->threads loops, none set up yet, with its tables (aborts
 * without memory). */
static struct http_server *server_new(const struct cfg *c, const struct http_listen *ln,
                                      struct workers *ws, http_dispatch_fn *dispatch)
{
    for (size_t i = 0; i < PROTOCOL_ANSWERS; i++) {
        char labels[METRICS_LABELS_MAX];
        snprintf(labels, sizeof labels, "route=\"protocol\",code=\"%d\"",
                 http_protocol_answers[i].status);
        protocol_hists[i] = metrics_hist_get(MF_HTTP_REQUEST, labels);
    }
    struct http_server *s = xcalloc(1, sizeof *s);
    s->cfg = c;
    s->ln = *ln;
    s->workers = ws;
    s->dispatch = dispatch;
    atomic_init(&s->open, 0);
    pthread_mutex_init(&s->addr_mu, NULL);
    s->addr_seed = peer_key_seed();
    s->addr_nbuckets = 1;
    while (s->addr_nbuckets < (size_t)ln->max_connections * ADDR_BUCKETS_PER_CONNECTION)
        s->addr_nbuckets *= 2;
    s->addr_buckets = xcalloc(s->addr_nbuckets, sizeof *s->addr_buckets);
    s->n = (size_t)ln->threads;
    s->loops = xcalloc(s->n, sizeof *s->loops);
    for (size_t i = 0; i < s->n; i++)
        s->loops[i].listen_fd = -1;
    return s;
}

struct http_server *http_server_bare(const struct cfg *c, http_dispatch_fn *dispatch, char *err,
                                     size_t errlen)
{
    /* the public listener's caps, on one loop */
    const struct http_listen ln = {.setting = "http_addr",
                                   .addr = c->http_addr,
                                   .threads = 1,
                                   .max_connections = c->http_max_connections};
    struct http_server *s = server_new(c, &ln, NULL, dispatch);
    struct http_loop *l = &s->loops[0];
    if (loop_init(l, s, err, errlen) != 0) {
        http_server_stop(s);
        return NULL;
    }
    /* never added: set so that stopping finds them as a listener's */
    event_assign(&l->ev_accept, l->base, -1, 0, on_accept, l);
    evtimer_assign(&l->ev_accept_pause, l->base, on_accept_pause_end, l);
    return s;
}

struct event_base *http_server_base(const struct http_server *s)
{
    return s->loops[0].base;
}

int http_server_adopt(struct http_server *s, int fd, const char *peer)
{
    if (evutil_make_socket_nonblocking(fd) != 0) {
        evutil_closesocket(fd);
        return -1;
    }
    return conn_admit(&s->loops[0], fd, peer);
}

struct http_server *http_server_start(const struct cfg *c, const struct http_listen *ln,
                                      struct workers *ws, http_dispatch_fn *dispatch, char *err,
                                      size_t errlen)
{
    raise_fd_limit(c);
    evutil_socket_t fd = listen_on(ln->setting, ln->addr, (int)c->http_backlog, err, errlen);
    if (fd < 0)
        return NULL;
    struct http_server *s = server_new(c, ln, ws, dispatch);
    for (size_t i = 0; i < s->n; i++) {
        /* Every loop accepts on the one socket; each closes its own copy. */
        evutil_socket_t mine = i + 1 < s->n ? dup(fd) : fd;
        if (mine < 0) {
            snprintf(err, errlen, "cannot share the listening socket");
            goto fail;
        }
        if (mine == fd)
            fd = -1; /* handed over to the last loop */
        if (thread_init(&s->loops[i], s, mine, err, errlen) != 0) {
            if (s->loops[i].listen_fd < 0)
                evutil_closesocket(mine);
            goto fail;
        }
    }
    for (size_t i = 0; i < s->n; i++) {
        if (pthread_create(&s->loops[i].tid, NULL, loop_main, &s->loops[i]) != 0) {
            snprintf(err, errlen, "cannot start HTTP thread");
            goto fail;
        }
        s->loops[i].started = 1;
    }
    return s;
fail:
    if (fd >= 0)
        evutil_closesocket(fd);
    http_server_stop(s);
    return NULL;
}

/* The loop's state is freed (NULL first, so nothing finds it half-freed). */
static void free_state(struct http_loop *l)
{
    void *state = l->state;
    l->state = NULL;
    if (state)
        l->srv->ln.hooks->free(state);
}

/* Last step of a loop: its state goes (seckilld's order desk: buyers still
 * waiting for a commit learn that their order is pending, its Redis clients
 * go), and the loop exits. */
static void close_loop(struct http_loop *l)
{
    free_state(l);
    event_base_loopexit(l->base, NULL);
}

/* While the loop shuts down, the work its state still has under way ends
 * (seckilld: reservations already sent get their real answer, each bounded
 * by its own redis_timeout_ms timer: answering 503 to one the script may
 * still take would break "a 503 took nothing"). */
static void drain_tick(evutil_socket_t fd, short what, void *arg)
{
    struct http_loop *l = arg;
    (void)fd;
    (void)what;
    if (!l->state || l->srv->ln.hooks->pending(l->state) == 0) {
        close_loop(l);
        return;
    }
    struct timeval tick = {0, SHUTDOWN_POLL_US};
    if (event_base_once(l->base, -1, EV_TIMEOUT, drain_tick, l, &tick) != 0)
        close_loop(l);
}

/* Runs on the loop's own thread: from now on no new connection is taken,
 * and the state takes no new work (seckilld: new orders answer 503 at once). */
static void shutdown_on_loop(evutil_socket_t fd, short what, void *arg)
{
    struct http_loop *l = arg;
    l->accepting = 0;
    event_del(&l->ev_accept);
    evtimer_del(&l->ev_accept_pause);
    if (l->state)
        l->srv->ln.hooks->stop(l->state);
    drain_tick(fd, what, arg);
}

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    struct timeval now = {0, 0};
    for (size_t i = 0; i < s->n; i++)
        if (s->loops[i].started && event_base_once(s->loops[i].base, -1, EV_TIMEOUT,
                                                   shutdown_on_loop, &s->loops[i], &now) != 0)
            event_base_loopexit(s->loops[i].base, NULL);
    for (size_t i = 0; i < s->n; i++) {
        struct http_loop *l = &s->loops[i];
        if (l->started)
            pthread_join(l->tid, NULL);
        free_state(l); /* only if the loop never ran */
        /* Last: the connections, and any request nobody answers any more. */
        while (l->conns) {
            l->conns->busy = 0;
            conn_close(l->conns);
        }
        if (l->base) {
            event_del(&l->ev_accept);
            evtimer_del(&l->ev_accept_pause);
            event_base_free(l->base);
        }
        if (l->listen_fd >= 0)
            evutil_closesocket(l->listen_fd);
    }
    for (size_t b = 0; b < s->addr_nbuckets; b++)
        while (s->addr_buckets[b]) {
            struct addr_count *e = s->addr_buckets[b];
            s->addr_buckets[b] = e->next;
            free(e);
        }
    free(s->addr_buckets);
    pthread_mutex_destroy(&s->addr_mu);
    free(s->loops);
    free(s);
}
