/*
 * rlock/url.h: a Redis server named by a URL, and connections to it that
 * authenticate and select the database.
 *
 *   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]
 *
 * USER and PASSWORD may be percent-encoded ("%40" for '@', "%3A" for ':').
 * With a USER the handshake is `AUTH USER PASSWORD` (a Redis 6 ACL user);
 * with only a PASSWORD (`redis://:PASSWORD@HOST`) it is `AUTH PASSWORD` (the
 * default user).  TLS (`rediss://`) is not supported and is refused.
 *
 * No message written by these functions ever holds the password.
 */
#ifndef RLOCK_URL_H
#define RLOCK_URL_H

#include <stddef.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rlock/rlock.h"

#define RLOCK_URL_DEFAULT_PORT 6379

struct rlock_url {
    char host[256];
    int port;
    int db;
    char user[128];     /* "" : the default user */
    char password[256]; /* "" : no AUTH */
};

/* Parses url into u.  Returns 0, or -1 with a message in err (which names
 * what is wrong, never the password) and u zeroed. */
int rlock_url_parse(const char *url, struct rlock_url *u, char *err,
                    size_t errlen) RLOCK_MUST_CHECK;

/* Sends AUTH (when u has a password) and SELECT (when u->db != 0) on a fresh
 * connection.  Returns 0, or -1 with err set (the server's refusal, e.g.
 * WRONGPASS, or the I/O error); c stays the caller's either way. */
int rlock_url_handshake(redisContext *c, const struct rlock_url *u, char *err,
                        size_t errlen) RLOCK_MUST_CHECK;

/* Connects within connect_timeout_ms, sets io_timeout_ms on every command,
 * then rlock_url_handshake().  Returns a context the caller redisFree()s, or
 * NULL with err set. */
redisContext *rlock_url_connect(const struct rlock_url *u, int connect_timeout_ms,
                                int io_timeout_ms, char *err, size_t errlen);

/* Queues AUTH and SELECT (as rlock_url_handshake) on a new async connection,
 * before any other command, so they run first.  fn gets each reply (an error
 * reply when refused; NULL when the connection went), may be NULL.  Returns 0,
 * or -1 when hiredis refused to queue (the connection is unusable). */
int rlock_url_handshake_async(redisAsyncContext *ac, const struct rlock_url *u, redisCallbackFn *fn,
                              void *privdata) RLOCK_MUST_CHECK;

#endif
