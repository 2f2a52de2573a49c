/*
 * rlock/resp.h: the Redis protocol, both ways, for clients that write their
 * own commands (an event loop's connection that formats each command
 * straight into a buffer of its own, with no allocation) and read hiredis
 * replies: the one place the library and its users frame a command and
 * tell one error reply from another.
 *
 * Framing: a command is an array of bulk strings,
 *   *<argc>\r\n  then per argument  $<len>\r\n<bytes>\r\n
 * The writers put bytes at p and return the end of what they wrote; the
 * caller sizes the buffer with the matching *_bytes() function (exact) or
 * the bounds below.  Pure: no allocation, no I/O, cannot fail.
 *
 * Classification: an error reply's first word is its code ("MOVED 3999
 * 10.0.0.2:6379", "OOM command not allowed ...", "NOSCRIPT ..."), which
 * rlock_reply_kind() names, so that a caller switches on an enum instead of
 * comparing strings.  Pure.
 */
#ifndef RLOCK_RESP_H
#define RLOCK_RESP_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

/* Most digits of a length or a count (a uint64_t in decimal). */
#define RLOCK_RESP_DIGITS_MAX 20
/* Longest "*<n>\r\n" or "$<n>\r\n". */
#define RLOCK_RESP_HEAD_MAX (1 + RLOCK_RESP_DIGITS_MAX + 2)
/* Most bytes a bulk string takes beyond its own: its head and the "\r\n" after it. */
#define RLOCK_RESP_BULK_OVERHEAD (RLOCK_RESP_HEAD_MAX + 2)

/* Writes v in decimal at out (RLOCK_RESP_DIGITS_MAX bytes of room), no NUL;
 * returns the number of digits. */
size_t rlock_resp_u64(char *out, uint64_t v);

/* Writes "<kind><n>\r\n" at p (kind '*' for an array, '$' for a bulk
 * string); returns the end. */
char *rlock_resp_head(char *p, char kind, size_t n);

/* The bytes of one bulk string of len bytes: its head, the bytes, "\r\n". */
size_t rlock_resp_bulk_bytes(size_t len);

/* Writes the bulk string s[0..len) at p; returns the end. */
char *rlock_resp_bulk(char *p, const void *s, size_t len);

/* The bytes of the command argv[0..argc) (lens gives each length; NULL:
 * NUL-terminated strings). */
size_t rlock_resp_argv_bytes(int argc, const char *const *argv, const size_t *lens);

/* Writes the command argv[0..argc) at p (rlock_resp_argv_bytes() of room);
 * returns the end. */
char *rlock_resp_argv(char *p, int argc, const char *const *argv, const size_t *lens);

/* What a reply says, by rlock_reply_kind(). */
enum rlock_reply_kind {
    RLOCK_REPLY_NONE,        /* no reply (NULL): I/O error, the connection went */
    RLOCK_REPLY_VALUE,       /* any reply but an error */
    RLOCK_REPLY_ERROR,       /* an error reply none of the kinds below */
    RLOCK_REPLY_NOSCRIPT,    /* EVALSHA of a script the server does not hold: EVAL it */
    RLOCK_REPLY_NO_FUNCTION, /* FCALL of a function the server does not hold ("ERR Function
                              * not found"): its library is not loaded there */
    RLOCK_REPLY_OOM,         /* a write refused past maxmemory (noeviction): a command so
                              * refused, or a script refused at its first write, changed nothing */
    RLOCK_REPLY_READONLY,    /* the server is a replica now (a failover demoted it): drop the
                              * connection; the next asks the Sentinels again */
    RLOCK_REPLY_MOVED,       /* cluster: the slot has another master (rlock/cluster.h) */
    RLOCK_REPLY_ASK,         /* cluster: this key has moved to a slot's importing node */
    RLOCK_REPLY_TRYAGAIN,    /* cluster: the command's keys are split by a migration */
    RLOCK_REPLY_CLUSTERDOWN  /* cluster: the cluster cannot serve the slot now */
};

/* The kind of reply r (NULL: RLOCK_REPLY_NONE). */
enum rlock_reply_kind rlock_reply_kind(const redisReply *r);

/* The kind of the error message msg, an error reply's text: by its first
 * word, the code, followed by a space or the end (so "ASKING ..." is no
 * ASK); RLOCK_REPLY_ERROR for any other (msg NULL included). */
enum rlock_reply_kind rlock_error_kind(const char *msg);

#endif /* RLOCK_RESP_H */
