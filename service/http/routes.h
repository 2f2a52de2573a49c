/*
 * routes: the HTTP API's table, and the router over it.
 *
 * One row per operation: method, path template (the same string as the path
 * in docs/openapi.json), operationId, whether it needs the admin token, its
 * handler, and every answer (status and error code) it can give.  The server
 * checks each reply against that list at run time; test_openapi checks the
 * list against the OpenAPI document, so code, table and document agree.
 *
 * The router answers by itself what needs no handler: 404 for an unknown
 * path, 405 (with Allow) for a known path and another method, 401 for the
 * admin area without a valid token, 429 for a client over its rate limit
 * (the buyer API, or too many failed admin tokens), 400 for a path id that
 * is not one.
 */
#ifndef SECKILL_ROUTES_H
#define SECKILL_ROUTES_H

#include <stddef.h>
#include <stdint.h>

#include "http/server.h"

/* Handles one routed request; 'id' is the path's {…_id}, 0 when it has none. */
typedef void routes_handler_fn(struct http_req *r, int64_t id);

struct routes_route {
    const char *method;    /* "GET" (HEAD is served as GET without a body) or "POST" */
    const char *path;      /* template: "/api/v1/skus/{sku_id}/orders" */
    const char *operation; /* its operationId in docs/openapi.json */
    const char *label;     /* "POST /api/v1/skus/{sku_id}/orders", for logs */
    int admin;             /* needs the admin bearer token */
    int buyer;             /* the buyer API: limited per client address (http/limits.h) */
    routes_handler_fn *handle;
    const struct http_answer *answers; /* every answer it can give, {0} last */
};

extern const struct routes_route routes_table[];
extern const size_t routes_count;
/* What the router answers when no route's path matches. */
extern const struct http_answer routes_unrouted_answers[];

/* The dispatch function of the server (http_server_start). */
void routes_dispatch(struct http_req *r);

#endif
