/*
 * rlock_script: run Lua scripts on Redis by their SHA1, or as Redis functions.
 *
 * A script is sent as EVALSHA so the full text crosses the network only once
 * per server.  When the server answers NOSCRIPT (first use, restart, failover,
 * SCRIPT FLUSH) the same call is retried once with EVAL, which both runs the
 * script and caches it again, so callers never see NOSCRIPT.
 *
 * The SHA1 is computed locally at init time (no SCRIPT LOAD round trip and no
 * per-connection state), which is why this module carries its own SHA-1.
 *
 * The same script may instead be a Redis function (Redis 7): made with
 * rlock_function_init() it is sent as FCALL (FCALL_RO when read-only) with the
 * same keys and arguments, and never as EVAL: a function is loaded ahead of
 * time, by an administrator, as one library (rlock_library_build(),
 * rlock_library_load()), so that the user who runs it needs no right to send
 * code.  A missing function is an error reply ("ERR Function not found",
 * RLOCK_REPLY_NO_FUNCTION by rlock_reply_kind() of rlock/resp.h), not
 * retried.
 *
 * Thread-safety: a struct rlock_script is immutable after rlock_script_init()
 * or rlock_function_init() and may be shared by any number of threads and
 * connections.
 */
#ifndef RLOCK_SCRIPT_H
#define RLOCK_SCRIPT_H

#include <stddef.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rlock/resp.h"

#ifndef RLOCK_MUST_CHECK
#define RLOCK_MUST_CHECK __attribute__((warn_unused_result))
#endif

#define RLOCK_SHA1_HEX_LEN 40

/* Flags of a script run as a Redis function (its library's flags={...}). */
#define RLOCK_FN_NO_WRITES 1u /* 'no-writes': read-only, run by FCALL_RO (replicas too) */
#define RLOCK_FN_ALLOW_OOM 2u /* 'allow-oom': runs when Redis is over maxmemory (frees memory) */

