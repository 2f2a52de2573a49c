/*
 * routes: the HTTP API's table, and the router over it.
 *
 * One row per operation: method, path template (the same string as the path
 * in docs/openapi.json), operationId, whether it needs the admin token or a
 * buyer token, its
 * handler, and every answer (status and error code) it can give.  The server
 * checks each reply against that list at run time; test_openapi checks the
 * list against the OpenAPI document, so code, table and document agree.
 *
 * The router answers by itself what needs no handler: 404 for an unknown
 * path or one the listener does not serve (the public listener has neither
 * /metrics nor, unless admin_on_public, the admin area), 405 (with Allow) for a known path and
 * another method, 401 for the admin area without a valid token, 429 for a client over its rate
 * limit (the buyer API, or too many failed admin tokens), 400 for a path id that is not one.
 */
#ifndef SECKILL_ROUTES_H
#define SECKILL_ROUTES_H

#include <stddef.h>
#include <stdint.h>

#include "http/server.h"

/* The listeners a route is served on (http/server.h: struct http_listen):
 * a route asked for on another one is answered 404, as if it did not exist. */
enum routes_listener {
    ROUTES_PUBLIC = 1,   /* http_addr: the buyer API */
    ROUTES_INTERNAL = 2, /* metrics_addr: /metrics and the admin API */
};

/* Handles one routed request; 'id' is the path's {…_id}, 0 when it has none. */
typedef void routes_handler_fn(struct http_req *r, int64_t id);

struct routes_route {
    const char *method;    /* "GET" (HEAD is served as GET without a body) or "POST" */
    const char *path;      /* template: "/api/v1/skus/{sku_id}/orders" */
    const char *operation; /* its operationId in docs/openapi.json */
    const char *label;     /* "POST /api/v1/skus/{sku_id}/orders", for logs */
    int admin;             /* needs the admin bearer token */
    int payment;           /* an admin route the payment_token may call as well */
    int buyer;             /* needs a buyer token (its handler verifies it: it needs the buyer) */
    int addr_limited;      /* the buyer API: limited per client address (http/limits.h) */
    unsigned listeners;    /* enum routes_listener bits; the admin API is also on the public
                              listener when admin_on_public is 1 */
    routes_handler_fn *handle;
    const struct http_answer *answers; /* every answer it can give, {0} last */
};

extern const struct routes_route routes_table[];
extern const size_t routes_count;
/* What the router answers when no route's path matches. */
extern const struct http_answer routes_unrouted_answers[];

/* The longest path the router splits: more segments, or a segment of
 * ROUTES_SEGMENT_BYTES or more, is no route of ours. */
#define ROUTES_MAX_SEGMENTS 6
#define ROUTES_SEGMENT_BYTES 64

enum routes_verdict {
    ROUTES_FOUND,        /* a route has this path and method */
    ROUTES_WRONG_METHOD, /* a route has this path, none this method: 405 */
    ROUTES_NO_ROUTE,     /* no route has this path: 404 */
};

/* Where a request goes, as routes_match found it. */
struct routes_match {
    const struct routes_route *route; /* FOUND: the route; WRONG_METHOD: the first route of
                                         the path (for Allow); NO_ROUTE: NULL */
    const char *param;                /* FOUND with a "{…}" segment: its bytes, inside
                                         'path'; otherwise NULL */
    size_t param_len;                 /* 1..ROUTES_SEGMENT_BYTES-1 when param is set */
    int admin_area;                   /* the path's first segment is "admin" */
    char allow[32];                   /* WRONG_METHOD: the path's methods ("GET, HEAD, PATCH") */
};

/*
 * Matches a method name ("GET", "HEAD", "POST", ...; case-sensitive as in RFC
 * 9110) and a path ("/api/v1/skus/42"; empty segments are ignored) against the
 * route table, in table order.  HEAD takes GET's routes.  Pure: no I/O, safe
 * from any thread; NULL method or path match nothing.  Always fills *m; the
 * param points into 'path' and lives as long as it does.
 */
enum routes_verdict routes_match(const char *method, const char *path, struct routes_match *m);

/* The dispatch function of the server (http_server_start). */
void routes_dispatch(struct http_req *r);

#endif
