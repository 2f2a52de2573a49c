/*
 * Fuzz target: the connection state machine of http/server.c, the real code
 * on a loop driven here (http_server_bare) over a socketpair: a fuzzed byte
 * stream cut into fuzzed chunks, pipelined requests, Expect: 100-continue,
 * answers that come later (as a worker's do) and a peer that half-closes or
 * goes while a request is held.  The loop runs in this thread, one pass at a
 * time, so every interleaving is the input's and each run is repeatable.
 *
 * Input: bytes for the client to send, and between them control bytes, each
 * of which first sends what was gathered (one chunk, one write) and then:
 *   0x01  runs the loop one pass (non-blocking)
 *   0x02  answers the oldest request held by the "worker" (/later)
 *   0x03  reads what the server sent and checks it
 *   0x04  half-closes the client (shutdown SHUT_WR): no more requests
 *   0x05  closes the client: gone, perhaps while a request is held
 * After the input the loop runs until quiet, held requests are answered,
 * and the client (if still there) reads to the end.
 *
 * Routes: /now answers at once, /later is held until 0x02 (or the end),
 * /big answers more than the socket buffers take (partial writes, the
 * answer's deadline armed, buffers grown and given back); others are 404.
 * Each answer of a route carries X-Seq, the order the server dispatched it.
 *
 * Properties: a connection hands one request at a time to its handler (none
 * is dispatched while one is held); answers arrive whole, in dispatch order
 * (X-Seq 0, 1, 2, ...), each well framed (status line, Content-Length, body
 * of that length, none for HEAD); an answer without X-Seq is one of the
 * server's own protocol answers and, like any "Connection: close" answer,
 * the last bytes on the connection; a "100 Continue" is only ever interim;
 * and nothing leaks (the sanitizers) once the server is stopped.
 *
 * Not covered: the deadlines' timers (they would need wall-clock waits per
 * input; test_http_strict proves them) and the worker pool itself (the
 * stores' part): a held request stands for a job in a worker.
 */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/cfg.h"
#include "core/log.h"
#include "fuzz/fuzz.h"
#include "http/server.h"

enum {
    OP_RUN = 0x01,
    OP_ANSWER_HELD = 0x02,
    OP_READ = 0x03,
    OP_SHUT_WR = 0x04,
    OP_CLOSE = 0x05,
};

/* /big's answer: past both socket buffers, so its write stalls. */
#define BIG_ANSWER_BYTES (256 * 1024)
/* The server's socket send buffer: small, so answers stall often. */
#define SERVER_SNDBUF_BYTES 4096
/* Requests one input can hold (more are answered at once, as /now). */
#define HELD_MAX 16
/* What the client keeps of the server's bytes to check (beyond: a bug). */
#define SEEN_MAX (4 * 1024 * 1024)
/* Loop passes and write retries: bounds, so one input always ends. */
#define DRAIN_PASSES_MAX (1 << 16)
#define WRITE_TRIES 64
/* Passes without a byte moving after which the end's drain is quiet. */
#define QUIET_PASSES 4

static struct cfg cfg;
static char *big_answer;

/* One input's state. */
static struct {
    struct http_req held[HELD_MAX];
    size_t nheld;
    long dispatched;   /* requests handed to the handler, X-Seq of the next */
    int client;        /* the client's end; -1 once closed */
    int client_shut;   /* it half-closed */
    int client_left;   /* the input closed it (0x05): answers may be lost */
    size_t read_total; /* bytes the client read, all told */
    char *seen;        /* what the client read, not yet checked */
    size_t seen_len;
    long next_seq;     /* the X-Seq the next routed answer must carry */
    int ended;         /* an answer said the connection ends */
    int head_of[8192]; /* by X-Seq: the request was a HEAD */
} st;

static const struct http_answer answers[] = {{200, NULL}, {404, "not_found"}, {0, NULL}};

