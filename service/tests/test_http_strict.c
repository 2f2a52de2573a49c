/*
 * The daemon's HTTP layer over raw sockets: an ambiguous request is refused
 * (400, or 501 for a transfer coding we do not speak) and its connection
 * closed, so a request smuggled behind it is never answered; a client that
 * trickles its request is cut off by the request deadline, and hundreds of
 * such clients do not keep a buyer waiting; a keep-alive connection serves a
 * prompt second request but is closed once left idle past its deadline; the
 * connection caps refuse the extra connection; a known method on the wrong
 * path is 405 with Allow.
 *
 * Waits are bounded generously and the assertions are on outcomes (status,
 * closed or not), never on how fast something happened (the idle close is
 * only required to come within a bound several times its deadline).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "http/proxy_header.h"
#include "http/server.h"

/* The longest any read here waits for the daemon. */
#define WAIT_S 15
/* The slow client's pace, and the deadline the daemon gets in those tests. */
#define TRICKLE_MS 300
#define SLOW_CONNECTIONS 300

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert(fd >= 0);
    struct timeval tv = {WAIT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
                  strerror(errno));
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; /* the daemon closed: what it answered tells the rest */
        p += w;
        n -= (size_t)w;
    }
}

struct answers {
    int count;     /* final answers (100 Continue not counted) */
    int status[8]; /* their statuses, in order */
    int closed;    /* the daemon closed the connection (EOF or reset) */
    int continued; /* a 100 Continue came first */
    char text[65536];
};

/* The next status line at or after p: "HTTP/1.1 " at the start of a line
 * (an error's detail may quote the version too). */
static const char *next_status_line(const char *text, const char *p)
{
    while ((p = strstr(p, "HTTP/1.1 ")) && p != text && p[-1] != '\n')
        p += 9;
    return p;
}

/* Reads until the daemon closes or goes quiet for WAIT_S (or 'want' final
 * answers arrived, when want > 0), then splits the answers. */
static void read_answers(int fd, struct answers *a, int want)
{
    memset(a, 0, sizeof *a);
    size_t got = 0;
    for (;;) {
        ssize_t r = recv(fd, a->text + got, sizeof a->text - 1 - got, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            a->closed = 1;
            break;
        }
        if (r < 0)
            break; /* quiet for WAIT_S: still open */
        got += (size_t)r;
        a->text[got] = '\0';
        /* count complete answers so far */
        int n = 0;
        for (const char *p = a->text; (p = next_status_line(a->text, p)) && n < 8; p += 9)
            if (strncmp(p + 9, "100 ", 4) != 0)
                n++;
        if (want > 0 && n >= want && strstr(a->text, "\r\n\r\n"))
            break;
    }
    for (const char *p = a->text; (p = next_status_line(a->text, p)) && a->count < 8; p += 9) {
        int st = atoi(p + 9);
        if (st == 100)
            a->continued = 1;
        else
            a->status[a->count++] = st;
    }
}

/* Sends raw bytes on a fresh connection and reads what comes back. */
static void exchange(int port, const char *raw, size_t len, struct answers *a, int want)
{
    int fd = connect_to(port);
    send_all(fd, raw, len);
    read_answers(fd, a, want);
    close(fd);
}

static long metric(int port, const char *name)
{
    struct th_response m;
    ck_assert_int_eq(th_http(port, "GET", "/metrics", NULL, NULL, &m), 0);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(m.body, key);
    ck_assert_msg(p, "/metrics lacks %s", name);
    return atol(p + strlen(key));
}

/* A request any test can put behind another: never answered if the first
 * one ends the connection. */
#define SMUGGLED "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"

