/*
 * http-ceiling: the fastest thing the service's HTTP layer could ever be.
 * N loops sharing one listening socket answer every request with the body
 * of an accepted order and nothing else: no Redis, no JSON parsing, no
 * validation.  `make bench` divides the service's rate by this one's.
 *
 *   --server own     seckilld's own HTTP server (http/server.c, the strict
 *                    parser, its caps and deadlines) with a fixed-body
 *                    dispatch: the service's real ceiling (the default);
 *   --server evhttp  libevent's evhttp set up as seckilld used to be: the
 *                    yardstick the own server must not fall behind.
 *
 *   http-ceiling [--addr 127.0.0.1:PORT] [--threads N] [--max-seconds S]
 *                [--server own|evhttp]
 *
 * Loopback only.  Exits on SIGINT/SIGTERM or after --max-seconds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cfg.h"
#include "http/server.h"

#define PROG "http-ceiling"
#define DEFAULT_ADDR "127.0.0.1:8099"
#define DEFAULT_THREADS 2 /* seckilld's http_threads default */
#define MAX_THREADS 64
#define DEFAULT_MAX_SECONDS 3600
#define MAX_MAX_SECONDS 86400
#define HTTP_TIMEOUT_S 10         /* evhttp: seckilld's old http_timeout_s default */
#define MAX_BODY_BYTES (4096 * 4) /* evhttp: seckilld's old 4 x max_body_bytes */
#define MAX_HEADER_BYTES 8192
/* The answer's JSON; both servers end it with a newline. */
#define BODY_JSON                                                                                  \
    "{\"order_id\":4294967297,\"status\":\"pending\",\"sku_id\":1,\"user_id\":1,\"qty\":1}"
#define BODY BODY_JSON "\n"

static const struct http_answer ceiling_answers[] = {{202, NULL}, {0, NULL}};

/* The own server's dispatch: every request is an accepted order. */
static void own_dispatch(struct http_req *r)
{
    r->answers = ceiling_answers;
    r->route = "any request";
    http_reply_text(r, 202, BODY_JSON, sizeof BODY_JSON - 1);
}

struct loop {
    struct event_base *base;
    struct evhttp *http;
    pthread_t tid;
    int started;
};

static void on_request(struct evhttp_request *req, void *arg)
{
    (void)arg;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Cache-Control", "no-store");
    struct evbuffer *b = evbuffer_new();
    if (!b)
        abort();
    evbuffer_add(b, BODY, sizeof BODY - 1);
    evhttp_send_reply(req, 202, "Accepted", b);
    evbuffer_free(b);
}

