/*
 * redlock: Redlock over independent masters (see rlock/redlock.h).
 *
 * The only non-obvious part is talking to N blocking hiredis contexts at
 * once with one deadline: commands are appended to each context's output
 * buffer, then a poll() loop writes them when the socket is writable and
 * reads when it is readable, so no call can block past the deadline (the
 * commands are a few hundred bytes, which a writable socket always takes).
 */
#include "rlock/redlock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlock/notify.h"
#include "rlock/resp.h"
#include "rlock/script.h"

/* ---- one command to many nodes, one deadline ---- */

enum node_state { NODE_DONE, NODE_WRITING, NODE_READING };

/* Marks a node that did not answer in time as unusable: its reply may still
 * arrive and would be taken for the answer to the next command. */
static void fail_late_node(redisContext *c, int timeout_ms)
{
    c->err = REDIS_ERR_IO;
    rlock_err_set(c->errstr, sizeof c->errstr, "rlock_redlock: no reply within %d ms", timeout_ms);
}

/*
 * Sends argv to every node i with want[i] set (want NULL: all) and collects
 * the replies into replies[i] (NULL: no answer) until deadline_ms.  Nodes that
 * are NULL or already failed are skipped.  replies[] must hold nnodes entries;
 * entries of nodes not asked are left alone.  Returns -1 if out of memory
 * (nothing sent), else 0.
 */
static int fanout(redisContext *const *nodes, size_t nnodes, const unsigned char *want, int argc,
                  const char **argv, const size_t *argvlen, int64_t deadline_ms, int timeout_ms,
                  redisReply **replies)
{
    enum node_state *st = calloc(nnodes, sizeof *st);
    struct pollfd *pfd = calloc(nnodes, sizeof *pfd);
    size_t *idx = calloc(nnodes, sizeof *idx);
    if (!st || !pfd || !idx) {
        free(st), free(pfd), free(idx);
        return -1;
    }
    size_t busy = 0;
    for (size_t i = 0; i < nnodes; i++) {
        if (want && !want[i])
            continue;
        replies[i] = NULL;
        redisContext *c = nodes[i];
        if (!c || c->err || redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK)
            continue;
        st[i] = NODE_WRITING;
        busy++;
    }

    while (busy > 0) {
        int64_t left = deadline_ms - rlock_mono_ms();
        if (left <= 0)
            break;
        size_t k = 0;
        for (size_t i = 0; i < nnodes; i++) {
            if (st[i] == NODE_DONE)
                continue;
            pfd[k].fd = nodes[i]->fd;
            pfd[k].events = st[i] == NODE_WRITING ? POLLOUT : POLLIN;
            pfd[k].revents = 0;
            idx[k++] = i;
        }
        int n = poll(pfd, (nfds_t)k, (int)left);
        if (n < 0 && errno != EINTR)
            break;
        for (size_t j = 0; n > 0 && j < k; j++) {
            if (!pfd[j].revents)
                continue;
            size_t i = idx[j];
            redisContext *c = nodes[i];
            if (st[i] == NODE_WRITING) {
                int done = 0;
                if (redisBufferWrite(c, &done) != REDIS_OK) {
                    st[i] = NODE_DONE;
                    busy--;
                } else if (done) {
                    st[i] = NODE_READING;
                }
                continue;
            }
            void *r = NULL;
            if (redisBufferRead(c) != REDIS_OK || redisGetReplyFromReader(c, &r) != REDIS_OK) {
                st[i] = NODE_DONE;
                busy--;
            } else if (r) {
                replies[i] = r;
                st[i] = NODE_DONE;
                busy--;
            }
        }
    }
    for (size_t i = 0; i < nnodes; i++)
        if (st[i] != NODE_DONE)
            fail_late_node(nodes[i], timeout_ms);
    free(st), free(pfd), free(idx);
    return 0;
}

/*
 * Runs script s with KEYS[1] = key and ARGV = args on every node, EVALSHA
 * first and EVAL again on the nodes that answered NOSCRIPT, all within
 * deadline_ms.  Same contract as fanout().
 */
static int fanout_script(redisContext *const *nodes, size_t nnodes, const struct rlock_script *s,
                         const char *key, const char *const *args, int nargs, int64_t deadline_ms,
                         int timeout_ms, redisReply **replies)
{
    const char *argv[8];
    size_t head_len[2];
    int argc = 4 + nargs;
    rlock_script_head(s, argv, head_len);
    argv[2] = "1";
    argv[3] = key;
    for (int i = 0; i < nargs; i++)
        argv[4 + i] = args[i];
    if (fanout(nodes, nnodes, NULL, argc, argv, NULL, deadline_ms, timeout_ms, replies) < 0)
        return -1;

    unsigned char *again = calloc(nnodes, 1);
    if (!again)
        return -1;
    size_t nagain = 0;
    for (size_t i = 0; i < nnodes; i++) {
        if (rlock_reply_kind(replies[i]) == RLOCK_REPLY_NOSCRIPT) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
            again[i] = 1;
            nagain++;
        }
    }
    int rc = 0;
    if (nagain > 0) {
        size_t lens[8];
        argv[0] = "EVAL";
        argv[1] = s->text;
        for (int i = 0; i < argc; i++)
            lens[i] = i == 1 ? s->len : strlen(argv[i]);
        rc = fanout(nodes, nnodes, again, argc, argv, lens, deadline_ms, timeout_ms, replies);
    }
    free(again);
    return rc;
}