START_TEST(test_ambiguous_requests_are_refused_and_the_connection_closed)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    static const char nul_value[] =
        "GET /metrics HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n" SMUGGLED;
    const struct {
        const char *what, *raw;
        size_t len;
        int status;
    } cases[] = {
#define CASE(w, r, s) {w, r, sizeof(r) - 1, s}
        CASE("two Content-Length",
             "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
             "Content-Length: 0\r\nContent-Length: 34\r\n\r\n" SMUGGLED,
             400),
        CASE("two Authorization, valid first",
             "GET /admin/v1/skus/1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " TH_ADMIN_TOKEN
             "\r\nAuthorization: Bearer wrong\r\n\r\n" SMUGGLED,
             400),
        CASE("Transfer-Encoding gzip, chunked",
             "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked"
             "\r\n\r\n0\r\n\r\n" SMUGGLED,
             501),
        CASE("Transfer-Encoding with Content-Length",
             "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" SMUGGLED,
             400),
        CASE("space before the colon",
             "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n"
             "\r\n0\r\n\r\n" SMUGGLED,
             400),
        CASE("chunk size 0x18",
             "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
             "\r\n0x18\r\n{\"user_id\":1,\"qty\":1}  \r\n0\r\n\r\n" SMUGGLED,
             400),
        CASE("chunk size +18",
             "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
             "\r\n+18\r\n{\"user_id\":1,\"qty\":1}  \r\n0\r\n\r\n" SMUGGLED,
             400),
        CASE("chunk size with a leading space",
             "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
             "\r\n 18\r\n{\"user_id\":1,\"qty\":1}  \r\n0\r\n\r\n" SMUGGLED,
             400),
        {"NUL in a header value", nul_value, sizeof nul_value - 1, 400},
        CASE("empty header name", "GET /metrics HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n" SMUGGLED, 400),
        CASE("obsolete line folding",
             "GET /metrics HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n" SMUGGLED, 400),
        CASE("bare LF", "GET /metrics HTTP/1.1\nHost: a\n\n" SMUGGLED, 400),
        CASE("missing Host", "GET /metrics HTTP/1.1\r\nX-A: b\r\n\r\n" SMUGGLED, 400),
        CASE("absolute-form target", "GET http://a/metrics HTTP/1.1\r\nHost: a\r\n\r\n" SMUGGLED,
             400),
        CASE("HTTP/1.2", "GET /metrics HTTP/1.2\r\nHost: a\r\n\r\n" SMUGGLED, 400),
        CASE("unknown method", "BREW /metrics HTTP/1.1\r\nHost: a\r\n\r\n" SMUGGLED, 501),
        CASE("two Idempotency-Key",
             "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\nIdempotency-Key: a\r\n"
             "Idempotency-Key: b\r\nContent-Length: 0\r\n\r\n" SMUGGLED,
             400),
#undef CASE
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct answers a;
        exchange(d.port, cases[i].raw, cases[i].len, &a, 0);
        ck_assert_msg(a.count >= 1 && a.status[0] == cases[i].status, "%s: answered %d, want %d",
                      cases[i].what, a.count ? a.status[0] : 0, cases[i].status);
        ck_assert_msg(a.count == 1, "%s: the request behind it was answered too", cases[i].what);
        ck_assert_msg(a.closed, "%s: the connection stayed open", cases[i].what);
        ck_assert_msg(strstr(a.text, "Connection: close\r\n") && strstr(a.text, "\"error\""),
                      "%s: not a closing JSON error: %s", cases[i].what, a.text);
    }
    ck_assert_int_ge(metric(d.port, "seckill_http_malformed_requests_total"),
                     (long)(sizeof cases / sizeof cases[0]));
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_known_method_on_a_path_is_405_with_allow)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    static const char trace[] = "TRACE /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    struct answers a;
    exchange(d.port, trace, sizeof trace - 1, &a, 1);
    ck_assert_int_eq(a.status[0], 405);
    ck_assert_msg(strstr(a.text, "\r\nAllow: GET, HEAD\r\n"), "no Allow: %s", a.text);
    static const char options[] = "OPTIONS /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\n"
                                  "Connection: close\r\n\r\n";
    exchange(d.port, options, sizeof options - 1, &a, 1);
    ck_assert_int_eq(a.status[0], 405);
    ck_assert_msg(strstr(a.text, "\r\nAllow: POST\r\n"), "no Allow: %s", a.text);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_keep_alive_pipelining_head_and_http10)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    /* three pipelined requests: answered in order, the last one closes */
    static const char three[] = "GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n"
                                "GET /api/v1/skus/x HTTP/1.1\r\nHost: a\r\n\r\n"
                                "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    struct answers a;
    exchange(d.port, three, sizeof three - 1, &a, 0);
    ck_assert_int_eq(a.count, 3);
    ck_assert_int_eq(a.status[0], 404);
    ck_assert_int_eq(a.status[1], 400);
    ck_assert_int_eq(a.status[2], 200);
    ck_assert(a.closed);
    /* HTTP/1.0 without keep-alive: one answer, then closed */
    static const char old[] = "GET /healthz HTTP/1.0\r\n\r\n";
    exchange(d.port, old, sizeof old - 1, &a, 0);
    ck_assert_int_eq(a.count, 1);
    ck_assert_int_eq(a.status[0], 200);
    ck_assert(a.closed);
    /* HEAD: the GET's headers, no body */
    static const char head[] = "HEAD /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    exchange(d.port, head, sizeof head - 1, &a, 0);
    ck_assert_int_eq(a.status[0], 200);
    const char *end = strstr(a.text, "\r\n\r\n");
    ck_assert_msg(end && end[4] == '\0', "HEAD answered a body");
    /* Expect: 100-continue gets the interim answer, then the real one */
    static const char cont[] = "POST /api/v1/skus/x/orders HTTP/1.1\r\nHost: a\r\n"
                               "Expect: 100-continue\r\nContent-Length: 2\r\n"
                               "Connection: close\r\n\r\n";
    int fd = connect_to(d.port);
    send_all(fd, cont, sizeof cont - 1);
    char buf[64] = {0};
    ck_assert(recv(fd, buf, sizeof buf - 1, 0) > 0);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0, "got %s", buf);
    send_all(fd, "{}", 2);
    read_answers(fd, &a, 0);
    close(fd);
    ck_assert_int_eq(a.status[0], 400); /* the path id, after the body came */
    th_daemon_stop(&d);
}
END_TEST