struct rlock_script {
    const char *name;                 /* for logs and error messages; not owned */
    const char *text;                 /* Lua source; not owned, must outlive every use */
    size_t len;                       /* bytes in text */
    char sha[RLOCK_SHA1_HEX_LEN + 1]; /* lowercase hex SHA1 of text */
    const char *function;             /* Redis function name (FCALL), NULL: EVALSHA; not owned */
    unsigned flags;                   /* RLOCK_FN_* of a function */
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
 * Fills s like rlock_script_init() (name is the function name too), but runs
 * it as the Redis function 'name' with 'flags' (RLOCK_FN_*): the text is the
 * body of the function (it reads KEYS and ARGV as a script does) and goes to
 * Redis only inside a library.  name must be letters, digits and '_', and stay
 * valid while s is used.  Cannot fail.
 */
void rlock_function_init(struct rlock_script *s, const char *name, const char *text, size_t len,
                         unsigned flags);

/*
 * The first two words of the command that runs s, before numkeys: EVALSHA and
 * the SHA1 for a script, FCALL (FCALL_RO when RLOCK_FN_NO_WRITES) and the
 * function name for a function, with their lengths.  For callers that build
 * the command themselves (pipelines); the pointers live as long as s.
 */
void rlock_script_head(const struct rlock_script *s, const char *word[2], size_t len[2]);

/*
 * The argument vector of the command that runs s, for callers that send by
 * argv (redisCommandArgv(), a pipeline): rlock_script_head()'s two words
 * (eval: EVAL and the text), numkeys (written into numkeys, which must live
 * as long as v), then the nkeys keys and nargs arguments of argv (lens gives
 * each length; NULL: NUL-terminated strings): 3 + nkeys + nargs entries of v
 * and l.  The pointers are s's, argv's and numkeys.  Cannot fail.
 */
void rlock_script_argv(const struct rlock_script *s, int eval, int nkeys, int nargs,
                       const char *const *argv, const size_t *lens, const char **v, size_t *l,
                       char numkeys[RLOCK_RESP_DIGITS_MAX]);

/*
 * The command that runs s, written in the Redis protocol (rlock/resp.h) by
 * callers that format their own commands, in two parts so that a caller
 * may keep the second and send it again behind another first (the EVAL
 * after a NOSCRIPT):
 *   - the head: the array's header for 3 + nuser elements (nuser = nkeys +
 *     nargs) and the two words of rlock_script_head(), or with eval set
 *     EVAL and s's text;
 *   - the arguments: numkeys, then the nkeys keys and the nargs arguments
 *     of argv (lens gives each length; NULL: NUL-terminated strings).
 * The writers put the bytes at p (the matching *_bytes() of room, exact)
 * and return the end.  Pure; they cannot fail.
 */
size_t rlock_script_head_bytes(const struct rlock_script *s, int eval, int nuser);
char *rlock_script_write_head(char *p, const struct rlock_script *s, int eval, int nuser);
size_t rlock_script_args_bytes(int nkeys, int nargs, const char *const *argv, const size_t *lens);
char *rlock_script_write_args(char *p, int nkeys, int nargs, const char *const *argv,
                              const size_t *lens);

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

/* ---- Redis Functions libraries ---- */

/*
 * Builds the text of the Redis Functions library 'lib' (letters, digits, '_')
 * holding the n functions fns (each from rlock_function_init()), each
 * registered with its flags and its text as the body of
 * function(KEYS, ARGV), plus the read-only function <lib>_version that returns
 * the library's version: the SHA1 of the rest of the text, also written to
 * version.  The same functions in the same order give the same text.
 *
 * Returns the NUL-terminated text (its length in *len), which the caller frees
 * with free(); NULL when out of memory or when a script is not a function or a
 * name is not valid.
 */
RLOCK_MUST_CHECK char *rlock_library_build(const char *lib, const struct rlock_script *const *fns,
                                           size_t n, size_t *len,
                                           char version[RLOCK_SHA1_HEX_LEN + 1]);

/*
 * Loads (or replaces in place: same name, new text) a library built by
 * rlock_library_build() on c with FUNCTION LOAD REPLACE; the connection's user
 * needs that right.  Returns the reply (the library name, or an error reply
 * such as a NOPERM or a compile error), owned by the caller; NULL on I/O error
 * with c->err set.
 */
RLOCK_MUST_CHECK redisReply *rlock_library_load(redisContext *c, const char *text, size_t len);

/* What a server holds of a library, by rlock_library_check(). */
enum rlock_library_state {
    RLOCK_LIBRARY_CURRENT, /* this very version */
    RLOCK_LIBRARY_OTHER,   /* another version (an older or newer build) */
    RLOCK_LIBRARY_MISSING, /* not loaded (a new server, an empty restart, FUNCTION FLUSH) */
    RLOCK_LIBRARY_ERROR    /* no answer (I/O error: c->err set) or an unexpected one */
};

/*
 * Asks c which version of library lib it holds (FCALL_RO <lib>_version 0)
 * and compares it with version.  Needs only the right to FCALL_RO.
 */
enum rlock_library_state rlock_library_check(redisContext *c, const char *lib, const char *version);

/*
 * The lock library's own scripts as functions named rlock_<file>, for a
 * library built by the application (rlock_library_build()): the i-th, or NULL
 * when i is past the last.  Static; valid for the life of the process.
 */
const struct rlock_script *rlock_library_script(size_t i);

/*
 * From now on every lock of this process runs the library's own scripts by
 * FCALL rlock_<file> (as rlock_library_script() gives them) instead of
 * EVALSHA/EVAL; those functions must then be loaded in some library on every
 * server.  Call once at start-up, before any lock is used; there is no way
 * back.
 */
void rlock_use_functions(void);

#endif /* RLOCK_SCRIPT_H */
