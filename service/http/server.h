/*
 * server: the HTTP front of seckilld, without knowing any route.
 *
 * One server per listener (struct http_listen: the public http_addr, the
 * internal metrics_addr).  Its libevent loops share one listening socket; each serves
 * its connections itself (HTTP/1.1 over plain non-blocking sockets, requests
 * read by the strict parser of http/request_parse.h) and may carry state of
 * its owner's (struct http_loop_hooks: seckilld gives each loop of the public
 * listener an order desk, daemon/main.c), which the server starts, drains at
 * stop and frees without knowing what it is.
 * Every request is handed to the dispatch function given at start; it ends in
 * exactly one reply through the functions below, on the loop that owns it.
 * Blocking work (admin, lookups) goes to the worker pool and comes back to
 * that loop (http_submit).
 *
 * A connection carries one request at a time: the next pipelined one is read
 * only once the current one is answered, so answers keep their order.  What
 * the parser refuses is answered here (http_protocol_answers) and the
 * connection closed.  Deadlines: the whole request (http_request_timeout_ms,
 * 408), an idle keep-alive connection (http_idle_timeout_ms), an answer's
 * whole write from its first stall (http_write_timeout_ms: one deadline, not
 * renewed by progress); caps: the listener's max_connections
 * (http_max_connections, metrics_max_connections) and, on the public one,
 * http_max_connections_per_addr, per client as http/peer_key.h says (beyond
 * them a new connection is closed at once, unread).  A connection's buffers
 * go back to their base size once a larger request or answer is done.
 *
 * Each reply is checked against the answers its route declared (struct
 * http_req.answers, set by the router): one it did not declare is logged and
 * counted (seckill_http_undeclared_answers_total), so the route table, and
 * the OpenAPI document checked against it, stay true.
 */
#ifndef SECKILL_HTTP_SERVER_H
#define SECKILL_HTTP_SERVER_H

#include <jansson.h>
#include <stddef.h>

#include "core/cfg.h"
#include "http/request_parse.h"
#include "store/workers.h"

struct http_server;
struct http_loop; /* one event-loop thread */
struct http_conn; /* one client connection (server.c) */
struct event_base;
struct metrics_hist;

/* An answer a route can give: a status and, for an error, its code (NULL
 * for a body without "error").  Lists end with {0, NULL}. */
struct http_answer {
    int status;
    const char *error;
};

/* One request being answered.  Copy it freely: it owns nothing.  The
 * connection outlives the request even when the client goes away: it is
 * freed after the reply. */
struct http_req {
    struct http_conn *conn;
    struct http_loop *loop;
    const struct http_answer *answers; /* the route's, or the router's own when none matched */
    const char *route;                 /* "POST /api/v1/skus/{sku_id}/orders", for logs */
    /* parallel to answers (set by the router with them): each answer's
     * latency histogram (seckill_http_request_duration_seconds); may be NULL */
    struct metrics_hist *const *answer_hists;
    /* when the request must be answered, whatever its stores do: read whole
     * plus request_deadline_ms (clock_mono_ms) */
    int64_t deadline_ms;
};

/* What the server answers by itself, before any route (malformed or
 * ambiguous requests, 408 for a late one): the list docs/openapi.json
 * documents under x-protocol-answers. */
extern const struct http_answer http_protocol_answers[];

/* Routes one request; runs on its loop. */
typedef void http_dispatch_fn(struct http_req *req);

/* Per-loop state of the listener's owner (seckilld: the order desk of each
 * public loop, wired in daemon/main.c).  The server knows it as a pointer
 * only: it makes one per loop, drains and frees it in the loop's shutdown.
 * Every member but 'arg' is required. */
struct http_loop_hooks {
    /* Makes the state of the loop 'base', before its thread runs.  Returns
     * it, or NULL with err set (the server does not start). */
    void *(*start)(struct event_base *base, void *arg, char *err, size_t errlen);
    /* On the loop's thread when the server stops: take no new work from now
     * on; work already under way still ends. */
    void (*stop)(void *state);
    /* Work still under way: the loop keeps running, polling this, until it
     * is 0 (each item must end by a deadline of its own). */
    int (*pending)(const void *state);
    /* Frees the state (the loop has drained it, or never ran).  NULL is
     * never passed. */
    void (*free)(void *state);
    void *arg; /* passed to start */
};

/* One listener of the process: the public one (http_addr: the buyer API)
 * or the internal one (metrics_addr: /metrics, /healthz, the admin API).
 * The strings are borrowed and must outlive the server. */
struct http_listen {
    const char *setting;     /* the setting that names addr, for messages ("http_addr") */
    const char *addr;        /* host:port */
    int64_t threads;         /* its event loops */
    int64_t max_connections; /* its cap on open connections */
    /* The internal listener: no per-address cap and no PROXY header (its
     * clients are the operators' own: their count is capped by
     * max_connections alone). */
    int internal;
    /* Each loop's state (NULL: none); borrowed, must outlive the server. */
    const struct http_loop_hooks *hooks;
};

/* Binds ln->addr and starts ln->threads loops.  Returns NULL (err set) on
 * failure. */
