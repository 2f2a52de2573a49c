/*
 * rlock_script: run Lua scripts on Redis by their SHA1.
 *
 * A script is sent as EVALSHA so the full text crosses the network only once
 * per server.  When the server answers NOSCRIPT (first use, restart, failover,
 * SCRIPT FLUSH) the same call is retried once with EVAL, which both runs the
 * script and caches it again, so callers never see NOSCRIPT.
 *
 * The SHA1 is computed locally at init time (no SCRIPT LOAD round trip and no
 * per-connection state), which is why this module carries its own SHA-1.
 *
 * Thread-safety: a struct rlock_script is immutable after rlock_script_init()
 * and may be shared by any number of threads and connections.
 */
#ifndef RLOCK_SCRIPT_H
#define RLOCK_SCRIPT_H

#include <stddef.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#ifndef RLOCK_MUST_CHECK
#define RLOCK_MUST_CHECK __attribute__((warn_unused_result))
#endif

#define RLOCK_SHA1_HEX_LEN 40

struct rlock_script {
    const char *name;                 /* for logs and error messages; not owned */
    const char *text;                 /* Lua source; not owned, must outlive every use */
    size_t len;                       /* bytes in text */
    char sha[RLOCK_SHA1_HEX_LEN + 1]; /* lowercase hex SHA1 of text */
};

/*
 * Writes the SHA-1 of data[0..len) as 40 lowercase hex characters plus a NUL
 * into out.  Cannot fail.
 */
void rlock_sha1_hex(const void *data, size_t len, char out[RLOCK_SHA1_HEX_LEN + 1]);

/*
 * Fills s for later runs: stores the name and text pointers (the caller keeps
 * ownership; both must stay valid while s is used, which embedded script
 * constants always do) and computes the SHA1 of text.  Cannot fail.
 */
void rlock_script_init(struct rlock_script *s, const char *name, const char *text, size_t len);

/*
 * Runs s synchronously as EVALSHA sha nkeys argv[0..nkeys) argv[nkeys..nkeys+nargs).
 * argvlen gives each element's length (binary safe); if argvlen is NULL the
 * elements are NUL-terminated strings.  On a NOSCRIPT error reply the call is
 * retried once with EVAL and the full text, which re-caches the script.
 *
 * Returns the reply, which the caller owns and frees with freeReplyObject();
 * Redis error replies (script errors, WRONGTYPE, OOM, READONLY, ...) come back
 * as REDIS_REPLY_ERROR replies, not as NULL.  Returns NULL on I/O or protocol
 * error, with c->err / c->errstr set as hiredis does; the context is then
 * unusable.  Invalid counts or allocation failure also return NULL with
 * c->err set (REDIS_ERR_OTHER / REDIS_ERR_OOM).
 */
RLOCK_MUST_CHECK redisReply *rlock_script_run(redisContext *c, const struct rlock_script *s,
                                              int nkeys, int nargs, const char **argv,
                                              const size_t *argvlen);

/*
 * Asynchronous rlock_script_run() on a hiredis async context with the same
 * arguments and NOSCRIPT fallback.  argv/argvlen are copied before returning,
 * so they may live on the caller's stack; s->text must stay valid until fn
 * has run (s itself need not).
 *
 * fn is called exactly once with the final reply, or with NULL on disconnect
 * or error, as hiredis does; as usual with hiredis the reply belongs to the
 * library and is freed after fn returns.  A NOSCRIPT fallback is queued behind
 * whatever the caller pipelined meanwhile, so replies to a script and to later
 * commands may arrive in a different order than they were sent.
 *
 * Returns 0 if the command was queued.  Returns -1 if it was not (context
 * disconnecting or freed, invalid counts, out of memory); fn is then NOT
 * called and privdata stays the caller's.
 */
RLOCK_MUST_CHECK int rlock_script_run_async(redisAsyncContext *ac, const struct rlock_script *s,
                                            redisCallbackFn *fn, void *privdata, int nkeys,
                                            int nargs, const char **argv, const size_t *argvlen);

#endif /* RLOCK_SCRIPT_H */