static void free_replies(redisReply **replies, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
}

/* Counts replies that are integers equal to one, and replies of any kind. */
static void count_int_ones(redisReply **replies, size_t n, size_t *ones, size_t *answered)
{
    *ones = *answered = 0;
    for (size_t i = 0; i < n; i++) {
        if (!replies[i])
            continue;
        (*answered)++;
        if (replies[i]->type == REDIS_REPLY_INTEGER && replies[i]->integer == 1)
            (*ones)++;
    }
}

/* Undoes an attempt: deletes key on every node where it holds token.
 * Returns how many nodes deleted it; *answered counts the nodes that replied. */
static size_t release_all(redisContext *const *nodes, size_t nnodes, const char *key,
                          const char *token, int timeout_ms, redisReply **replies, size_t *answered)
{
    const char *args[] = {token};
    size_t deleted = 0;
    *answered = 0;
    int64_t deadline = rlock_mono_ms() + timeout_ms;
    if (fanout_script(nodes, nnodes, rlock_lua(RLOCK_LUA_RELEASE), key, args, 1, deadline,
                      timeout_ms, replies) == 0)
        count_int_ones(replies, nnodes, &deleted, answered);
    free_replies(replies, nnodes);
    return deleted;
}

/* ---- the public calls ---- */

void rlock_redlock_clear(struct rlock_redlock *l)
{
    free(l->key);
    memset(l, 0, sizeof *l);
}

/* Empties l but keeps its error message for the caller. */
static void clear_keep_err(struct rlock_redlock *l)
{
    char err[sizeof l->err];
    memcpy(err, l->err, sizeof err);
    rlock_redlock_clear(l);
    memcpy(l->err, err, sizeof err);
}

/* Returns the node timeout for o, or -1 if o asks for one >= the ttl. */
static int node_timeout(const struct rlock_redlock_opts *o)
{
    if (o->node_timeout_ms > 0)
        return o->node_timeout_ms < o->ttl_ms ? o->node_timeout_ms : -1;
    int t = o->ttl_ms / RLOCK_REDLOCK_NODE_TIMEOUT_DIVISOR;
    if (t > RLOCK_REDLOCK_DEFAULT_NODE_TIMEOUT_MS)
        t = RLOCK_REDLOCK_DEFAULT_NODE_TIMEOUT_MS;
    return t > 0 ? t : 1;
}

enum rlock_status rlock_redlock_acquire(redisContext *const *nodes, size_t nnodes,
                                        struct rlock_redlock *l, const char *key,
                                        const struct rlock_redlock_opts *o)
{
    if (l->key) {
        RLOCK_SET_ERR(l, "acquire: redlock struct already in use (release or clear it first)");
        return RLOCK_ERR;
    }
    rlock_redlock_clear(l);
    int timeout = o ? node_timeout(o) : -1;
    if (!nodes || nnodes == 0 || !key || !o || o->ttl_ms <= 0 || o->retry_count < 0 ||
        timeout < 0) {
        RLOCK_SET_ERR(l,
                      "acquire: invalid arguments (need nodes, a key, ttl_ms > 0, retry_count >= "
                      "0, node_timeout_ms < ttl_ms)");
        return RLOCK_ERR;
    }
    if (rlock_token_new(l->token) < 0) {
        RLOCK_SET_ERR(l, "acquire: getrandom: %s", strerror(errno));
        return RLOCK_ERR;
    }
    l->key = strdup(key);
    redisReply **replies = calloc(nnodes, sizeof *replies);
    if (!l->key || !replies) {
        free(replies);
        rlock_redlock_clear(l);
        RLOCK_SET_ERR(l, "acquire: out of memory");
        return RLOCK_ERR;
    }
    l->node_timeout_ms = timeout;

    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", o->ttl_ms);
    const char *argv[] = {"SET", key, l->token, "NX", "PX", ttl};
    size_t quorum = nnodes / 2 + 1;
    uint64_t seed = rlock_jitter_seed();
    enum rlock_status st = RLOCK_ERR;
    for (int attempt = 0; attempt <= o->retry_count; attempt++) {
        if (attempt > 0)
            rlock_sleep_until(rlock_mono_ms() + rlock_jitter_pause(&seed, o->retry_ms));

        int64_t start = rlock_mono_ms();
        if (fanout(nodes, nnodes, NULL, 6, argv, NULL, start + timeout, timeout, replies) < 0) {
            RLOCK_SET_ERR(l, "acquire: out of memory");
            st = RLOCK_ERR;
            break;
        }
        size_t granted = 0, answered = 0;
        for (size_t i = 0; i < nnodes; i++) {
            redisReply *r = replies[i];
            if (!r)
                continue;
            answered++;
            if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0)
                granted++;
        }
        free_replies(replies, nnodes);
        int64_t elapsed = rlock_mono_ms() - start;
        int64_t validity = o->ttl_ms - elapsed - rlock_drift_ms(o->ttl_ms);
        if (granted >= quorum && validity > 0) {
            l->ttl_ms = o->ttl_ms;
            l->acquired_mono_ms = start;
            l->validity_ms = validity;
            l->granted = granted;
            l->held = 1;
            l->err[0] = '\0';
            free(replies);
            return RLOCK_OK;
        }

        /* A minority (or a too slow majority) holds our token: undo it now
         * rather than lock everyone else out until the ttl. */
        size_t released_answers;
        (void)release_all(nodes, nnodes, key, l->token, timeout, replies, &released_answers);
        if (answered < quorum) {
            st = RLOCK_ERR;
            RLOCK_SET_ERR(l, "acquire: only %zu of %zu nodes answered within %d ms", answered,
                          nnodes, timeout);
        } else {
            st = RLOCK_BUSY;
            RLOCK_SET_ERR(l, "acquire: %zu of %zu nodes granted (quorum %zu), validity %lld ms",
                          granted, nnodes, quorum, (long long)validity);
        }
    }
    free(replies);
    clear_keep_err(l);
    return st;
}