struct http_server *http_server_start(const struct cfg *c, const struct http_listen *ln,
                                      struct workers *ws, http_dispatch_fn *dispatch, char *err,
                                      size_t errlen);

/* Refuses new orders, lets reservations in flight get their answer, joins
 * the threads and frees s.  NULL is a no-op. */
void http_server_stop(struct http_server *s);

/* ---- a loop driven by hand (the fuzz target of the connection state
 * machine, tests): the real connections, without a listener or threads ---- */

/* A server of one loop with no listening socket, no worker pool (http_submit
 * answers 503) and no thread: the caller runs http_server_base(s) itself
 * (event_base_loop) and hands it connections with http_server_adopt.  Free
 * it with http_server_stop, outside the loop, once no handler holds a
 * request.  Returns NULL (err set) when the loop cannot be made. */
struct http_server *http_server_bare(const struct cfg *c, http_dispatch_fn *dispatch, char *err,
                                     size_t errlen);
/* The event base of a bare server's loop. */
struct event_base *http_server_base(const struct http_server *s);
/* Serves the connected socket fd (made non-blocking; the server owns it
 * from now on) as a connection from 'peer', under both caps.  Returns 0, or
 * -1 when it was refused (a cap; fd closed, as at accept). */
int http_server_adopt(struct http_server *s, int fd, const char *peer);

const struct cfg *http_loop_cfg(const struct http_loop *l);
/* The loop's event base (for a handler's own timers, on the loop's thread). */
struct event_base *http_loop_base(const struct http_loop *l);
/* The loop's state (struct http_loop_hooks' start): NULL when its listener
 * has no hooks, and once the loop has drained and freed it at shutdown
 * (between the hook 'stop' and then, it is still given). */
void *http_loop_state(struct http_loop *l);

/* ---- replies: exactly one per request ---- */

/* Adds an answer header (call before the reply). */
void http_add_header(const struct http_req *r, const char *name, const char *value);
/* Sends JSON text (len bytes, a success body) with 'status'. */
void http_reply_text(const struct http_req *r, int status, const char *json, size_t len);
/* Sends 'body' (reference stolen; its "error" member, if any, is its code). */
void http_reply_json(const struct http_req *r, int status, json_t *body);
/* Sends {"error": error, "detail": detail}; detail may be NULL. */
void http_reply_error(const struct http_req *r, int status, const char *error, const char *detail);
/* 503 unavailable with Retry-After: a backing store did not answer (the
 * detail says so when the request's deadline has passed). */
void http_reply_unavailable(const struct http_req *r);
/* 503 store_full with Retry-After full_retry_after_s: Redis is at its
 * maxmemory and refused the write.  detail NULL: nothing was taken or
 * changed; else what was. */
void http_reply_store_full(const struct http_req *r, const char *detail);
/* Sends a non-JSON success body (e.g. the Prometheus text). */
void http_reply_raw(const struct http_req *r, int status, const char *content_type,
                    const char *body, size_t len);

/* ---- request intake ---- */

/* A request header's value (case-insensitive name), or NULL. */
const char *http_header(const struct http_req *r, const char *name);
/* The request's method: never HTTP_METHOD_UNKNOWN (answered 501 before). */
enum http_method http_method(const struct http_req *r);
/* The request target's path (before any '?'), as sent: starts with '/'. */
const char *http_path(const struct http_req *r);
/* The request target's query (after '?', NUL-terminated), or NULL. */
const char *http_query(const struct http_req *r);
/* The client's address as text ("127.0.0.1", "::1"), owned by the
 * connection and valid while the request is answered; "" when unknown.
 * Never a forwarded-for header: only what the socket says. */
const char *http_peer_addr(const struct http_req *r);
/* Copies a JSON body (NUL-terminated, caller frees) and its length.  Returns
 * NULL after replying 400 when the Content-Type is not JSON or the body is
 * larger than max_body_bytes. */
char *http_take_json(const struct http_req *r, size_t *len);
/* The length of the request's body (0: none). */
size_t http_body_len(const struct http_req *r);

/* Queues j on the worker pool with r's deadline; its 'done' runs on r's
 * loop, and must answer 503 (http_reply_unavailable) when j->late says the
 * deadline passed before j could run.  'urgent' jobs (admin) pass
 * buyer lookups.  Returns 0; -1 after replying 503 (the pool is full or
 * stopping): the caller still owns j. */
int http_submit(const struct http_req *r, struct job *j, int urgent)
    __attribute__((warn_unused_result));
/* The same without the 503: returns -1 (nothing answered, the caller still
 * owns j) when there is no pool or it is full or stopping. */
int http_try_submit(const struct http_req *r, struct job *j, int urgent)
    __attribute__((warn_unused_result));

/* The latest result of the pool's health probes (store/health.h), read
 * at once: nothing probed when there is no pool or it is stopping. */
void http_health_read(const struct http_req *r, struct health_report rep[HEALTH_STORES]);

/* Whether r came in on the internal listener (struct http_listen). */
int http_req_internal(const struct http_req *r);

#endif
