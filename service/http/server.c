#include "http/server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/metrics.h"
#include "core/validate.h"

/* How often a closing loop looks whether its reservations in flight ended. */
#define SHUTDOWN_POLL_US 10000

struct http_loop {
    struct http_server *srv;
    struct event_base *base;
    struct evhttp *http;
    struct order_desk *desk;
    pthread_t tid;
    int started;
};

struct http_server {
    const struct cfg *cfg;
    struct workers *workers;
    http_dispatch_fn *dispatch;
    size_t n;
    struct http_loop *loops;
};

const struct cfg *http_loop_cfg(const struct http_loop *l)
{
    return l->srv->cfg;
}

struct order_desk *http_loop_desk(struct http_loop *l)
{
    return l->desk;
}

/* ---- replies ----------------------------------------------------------- */

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
    case 409:
        return "Conflict";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

/* Counts and logs an answer the request's route did not declare. */
static void check_answer(const struct http_req *r, int status, const char *error)
{
    for (const struct http_answer *a = r->answers; a && a->status; a++)
        if (a->status == status &&
            (a->error == error || (a->error && error && strcmp(a->error, error) == 0)))
            return;
    metrics_add(M_HTTP_UNDECLARED, 1);
    log_error("%s answered %d %s, which the route does not declare",
              r->route ? r->route : "(no route)", status, error ? error : "(no error code)");
}

void http_add_header(const struct http_req *r, const char *name, const char *value)
{
    evhttp_add_header(evhttp_request_get_output_headers(r->ev), name, value);
}

void http_reply_raw(const struct http_req *r, int status, const char *content_type,
                    const char *body, size_t len)
{
    check_answer(r, status, NULL);
    struct evhttp_request *req = r->ev;
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        abort();
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", content_type);
    /* A HEAD answer carries the headers of the GET answer, never its body. */
    if (len && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD)
        evbuffer_add(buf, body, len);
    evhttp_send_reply(req, status, reason_phrase(status), buf);
    evbuffer_free(buf);
}

/* Sends JSON text as the one reply; 'error' is its code, for the check. */
static void send_json(const struct http_req *r, int status, const char *error, const char *text,
                      size_t len)
{
    check_answer(r, status, error);
    struct evhttp_request *req = r->ev;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Cache-Control", "no-store");
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        abort();
    if (len && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
        evbuffer_add(buf, text, len);
        evbuffer_add(buf, "\n", 1);
    }
    evhttp_send_reply(req, status, reason_phrase(status), buf);
    evbuffer_free(buf);
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
    http_reply_error(r, 503, "unavailable", "a backing store did not answer; try again");
}

/* ---- request intake ---------------------------------------------------- */

const char *http_header(const struct http_req *r, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(r->ev), name);
}

const char *http_peer_addr(const struct http_req *r)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(r->ev);
    char *addr = NULL;
    ev_uint16_t port = 0;
    if (conn)
        evhttp_connection_get_peer(conn, &addr, &port);
    return addr ? addr : "";
}

char *http_take_json(const struct http_req *r, size_t *len)
{
    if (validate_json_content_type(http_header(r, "Content-Type")) != 0) {
        http_reply_error(r, 400, "invalid_request", "Content-Type must be application/json");
        return NULL;
    }
    const struct cfg *c = r->loop->srv->cfg;
    struct evbuffer *in = evhttp_request_get_input_buffer(r->ev);
    *len = evbuffer_get_length(in);
    if (*len > (size_t)c->max_body_bytes) {
        char d[96];
        snprintf(d, sizeof d, "body larger than %" PRId64 " bytes", c->max_body_bytes);
        http_reply_error(r, 400, "invalid_request", d);
        return NULL;
    }
    char *b = malloc(*len + 1);
    if (!b)
        abort();
    evbuffer_copyout(in, b, *len);
    b[*len] = '\0';
    return b;
}

int http_submit(const struct http_req *r, struct job *j, int urgent)
{
    j->base = r->loop->base;
    j->urgent = urgent;
    if (workers_submit(r->loop->srv->workers, j) == 0)
        return 0;
    http_reply_unavailable(r);
    return -1;
}