static void *loop_main(void *arg)
{
    struct loop *l = arg;
    event_base_loop(l->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    event_base_loopbreak(arg);
}

static int usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: " PROG " [--addr 127.0.0.1:PORT] [--threads N] [--max-seconds S]"
            " [--server own|evhttp]\n"
            "  --addr         listen address, loopback only (default " DEFAULT_ADDR ")\n"
            "  --threads      event loops sharing the socket (default %d, max %d)\n"
            "  --max-seconds  exit after S seconds at the latest (default %d)\n"
            "  --server       own: seckilld's HTTP server (default); evhttp: libevent's\n",
            DEFAULT_THREADS, MAX_THREADS, DEFAULT_MAX_SECONDS);
    return rc;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"addr", required_argument, NULL, 'a'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"max-seconds", required_argument, NULL, 'm'},
                                         {"server", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *addr = DEFAULT_ADDR;
    int own = 1;
    long threads = DEFAULT_THREADS, max_s = DEFAULT_MAX_SECONDS;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'a')
            addr = optarg;
        else if (c == 't' && parse_long(optarg, 1, MAX_THREADS, &threads) == 0)
            continue;
        else if (c == 'm' && parse_long(optarg, 1, MAX_MAX_SECONDS, &max_s) == 0)
            continue;
        else if (c == 's' && (strcmp(optarg, "own") == 0 || strcmp(optarg, "evhttp") == 0))
            own = strcmp(optarg, "own") == 0;
        else if (c == 'h')
            return usage(0);
        else {
            fprintf(stderr, PROG ": bad flag or value: %s\n", argv[optind - 1]);
            return usage(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument %s\n", argv[optind]);
        return usage(2);
    }
    char host[64];
    const char *colon = strrchr(addr, ':');
    long port;
    struct in_addr ia;
    if (!colon || (size_t)(colon - addr) >= sizeof host ||
        parse_long(colon + 1, 1, 65535, &port) != 0) {
        fprintf(stderr, PROG ": --addr must be HOST:PORT, not %s\n", addr);
        return 2;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    if (inet_pton(AF_INET, host, &ia) != 1 || (ntohl(ia.s_addr) >> 24) != 127) {
        fprintf(stderr, PROG ": --addr host must be in 127.0.0.0/8, not %s\n", host);
        return 2;
    }

    signal(SIGPIPE, SIG_IGN);
    if (evthread_use_pthreads() != 0) {
        fprintf(stderr, PROG ": libevent threading unavailable\n");
        return 1;
    }
    struct loop loops[MAX_THREADS];
    memset(loops, 0, sizeof loops);
    evutil_socket_t fd = -1;
    int rc = 1;
    struct cfg cfg;
    struct http_server *srv = NULL;
    cfg_defaults(&cfg);
    if (own) {
        char err[256], n[24];
        snprintf(n, sizeof n, "%ld", threads);
        if (cfg_set(&cfg, "http_addr", addr, err, sizeof err) != 0 ||
            cfg_set(&cfg, "http_threads", n, err, sizeof err) != 0 ||
            !(srv = http_server_start(
                  &cfg,
                  &(struct http_listen){.setting = "http_addr",
                                        .addr = cfg.http_addr,
                                        .threads = cfg.http_threads,
                                        .max_connections = cfg.http_max_connections},
                  NULL, own_dispatch, err, sizeof err))) {
            fprintf(stderr, PROG ": %s\n", err);
            goto out;
        }
    }
    for (long i = 0; !own && i < threads; i++) {
        struct loop *l = &loops[i];
        l->base = event_base_new();
        l->http = l->base ? evhttp_new(l->base) : NULL;
        if (!l->http) {
            fprintf(stderr, PROG ": cannot create an event loop\n");
            goto out;
        }
        evhttp_set_max_body_size(l->http, MAX_BODY_BYTES);
        evhttp_set_max_headers_size(l->http, MAX_HEADER_BYTES);
        evhttp_set_timeout(l->http, HTTP_TIMEOUT_S);
        evhttp_set_gencb(l->http, on_request, NULL);
        if (i == 0) {
            struct evhttp_bound_socket *bs =
                evhttp_bind_socket_with_handle(l->http, host, (ev_uint16_t)port);
            if (!bs) {
                fprintf(stderr, PROG ": cannot listen on %s\n", addr);
                goto out;
            }
            fd = evhttp_bound_socket_get_fd(bs);
        } else if (evhttp_accept_socket(l->http, dup(fd)) != 0) {
            fprintf(stderr, PROG ": cannot share the listening socket\n");
            goto out;
        }
    }
    for (long i = 0; !own && i < threads; i++) {
        if (pthread_create(&loops[i].tid, NULL, loop_main, &loops[i]) != 0) {
            fprintf(stderr, PROG ": cannot start a thread\n");
            goto out;
        }
        loops[i].started = 1;
    }
    struct event_base *mainb = event_base_new();
    struct event *si = mainb ? evsignal_new(mainb, SIGINT, on_stop, mainb) : NULL;
    struct event *st = mainb ? evsignal_new(mainb, SIGTERM, on_stop, mainb) : NULL;
    struct event *tm = mainb ? evtimer_new(mainb, on_stop, mainb) : NULL;
    struct timeval limit = {max_s, 0};
    if (si && st && tm && event_add(si, NULL) == 0 && event_add(st, NULL) == 0 &&
        event_add(tm, &limit) == 0) {
        printf(PROG ": %s server listening on %s with %ld threads\n", own ? "own" : "evhttp", addr,
               threads);
        fflush(stdout);
        event_base_dispatch(mainb);
        rc = 0;
    }
    if (si)
        event_free(si);
    if (st)
        event_free(st);
    if (tm)
        event_free(tm);
    if (mainb)
        event_base_free(mainb);
out:
    http_server_stop(srv);
    cfg_free(&cfg);
    for (long i = 0; i < threads; i++)
        if (loops[i].started)
            event_base_loopexit(loops[i].base, NULL);
    for (long i = 0; i < threads; i++) {
        if (loops[i].started)
            pthread_join(loops[i].tid, NULL);
        if (loops[i].http)
            evhttp_free(loops[i].http);
        if (loops[i].base)
            event_base_free(loops[i].base);
    }
    return rc;
}