enum rlock_status rlock_redlock_release(redisContext *const *nodes, size_t nnodes,
                                        struct rlock_redlock *l)
{
    if (!l->key) {
        RLOCK_SET_ERR(l, "release: redlock is not held");
        return RLOCK_NOT_OWNER;
    }
    redisReply **replies = nodes && nnodes ? calloc(nnodes, sizeof *replies) : NULL;
    if (!replies) {
        rlock_redlock_clear(l);
        RLOCK_SET_ERR(l, "release: no nodes or out of memory");
        return RLOCK_ERR;
    }
    size_t quorum = nnodes / 2 + 1, answered = 0;
    size_t deleted =
        release_all(nodes, nnodes, l->key, l->token, l->node_timeout_ms, replies, &answered);
    free(replies);
    enum rlock_status st = RLOCK_OK;
    l->err[0] = '\0';
    if (answered < quorum) {
        st = RLOCK_ERR;
        RLOCK_SET_ERR(l, "release: only %zu of %zu nodes answered", answered, nnodes);
    } else if (deleted < quorum) {
        st = RLOCK_NOT_OWNER;
        RLOCK_SET_ERR(l, "release: only %zu of %zu nodes still held our token", deleted, nnodes);
    }
    clear_keep_err(l);
    return st;
}

enum rlock_status rlock_redlock_extend(redisContext *const *nodes, size_t nnodes,
                                       struct rlock_redlock *l, int ttl_ms)
{
    l->err[0] = '\0';
    if (ttl_ms <= 0 || l->node_timeout_ms >= ttl_ms) {
        RLOCK_SET_ERR(l, "extend: ttl_ms must be > 0 and above the node timeout");
        return RLOCK_ERR;
    }
    if (!l->held || !l->key) {
        RLOCK_SET_ERR(l, "extend: redlock is not held");
        return RLOCK_NOT_OWNER;
    }
    redisReply **replies = nodes && nnodes ? calloc(nnodes, sizeof *replies) : NULL;
    if (!replies) {
        RLOCK_SET_ERR(l, "extend: no nodes or out of memory");
        return RLOCK_ERR;
    }
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *args[] = {l->token, ttl};
    int64_t start = rlock_mono_ms();
    size_t extended = 0, answered = 0;
    int rc = fanout_script(nodes, nnodes, rlock_lua(RLOCK_LUA_EXTEND), l->key, args, 2,
                           start + l->node_timeout_ms, l->node_timeout_ms, replies);
    if (rc == 0)
        count_int_ones(replies, nnodes, &extended, &answered);
    free_replies(replies, nnodes);
    free(replies);

    size_t quorum = nnodes / 2 + 1;
    int64_t validity = ttl_ms - (rlock_mono_ms() - start) - rlock_drift_ms(ttl_ms);
    if (extended >= quorum && validity > 0) {
        l->ttl_ms = ttl_ms;
        l->acquired_mono_ms = start;
        l->validity_ms = validity;
        l->granted = extended;
        return RLOCK_OK;
    }
    if (rc < 0 || answered < quorum) {
        RLOCK_SET_ERR(l, "extend: only %zu of %zu nodes answered", answered, nnodes);
        return RLOCK_ERR;
    }
    RLOCK_SET_ERR(l, "extend: only %zu of %zu nodes still held our token", extended, nnodes);
    l->held = 0;
    return RLOCK_NOT_OWNER;
}

int64_t rlock_redlock_remaining_ms(const struct rlock_redlock *l)
{
    if (!l->held)
        return 0;
    return rlock_lease_left_ms(l->ttl_ms, l->acquired_mono_ms);
}
