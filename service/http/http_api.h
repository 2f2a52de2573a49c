/*
 * http_api: the HTTP front of seckilld.  cfg->http_threads event-loop threads
 * share one listening socket; each has its own evhttp and its own async Redis
 * client for the order path.  Everything blocking (admin, lookups) goes to the
 * worker pool and comes back to the loop that owns the request.
 */
#ifndef SECKILL_HTTP_API_H
#define SECKILL_HTTP_API_H

#include <stddef.h>

#include "core/cfg.h"
#include "store/workers.h"

struct http_server;

/* Binds cfg->http_addr and starts the loops.  Returns NULL (err set) on failure. */
struct http_server *http_server_start(const struct cfg *c, struct workers *ws, char *err,
                                      size_t errlen);

/* Lets each loop finish its active callbacks, joins the threads and frees s. */
void http_server_stop(struct http_server *s);

#endif
