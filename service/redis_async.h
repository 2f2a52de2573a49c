/*
 * redis_async: the non-blocking Redis client of one HTTP event-loop thread.
 *
 * hiredis 0.14 has no command timeout, so each command carries its own timer:
 * when it fires the caller gets NULL at once and the connection is dropped
 * (a server that does not answer one command will not answer the next), then
 * re-established after redis_reconnect_ms.  While disconnected, commands fail
 * at once: the buyer gets 503 instead of waiting.
 */
#ifndef SECKILL_REDIS_ASYNC_H
#define SECKILL_REDIS_ASYNC_H

#include <event2/event.h>
#include <hiredis.h>

#include "cfg.h"
#include "rlock_script.h"

struct redis_async;

/* Called exactly once per command: the reply (valid only during the call;
 * may be an error reply), or NULL on timeout, disconnect or I/O error. */
typedef void redis_async_fn(redisReply *reply, void *arg);

/* Creates the client and starts connecting.  Returns NULL on a bad URL (err set). */
struct redis_async *redis_async_new(struct event_base *base, const struct cfg *c, char *err,
                                    size_t errlen);

/* Runs a script; fn is called exactly once, possibly before this returns. */
void redis_async_script(struct redis_async *ra, const struct rlock_script *s, int nkeys, int nargs,
                        const char **argv, const size_t *lens, redis_async_fn *fn, void *arg);

/* Called for each message on a subscribed channel: its payload and length
 * (valid only during the call).  Called with NULL when the subscription was
 * (re-)established, since messages published meanwhile were missed. */
typedef void redis_async_message_fn(const char *payload, size_t len, void *arg);

/* Makes this client a subscriber of 'channel' (copied), now and after every
 * reconnect.  Such a client can run no other commands.  Call once. */
void redis_async_subscribe(struct redis_async *ra, const char *channel, redis_async_message_fn *fn,
                           void *arg);

/* Commands sent whose callback has not run yet. */
int redis_async_pending(const struct redis_async *ra);

/* Disconnects (pending callbacks get NULL) and frees. */
void redis_async_free(struct redis_async *ra);

#endif