static void answer(const struct http_req *r, int status)
{
    char seq[24];
    snprintf(seq, sizeof seq, "%ld", st.dispatched);
    if ((size_t)st.dispatched < sizeof st.head_of / sizeof st.head_of[0])
        st.head_of[st.dispatched] = http_method(r) == HTTP_METHOD_HEAD;
    st.dispatched++;
    http_add_header(r, "X-Seq", seq);
    const char *path = http_path(r);
    if (status == 404)
        http_reply_error(r, 404, "not_found", NULL);
    else if (strcmp(path, "/big") == 0)
        http_reply_raw(r, 200, "text/plain", big_answer, BIG_ANSWER_BYTES);
    else
        http_reply_raw(r, 200, "text/plain", path, strlen(path));
}

static void dispatch(struct http_req *r)
{
    /* one request at a time per connection: none while one is held */
    FUZZ_CHECK(st.nheld == 0);
    r->answers = answers;
    r->route = "fuzz";
    const char *path = http_path(r);
    if (strcmp(path, "/later") == 0 && st.nheld < HELD_MAX) {
        st.held[st.nheld++] = *r; /* copy freely: it owns nothing */
        return;
    }
    answer(r, strcmp(path, "/now") == 0 || strcmp(path, "/big") == 0 ? 200 : 404);
}

static void answer_held(void)
{
    if (st.nheld == 0)
        return;
    struct http_req r = st.held[0];
    memmove(st.held, st.held + 1, --st.nheld * sizeof st.held[0]);
    answer(&r, 200);
}

/* The value of header 'name' ("X-Seq: ") in head[0..len), or -1. */
static long header_long(const char *head, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = head; p + nl <= head + len; p++)
        if ((p == head || p[-1] == '\n') && strncmp(p, name, nl) == 0)
            return strtol(p + nl, NULL, 10);
    return -1;
}

static int has_line(const char *head, size_t len, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = head; p + n <= head + len; p++)
        if ((p == head || p[-1] == '\n') && memcmp(p, line, n) == 0)
            return 1;
    return 0;
}

/* Checks the whole answers at the front of what the client read and drops
 * them; a partial one stays for later. */
static void check_seen(void)
{
    size_t off = 0;
    while (off < st.seen_len) {
        const char *a = st.seen + off;
        size_t left = st.seen_len - off;
        /* nothing may follow the answer that ended the connection */
        FUZZ_CHECK(!st.ended);
        if (left < 12)
            break;
        FUZZ_CHECK(memcmp(a, "HTTP/1.1 ", 9) == 0);
        const char *end = memmem(a, left, "\r\n\r\n", 4);
        if (!end)
            break;
        size_t head_len = (size_t)(end - a) + 4;
        int status = atoi(a + 9);
        if (status == 100) { /* interim: headers only, never a final answer's part */
            FUZZ_CHECK(head_len == sizeof "HTTP/1.1 100 Continue\r\n\r\n" - 1);
            off += head_len;
            continue;
        }
        long cl = header_long(a, head_len, "Content-Length: ");
        FUZZ_CHECK(cl >= 0);
        long seq = header_long(a, head_len, "X-Seq: ");
        int head =
            seq >= 0 && (size_t)seq < sizeof st.head_of / sizeof st.head_of[0] && st.head_of[seq];
        size_t body = head ? 0 : (size_t)cl;
        if (left < head_len + body)
            break;
        if (seq >= 0) {
            FUZZ_CHECK(seq == st.next_seq); /* in dispatch order, none lost */
            st.next_seq++;
        } else {
            /* the server's own answer to what it refused: it closes */
            FUZZ_CHECK(status == 400 || status == 408 || status == 417 || status == 431 ||
                       status == 501);
            FUZZ_CHECK(has_line(a, head_len, "Connection: close\r\n"));
        }
        if (has_line(a, head_len, "Connection: close\r\n"))
            st.ended = 1;
        off += head_len + body;
    }
    memmove(st.seen, st.seen + off, st.seen_len - off);
    st.seen_len -= off;
}