/* Sends 'prefix' whole, then 'trickle' a byte every TRICKLE_MS; returns 1 if
 * the daemon cut the connection before the trickle ended. */
static int trickle_is_cut(int port, const char *prefix, const char *trickle, struct answers *a)
{
    int fd = connect_to(port);
    send_all(fd, prefix, strlen(prefix));
    int cut = 0;
    for (const char *p = trickle; *p && !cut; p++) {
        if (send(fd, p, 1, MSG_NOSIGNAL) != 1)
            cut = 1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, TRICKLE_MS) > 0)
            cut = 1;
    }
    read_answers(fd, a, 0);
    close(fd);
    return cut && a->closed;
}

static const char *const deadline_env[] = {"SECKILL_HTTP_REQUEST_TIMEOUT_MS=1000", NULL};

/* 60 bytes at TRICKLE_MS each: 18 s, far past the 1 s deadline. */
#define TRICKLE "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

START_TEST(test_slow_headers_are_cut_by_the_request_deadline)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, deadline_env);
    struct answers a;
    ck_assert_msg(
        trickle_is_cut(d.port, "GET /metrics HTTP/1.1\r\nHost: a\r\nX-Slow: ", TRICKLE, &a),
        "a header trickled at one byte per %d ms was never cut off", TRICKLE_MS);
    ck_assert_msg(a.count == 0 || a.status[0] == 408, "answered %d", a.status[0]);
    ck_assert_int_ge(metric(d.port, "seckill_http_request_timeouts_total"), 1);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_slow_body_is_cut_by_the_request_deadline)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, deadline_env);
    struct answers a;
    ck_assert_msg(trickle_is_cut(d.port,
                                 "POST /api/v1/skus/1/orders HTTP/1.1\r\nHost: a\r\n"
                                 "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n",
                                 TRICKLE, &a),
                  "a body trickled at one byte per %d ms was never cut off", TRICKLE_MS);
    ck_assert_msg(a.count == 0 || a.status[0] == 408, "answered %d", a.status[0]);
    th_daemon_stop(&d);
}
END_TEST

