/*
 * redis_async: the non-blocking Redis client of one HTTP event-loop thread.
 *
 * hiredis 0.14 has no command timeout, so each command carries its own timer,
 * and its caller hears of a timeout when that command's own time is up, never
 * earlier: a reserve script may run until then, and its reply must reach us.
 * A connection that answered nothing since a timed-out command was sent is
 * stalled: new commands fail at once without being sent, and once every
 * command on it has had its answer it is replaced (after redis_reconnect_ms).
 * While disconnected, commands fail at once (not sent).
 */
#ifndef SECKILL_REDIS_ASYNC_H
#define SECKILL_REDIS_ASYNC_H

#include <event2/event.h>
#include <hiredis.h>

#include "core/cfg.h"
#include <rlock/script.h>

struct redis_async;

/* Why a command has no reply. */
enum redis_async_status {
    REDIS_ASYNC_REPLIED,  /* reply set (it may be an error reply) */
    REDIS_ASYNC_NOT_SENT, /* no connection: Redis never saw the command */
    REDIS_ASYNC_TIMEOUT,  /* sent, no reply within redis_timeout_ms of sending; Redis may
                           * still run it later (a script that must not, checks a deadline) */
    REDIS_ASYNC_LOST      /* sent, then the connection broke: Redis may have run it */
};

/* Called exactly once per command with the reply (valid only during the
 * call) or NULL and the reason. */
typedef void redis_async_fn(redisReply *reply, enum redis_async_status st, void *arg);

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

/* Called with a reply that came after its command's caller was told of a
 * timeout (valid only during the call): what Redis did after all. */
typedef void redis_async_late_fn(redisReply *reply, void *arg);

/* Sets the handler of late replies (none by default). */
void redis_async_on_late(struct redis_async *ra, redis_async_late_fn *fn, void *arg);

/* Commands sent whose callback has not run yet. */
int redis_async_pending(const struct redis_async *ra);

/* Disconnects (pending callbacks get NULL) and frees. */
void redis_async_free(struct redis_async *ra);

#endif