/* Reads what is there (never waits); returns 1 at end of stream. */
static int client_read(void)
{
    if (st.client < 0)
        return 1;
    for (;;) {
        char buf[65536];
        ssize_t n = recv(st.client, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            FUZZ_CHECK(st.seen_len + (size_t)n <= SEEN_MAX);
            memcpy(st.seen + st.seen_len, buf, (size_t)n);
            st.seen_len += (size_t)n;
            st.read_total += (size_t)n;
            check_seen();
            continue;
        }
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
}

static void run_once(struct http_server *s)
{
    event_base_loop(http_server_base(s), EVLOOP_NONBLOCK);
}

/* Sends one chunk; while the server does not take it (it reads no further
 * while a request is held), runs the loop and reads, a bounded number of
 * times, then drops the rest. */
static void client_write(struct http_server *s, const uint8_t *p, size_t n)
{
    if (st.client < 0 || st.client_shut)
        return;
    for (int tries = 0; n > 0 && tries < WRITE_TRIES; tries++) {
        ssize_t w = send(st.client, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return; /* the server closed */
        run_once(s);
        (void)client_read();
    }
}

static void client_close(void)
{
    if (st.client >= 0)
        close(st.client);
    st.client = -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!big_answer) {
        cfg_defaults(&cfg);
        cfg.http_max_connections = 4; /* small tables per input */
        (void)log_set_level("error");
        big_answer = malloc(BIG_ANSWER_BYTES);
        st.seen = malloc(SEEN_MAX);
        if (!big_answer || !st.seen)
            abort();
        memset(big_answer, 'b', BIG_ANSWER_BYTES);
    }
    st.nheld = 0;
    st.dispatched = st.next_seq = 0;
    st.seen_len = 0;
    st.ended = st.client_shut = st.client_left = 0;
    st.read_total = 0;
    char err[256];
    struct http_server *s = http_server_bare(&cfg, dispatch, err, sizeof err);
    FUZZ_CHECK(s != NULL);
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    int sndbuf = SERVER_SNDBUF_BYTES;
    (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    FUZZ_CHECK(http_server_adopt(s, sv[0], "192.0.2.1") == 0);
    st.client = sv[1];

    size_t from = 0;
    for (size_t i = 0; i <= size; i++) {
        int op = i < size ? data[i] : 0;
        if (i < size && (op < OP_RUN || op > OP_CLOSE))
            continue;
        client_write(s, data + from, i - from);
        from = i + 1;
        switch (op) {
        case OP_RUN:
            run_once(s);
            break;
        case OP_ANSWER_HELD:
            answer_held();
            break;
        case OP_READ:
            if (client_read())
                client_close();
            break;
        case OP_SHUT_WR:
            if (st.client >= 0 && !st.client_shut)
                (void)shutdown(st.client, SHUT_WR);
            st.client_shut = 1;
            break;
        case OP_CLOSE:
            st.client_left |= st.client >= 0;
            client_close();
            break;
        default:
            break;
        }
    }
    /* The end: the loop runs and the client reads until nothing moves; the
     * worker answers what it holds each time things stand still. */
    int quiet = 0;
    for (long pass = 0; pass < DRAIN_PASSES_MAX && quiet < QUIET_PASSES; pass++) {
        size_t read_before = st.read_total;
        long dispatched_before = st.dispatched;
        run_once(s);
        if (client_read())
            client_close();
        if (st.read_total != read_before || st.dispatched != dispatched_before)
            quiet = 0;
        else if (st.nheld)
            answer_held();
        else
            quiet++;
    }
    /* A client that stayed got every answer, whole: none lost, none cut. */
    if (!st.client_left && quiet == QUIET_PASSES)
        FUZZ_CHECK(st.next_seq == st.dispatched && st.seen_len == 0);
    while (st.nheld)
        answer_held();
    run_once(s);
    client_close();
    http_server_stop(s);
    return 0;
}