/* The idle deadline here, and the most the test waits for it to close. */
#define IDLE_MS 1000
#define IDLE_CLOSE_BOUND_MS 5000
#define STR_(x) #x
#define STR(x) STR_(x)

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

START_TEST(test_idle_keep_alive_connection_is_closed_by_the_idle_deadline)
{
    th_reset();
    struct th_daemon d;
    /* a request deadline far past the bound: only the idle one can close */
    static const char *const env[] = {"SECKILL_HTTP_IDLE_TIMEOUT_MS=" STR(IDLE_MS),
                                      "SECKILL_HTTP_REQUEST_TIMEOUT_MS=600000", NULL};
    th_daemon_start(&d, env);
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n";
    int fd = connect_to(d.port);
    struct answers a;
    send_all(fd, req, sizeof req - 1);
    read_answers(fd, &a, 1);
    ck_assert_msg(a.count == 1 && a.status[0] == 200 && !a.closed, "first: %d answers, closed %d",
                  a.count, a.closed);
    /* kept alive: a request soon after (well within IDLE_MS) is answered */
    th_sleep_ms(50);
    send_all(fd, req, sizeof req - 1);
    read_answers(fd, &a, 1);
    ck_assert_msg(a.count == 1 && a.status[0] == 200 && !a.closed, "second: %d answers, closed %d",
                  a.count, a.closed);
    /* then idle: the daemon closes it, without a word, within the bound */
    long start = now_ms();
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int ready = poll(&pf, 1, IDLE_CLOSE_BOUND_MS);
    long waited = now_ms() - start;
    ck_assert_msg(ready == 1,
                  "an idle connection (idle deadline %d ms) was still open after %ld ms", IDLE_MS,
                  waited);
    char c;
    ssize_t r = recv(fd, &c, 1, 0);
    ck_assert_msg(r == 0 || (r < 0 && errno == ECONNRESET), "after %ld ms idle: recv %zd (%s)",
                  waited, r, r < 0 ? strerror(errno) : "data");
    close(fd);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_buyers_are_served_while_hundreds_of_slow_clients_wait)
{
    th_reset();
    struct th_daemon d;
    static const char *const env[] = {"SECKILL_HTTP_REQUEST_TIMEOUT_MS=120000", NULL};
    th_daemon_start(&d, env);
    th_create_sku(d.port, 1, 10, 5);
    static int fds[SLOW_CONNECTIONS];
    for (int i = 0; i < SLOW_CONNECTIONS; i++) {
        fds[i] = connect_to(d.port);
        send_all(fds[i], "POST /api/v1/skus/1/orders HTTP/1.1\r\nHo", 39);
    }
    struct th_response r;
    th_order(d.port, 1, 7, 1, NULL, &r);
    ck_assert_msg(r.status == 201, "order answered %d %s", r.status, r.body);
    ck_assert_int_eq(th_http(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_ge(metric(d.port, "seckill_http_connections_open"), SLOW_CONNECTIONS);
    for (int i = 0; i < SLOW_CONNECTIONS; i++)
        close(fds[i]);
    th_daemon_stop(&d);
}
END_TEST

/* Opens connections until one is refused (closed without an answer) or
 * 'most' are open; returns how many stayed open.  fds gets them. */
static int fill_until_refused(int port, int *fds, int most)
{
    for (int i = 0; i < most; i++) {
        fds[i] = connect_to(port);
        send_all(fds[i], SMUGGLED, sizeof SMUGGLED - 1);
        struct answers a;
        read_answers(fds[i], &a, 1);
        if (a.count == 0) {
            ck_assert_msg(a.closed, "connection %d neither answered nor closed", i);
            close(fds[i]);
            return i;
        }
    }
    return most;
}

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* Polls /metrics (bounded) until 'name' reaches at least 'want': the daemon
 * notices closed connections on its own loop, a moment later. */
static void wait_metric_at_least(int port, const char *name, long want)
{
    for (int i = 0; i < WAIT_S * 10; i++) {
        struct th_response m;
        if (th_http(port, "GET", "/metrics", NULL, NULL, &m) == 0 && m.status == 200) {
            char key[128];
            snprintf(key, sizeof key, "\n%s ", name);
            const char *p = strstr(m.body, key);
            if (p && atol(p + strlen(key)) >= want)
                return;
        }
        th_sleep_ms(100);
    }
    ck_abort_msg("%s stayed below %ld", name, want);
}

START_TEST(test_per_address_cap_refuses_the_extra_connection)
{
    th_reset();
    struct th_daemon d;
    static const char *const env[] = {"SECKILL_HTTP_MAX_CONNECTIONS_PER_ADDR=3", NULL};
    th_daemon_start(&d, env);
    int fds[8];
    int open = fill_until_refused(d.port, fds, 8);
    ck_assert_int_eq(open, 3);
    close_all(fds, open);
    wait_metric_at_least(d.port, "seckill_http_connections_refused_per_addr_total", 1);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_global_cap_refuses_the_extra_connection)
{
    th_reset();
    struct th_daemon d;
    static const char *const env[] = {"SECKILL_HTTP_MAX_CONNECTIONS=4", NULL};
    th_daemon_start(&d, env);
    int fds[8];
    int open = fill_until_refused(d.port, fds, 8);
    ck_assert_int_eq(open, 4);
    close_all(fds, open);
    wait_metric_at_least(d.port, "seckill_http_connections_refused_total", 1);
    th_daemon_stop(&d);
}
END_TEST

/* ---- the answer's way out: one deadline, buffers back to their base ------ */

/* The answer's deadline in the slow reader's test, and the most it waits. */
#define REPLY_DEADLINE_MS 1000
#define SLOW_READ_BOUND_MS 30000
/* The slow reader takes one byte, then rests this long: the answer moves on
 * many times within each REPLY_DEADLINE_MS (a timer re-armed on progress
 * would never fire), yet the whole of it takes minutes. */
#define SLOW_READ_REST_US 10
#define SLOW_ANSWER_BYTES (64 << 20)
/* The daemon's socket buffer there: small, so the answer waits in the daemon. */
#define SLOW_SNDBUF_BYTES 4096
/* SKUs that make /metrics a larger answer than a connection's base buffers. */
#define BIG_METRICS_SKUS 300

static char *slow_answer;

/* The slow reader's one route: a large answer. */
static void answer_large(struct http_req *r)
{
    static const struct http_answer ok[] = {{200, NULL}, {0, NULL}};
    r->answers = ok;
    r->route = "GET /large";
    http_reply_raw(r, 200, "text/plain", slow_answer, SLOW_ANSWER_BYTES);
}

/* The real connection code on a loop this test drives (http_server_bare),
 * over a socketpair whose buffers the test chooses: TCP on loopback would
 * take the whole answer into the kernel and never make the daemon wait. */
START_TEST(test_an_answer_read_a_byte_at_a_time_is_cut_by_its_one_deadline)
{
    struct cfg c;
    cfg_defaults(&c);
    c.http_write_timeout_ms = REPLY_DEADLINE_MS;
    c.http_idle_timeout_ms = c.http_request_timeout_ms = 600000; /* only the answer's can close */
    slow_answer = malloc(SLOW_ANSWER_BYTES);
    ck_assert(slow_answer);
    memset(slow_answer, 'x', SLOW_ANSWER_BYTES);
    char err[256];
    struct http_server *s = http_server_bare(&c, answer_large, err, sizeof err);
    ck_assert_msg(s, "%s", err);
    int sv[2];
    ck_assert(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    int sndbuf = SLOW_SNDBUF_BYTES;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    ck_assert(http_server_adopt(s, sv[0], "10.0.0.1") == 0);
    static const char req[] = "GET /large HTTP/1.1\r\nHost: a\r\n\r\n";
    send_all(sv[1], req, sizeof req - 1);
    long start = now_ms(), got = 0;
    int closed = 0;
    while (!closed && now_ms() - start < SLOW_READ_BOUND_MS) {
        event_base_loop(http_server_base(s), EVLOOP_NONBLOCK);
        char b;
        ssize_t r = recv(sv[1], &b, 1, MSG_DONTWAIT);
        if (r == 1)
            got++;
        else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            closed = 1;
        usleep(SLOW_READ_REST_US);
    }
    long waited = now_ms() - start;
    close(sv[1]);
    http_server_stop(s);
    free(slow_answer);
    cfg_free(&c);
    ck_assert_msg(closed,
                  "a client reading a byte every %d us still held its answer after %ld ms (%ld "
                  "bytes read; deadline %d ms)",
                  SLOW_READ_REST_US, waited, got, REPLY_DEADLINE_MS);
    ck_assert_msg(got > SLOW_SNDBUF_BYTES && got < SLOW_ANSWER_BYTES,
                  "%ld bytes read: the answer did not move, or it was not cut", got);
}
END_TEST

/* Makes /metrics large: per-SKU gauges of BIG_METRICS_SKUS SKUs. */
static void make_metrics_large(void)
{
    struct cfg c;
    th_cfg(&c);
    for (int i = 0; i < BIG_METRICS_SKUS; i++)
        th_sku_create_direct(&c, 9000 + i, 10, 5, 0);
    cfg_free(&c);
}

START_TEST(test_connection_buffers_go_back_to_their_base_after_a_large_answer)
{
    th_reset();
    make_metrics_large();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    /* many requests in one send (the read buffer holds what waits), the
     * last one answered by the large /metrics (on the internal listener,
     * which serves /healthz too); the connection stays open */
    enum { QUEUED = 200 };
    static const char one[] = "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n",
                      last[] = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
    static char burst[QUEUED * sizeof one + sizeof last];
    size_t n = 0;
    for (int i = 0; i < QUEUED; i++, n += sizeof one - 1)
        memcpy(burst + n, one, sizeof one - 1);
    memcpy(burst + n, last, sizeof last - 1);
    n += sizeof last - 1;
    int fd = connect_to(d.metrics_port);
    send_all(fd, burst, n);
    /* read until the /metrics answer is whole: its Content-Length */
    static char text[1 << 22];
    size_t got = 0;
    long big = -1;
    const char *body = NULL;
    while (got < sizeof text - 1) {
        ssize_t r = recv(fd, text + got, sizeof text - 1 - got, 0);
        ck_assert_msg(r > 0, "the daemon closed or went quiet after %zu bytes", got);
        got += (size_t)r;
        text[got] = '\0';
        const char *h = strstr(text, "Content-Type: text/plain");
        const char *cl = h ? strstr(h, "Content-Length: ") : NULL;
        body = cl ? strstr(cl, "\r\n\r\n") : NULL;
        if (body) {
            big = atol(cl + 16);
            if ((size_t)(text + got - (body + 4)) >= (size_t)big)
                break;
        }
    }
    ck_assert_msg(big > 0, "no /metrics answer");
    /* the first connection is still open and idle; a scrape on a second one
     * finds the buffers of both far below one large answer */
    long held = metric(d.port, "seckill_http_connection_buffer_bytes");
    ck_assert_msg(held < big, "connections hold %ld buffer bytes after a %ld byte answer", held,
                  big);
    char b;
    ck_assert_msg(recv(fd, &b, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN,
                  "the first connection was closed or had more to say");
    close(fd);
    th_daemon_stop(&d);
}
END_TEST

/* ---- behind a load balancer: the PROXY protocol (v1) ------------------- */

START_TEST(test_proxy_header_parse)
{
    char src[PROXY_ADDR_MAX];
    size_t used = 0;
    static const char v4[] = "PROXY TCP4 10.1.2.3 127.0.0.1 51234 8080\r\nGET / HTTP/1.1\r\n";
    ck_assert_int_eq(proxy_header_parse(v4, sizeof v4 - 1, src, sizeof src, &used),
                     PROXY_HEADER_DONE);
    ck_assert_str_eq(src, "10.1.2.3");
    ck_assert_uint_eq(used, strlen("PROXY TCP4 10.1.2.3 127.0.0.1 51234 8080\r\n"));
    static const char v6[] = "PROXY TCP6 2001:db8::0:1 ::1 1 65535\r\n";
    ck_assert_int_eq(proxy_header_parse(v6, sizeof v6 - 1, src, sizeof src, &used),
                     PROXY_HEADER_DONE);
    ck_assert_str_eq(src, "2001:db8::1"); /* canonical, as the socket's peers are shown */
    static const char unknown[] = "PROXY UNKNOWN ffff:f::1 ::1 1 2\r\n";
    ck_assert_int_eq(proxy_header_parse(unknown, sizeof unknown - 1, src, sizeof src, &used),
                     PROXY_HEADER_DONE);
    ck_assert_str_eq(src, "");
    ck_assert_int_eq(proxy_header_parse("PROXY UNKNOWN\r\n", 15, src, sizeof src, &used),
                     PROXY_HEADER_DONE);
    /* not yet whole: every proper prefix of a valid header asks for more */
    size_t whole = strlen("PROXY TCP4 10.1.2.3 127.0.0.1 51234 8080\r\n");
    for (size_t n = 1; n < whole; n++)
        ck_assert_int_eq(proxy_header_parse(v4, n, src, sizeof src, &used), PROXY_HEADER_MORE);
    static const char *const bad[] = {
        "GET / HTTP/1.1\r\n",                             /* no header at all */
        "PROXY TCP4 10.1.2.3 127.0.0.1 51234\r\n",        /* a field missing */
        "PROXY TCP4 10.1.2.3 127.0.0.1 51234 8080 x\r\n", /* one too many */
        "PROXY TCP4  10.1.2.3 127.0.0.1 1 2\r\n",         /* two spaces */
        "PROXY TCP4 10.1.2.300 127.0.0.1 1 2\r\n",        /* not an address */
        "PROXY TCP4 ::1 127.0.0.1 1 2\r\n",               /* v6 in TCP4 */
        "PROXY TCP4 10.1.2.3 127.0.0.1 65536 2\r\n",      /* port range */
        "PROXY TCP4 10.1.2.3 127.0.0.1 01 2\r\n",         /* leading zero */
        "PROXY TCP4 10.1.2.3 127.0.0.1 -1 2\r\n",         /* sign */
        "PROXY TCP5 10.1.2.3 127.0.0.1 1 2\r\n",          /* protocol */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(proxy_header_parse(bad[i], strlen(bad[i]), src, sizeof src, &used) ==
                          PROXY_HEADER_BAD,
                      "%s was accepted", bad[i]);
    /* a bare LF never ends it: more, until the protocol's bound */
    static const char lf[] = "PROXY TCP4 10.1.2.3 127.0.0.1 1 2\n";
    ck_assert_int_eq(proxy_header_parse(lf, sizeof lf - 1, src, sizeof src, &used),
                     PROXY_HEADER_MORE);
    char longer[200];
    memset(longer, 'x', sizeof longer);
    memcpy(longer, "PROXY ", 6);
    ck_assert_int_eq(proxy_header_parse(longer, sizeof longer, src, sizeof src, &used),
                     PROXY_HEADER_BAD); /* past 107 bytes without CRLF */
    ck_assert(proxy_header_trusted("10.0.0.1, 127.0.0.1", "127.0.0.1"));
    ck_assert(!proxy_header_trusted("10.0.0.1,127.0.0.10", "127.0.0.1"));
    ck_assert(!proxy_header_trusted("", "127.0.0.1"));
}
END_TEST

/* The test's load balancer speaks from 127.0.0.2 (the harness's own probes
 * come from 127.0.0.1, plain). */
#define PROXY_ADDR "127.0.0.2"

/* Sends raw bytes from PROXY_ADDR on a fresh connection; reads the answers. */
static void exchange_from_proxy(int port, const char *raw, size_t len, struct answers *a)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert(fd >= 0);
    struct timeval tv = {WAIT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in me = {.sin_family = AF_INET};
    ck_assert_int_eq(inet_pton(AF_INET, PROXY_ADDR, &me.sin_addr), 1);
    ck_assert_msg(bind(fd, (struct sockaddr *)&me, sizeof me) == 0, "bind: %s", strerror(errno));
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_msg(connect(fd, (struct sockaddr *)&to, sizeof to) == 0, "connect: %s",
                  strerror(errno));
    send_all(fd, raw, len);
    read_answers(fd, a, 0); /* until the daemon closes (Connection: close) */
    close(fd);
}

/* A request as the load balancer forwards it for client 'src'. */
static int proxied_status(int port, const char *src)
{
    char raw[256];
    int n = snprintf(raw, sizeof raw,
                     "PROXY TCP4 %s 127.0.0.1 40000 80\r\n"
                     "GET /api/v1/skus/1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                     src);
    struct answers a;
    exchange_from_proxy(port, raw, (size_t)n, &a);
    return a.count ? a.status[0] : 0;
}

START_TEST(test_trusted_proxy_names_the_client_for_the_rate_limits)
{
    th_reset();
    const char *env[] = {"SECKILL_HTTP_TRUSTED_PROXIES=" PROXY_ADDR, "SECKILL_RATE_ADDR_BURST=2",
                         "SECKILL_RATE_ADDR_PER_S=1", NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    /* each client its own bucket, though all come from the proxy's address */
    ck_assert_int_eq(proxied_status(d.port, "10.9.0.1"), 404);
    ck_assert_int_eq(proxied_status(d.port, "10.9.0.1"), 404);
    ck_assert_int_eq(proxied_status(d.port, "10.9.0.1"), 429);
    ck_assert_int_eq(proxied_status(d.port, "10.9.0.2"), 404);
    /* from a trusted proxy the header is required: plain HTTP is not served */
    static const char plain[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    struct answers a;
    exchange_from_proxy(d.port, plain, sizeof plain - 1, &a);
    ck_assert_int_eq(a.count, 0);
    ck_assert(a.closed);
    /* ... while everyone else speaks plain HTTP as ever */
    exchange(d.port, plain, sizeof plain - 1, &a, 1);
    ck_assert_int_eq(a.status[0], 200);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_proxy_header_from_an_untrusted_peer_is_not_believed)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL); /* no trusted proxy */
    struct answers a;
    static const char raw[] = "PROXY TCP4 10.9.0.1 127.0.0.1 40000 80\r\n"
                              "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    exchange(d.port, raw, sizeof raw - 1, &a, 1);
    ck_assert_int_eq(a.count, 1);
    ck_assert_int_ge(a.status[0], 400); /* "PROXY" is no HTTP method: refused */
    th_daemon_stop(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http_strict");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ambiguous_requests_are_refused_and_the_connection_closed);
    tcase_add_test(tc, test_known_method_on_a_path_is_405_with_allow);
    tcase_add_test(tc, test_keep_alive_pipelining_head_and_http10);
    tcase_add_test(tc, test_slow_headers_are_cut_by_the_request_deadline);
    tcase_add_test(tc, test_slow_body_is_cut_by_the_request_deadline);
    tcase_add_test(tc, test_idle_keep_alive_connection_is_closed_by_the_idle_deadline);
    tcase_add_test(tc, test_buyers_are_served_while_hundreds_of_slow_clients_wait);
    tcase_add_test(tc, test_per_address_cap_refuses_the_extra_connection);
    tcase_add_test(tc, test_global_cap_refuses_the_extra_connection);
    tcase_add_test(tc, test_an_answer_read_a_byte_at_a_time_is_cut_by_its_one_deadline);
    tcase_add_test(tc, test_connection_buffers_go_back_to_their_base_after_a_large_answer);
    tcase_add_test(tc, test_proxy_header_parse);
    tcase_add_test(tc, test_trusted_proxy_names_the_client_for_the_rate_limits);
    tcase_add_test(tc, test_proxy_header_from_an_untrusted_peer_is_not_believed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