/* The one entry of every request: what the dispatcher needs to route it. */
static void on_request(struct evhttp_request *ev, void *arg)
{
    struct http_loop *l = arg;
    struct http_req r = {.ev = ev, .loop = l};
    l->srv->dispatch(&r);
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
static evutil_socket_t listen_on(const char *addr, int backlog, char *err, size_t errlen)
{
    const char *colon = strrchr(addr, ':');
    char host[256];
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host || !colon[1]) {
        snprintf(err, errlen, "http_addr must be host:port, not \"%s\"", addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                    .ai_socktype = SOCK_STREAM,
                                    .ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_NUMERICSERV};
    struct evutil_addrinfo *ai = NULL;
    if (evutil_getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai) {
        snprintf(err, errlen, "http_addr \"%s\" does not resolve", addr);
        return -1;
    }
    evutil_socket_t fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    int ok = fd >= 0 && evutil_make_listen_socket_reuseable(fd) == 0 &&
             bind(fd, ai->ai_addr, (socklen_t)ai->ai_addrlen) == 0 && listen(fd, backlog) == 0 &&
             evutil_make_socket_nonblocking(fd) == 0 && evutil_make_socket_closeonexec(fd) == 0;
    evutil_freeaddrinfo(ai);
    if (!ok) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(errno));
        if (fd >= 0)
            evutil_closesocket(fd);
        return -1;
    }
    return fd;
}

static int thread_init(struct http_loop *l, struct http_server *s, char *err, size_t errlen)
{
    const struct cfg *c = s->cfg;
    l->srv = s;
    l->base = event_base_new();
    l->http = l->base ? evhttp_new(l->base) : NULL;
    if (!l->http) {
        snprintf(err, errlen, "cannot create the HTTP event loop");
        return -1;
    }
    /* libevent's own limits sit above ours so that our 400 answers with a JSON
     * body; beyond them libevent closes or answers 413 without reading more. */
    evhttp_set_max_body_size(l->http, (ev_ssize_t)c->max_body_bytes * 4);
    evhttp_set_max_headers_size(l->http, (ev_ssize_t)c->max_header_bytes);
    evhttp_set_timeout(l->http, (int)c->http_timeout_s);
    evhttp_set_allowed_methods(l->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(l->http, on_request, l);
    l->desk = order_desk_new(l->base, c, s->workers, err, errlen);
    return l->desk ? 0 : -1;
}

struct http_server *http_server_start(const struct cfg *c, struct workers *ws,
                                      http_dispatch_fn *dispatch, char *err, size_t errlen)
{
    evutil_socket_t fd = listen_on(c->http_addr, (int)c->http_backlog, err, errlen);
    if (fd < 0)
        return NULL;
    struct http_server *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->cfg = c;
    s->workers = ws;
    s->dispatch = dispatch;
    s->n = (size_t)c->http_threads;
    s->loops = calloc(s->n, sizeof *s->loops);
    if (!s->loops)
        abort();
    for (size_t i = 0; i < s->n; i++) {
        struct http_loop *l = &s->loops[i];
        if (thread_init(l, s, err, errlen) != 0)
            goto fail;
        /* Every loop accepts on the one socket; each evhttp closes its own copy. */
        evutil_socket_t mine = i + 1 < s->n ? dup(fd) : fd;
        if (mine < 0 || evhttp_accept_socket(l->http, mine) != 0) {
            snprintf(err, errlen, "cannot share the listening socket");
            if (mine >= 0)
                evutil_closesocket(mine);
            if (mine == fd)
                fd = -1;
            goto fail;
        }
        if (mine == fd)
            fd = -1; /* handed over to the last loop */
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

/* Last step of a loop: reservations still in flight are answered, buyers
 * still waiting for a commit learn that their order is pending, the Redis
 * clients go, and the loop exits. */
static void close_loop(struct http_loop *l)
{
    struct order_desk *od = l->desk;
    l->desk = NULL;
    order_desk_free(od);
    event_base_loopexit(l->base, NULL);
}

/* While the loop shuts down, reservations already sent get their real answer
 * (each is bounded by its own redis_timeout_ms timer): answering 503 to one
 * the script may still take would break "a 503 took nothing". */
static void drain_tick(evutil_socket_t fd, short what, void *arg)
{
    struct http_loop *l = arg;
    (void)fd;
    (void)what;
    if (order_desk_pending(l->desk) == 0) {
        close_loop(l);
        return;
    }
    struct timeval tick = {0, SHUTDOWN_POLL_US};
    if (event_base_once(l->base, -1, EV_TIMEOUT, drain_tick, l, &tick) != 0)
        close_loop(l);
}

/* Runs on the loop's own thread: from now on new orders answer 503 at once. */
static void shutdown_on_loop(evutil_socket_t fd, short what, void *arg)
{
    struct http_loop *l = arg;
    order_desk_close(l->desk);
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
        order_desk_free(l->desk); /* only if the loop never ran */
        l->desk = NULL;
        /* Last: frees the connections and any request nobody answers any more. */
        if (l->http)
            evhttp_free(l->http);
        if (l->base)
            event_base_free(l->base);
    }
    free(s->loops);
    free(s);
}
