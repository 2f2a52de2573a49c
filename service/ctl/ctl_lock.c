/*
 * ctl_lock: `seckillctl lock list|inspect|force-release|hold`.
 *
 * A lock is a string key holding its owner's token (simple and multi-lock,
 * redsync / node-redlock format) or a hash of owner -> count (Redisson's
 * reentrant format); its fencing counter is rlock_fence_key(key).
 */
#include "ctl/ctl_lock.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include <rlock/fence.h>
#include <rlock/notify.h>
#include <rlock/rlock.h>

#define SCAN_COUNT "1000"      /* keys examined per SCAN call */
#define OWNER_SHOWN_MAX 512    /* longest owner description printed */
#define LIST_BATCH 256         /* keys described per pipelined round trip */
#define HOLD_MARGIN_DIVISOR 10 /* hold ends with ttl/10 of the lease left, for the release */

void ctl_lock_usage(FILE *out)
{
    fputs("lock commands:\n"
          "  lock list [--match PATTERN]      locks held now: key, type, owner, ttl, fencing\n"
          "                                   counter (PATTERN default " CTL_LOCK_DEFAULT_MATCH
          ")\n"
          "  lock inspect KEY                 one lock in detail\n"
          "  lock force-release KEY --yes     delete a stuck lock whoever holds it (logged);\n"
          "                                   its holder is no longer exclusive\n"
          "  lock hold KEY --ttl MS [--wait MS] [--fence-key KEY]\n"
          "                                   take the lock, print \"TOKEN FENCE\" on stdout,\n"
          "                                   hold it until SIGINT/SIGTERM or nearly the end\n"
          "                                   of the lease, then release it\n",
          out);
}

/* ---- describing a lock ---- */

struct lock_view {
    char type[16];               /* "string", "hash", "none", ... */
    long long pttl;              /* -1 no expiry, -2 gone */
    char owner[OWNER_SHOWN_MAX]; /* token, or "field=count,..." for a hash */
    char fence[32];              /* counter value, or "-" */
};

/* Appends the commands that describe key (TYPE, PTTL, GET fence). */
static int append_describe(redisContext *c, const char *key)
{
    char fence[1024];
    int ok = redisAppendCommand(c, "TYPE %s", key) == REDIS_OK &&
             redisAppendCommand(c, "PTTL %s", key) == REDIS_OK;
    if (rlock_fence_key(fence, sizeof fence, key) == 0)
        ok = ok && redisAppendCommand(c, "GET %s", fence) == REDIS_OK;
    else
        ok = ok && redisAppendCommand(c, "ECHO %s", "") == REDIS_OK; /* keeps replies aligned */
    return ok ? 0 : -1;
}

/* The replies of append_describe(), r[0..2], into v (owner left empty). */
static void view_of(redisReply *const *r, struct lock_view *v)
{
    snprintf(v->type, sizeof v->type, "%s", r[0]->type == REDIS_REPLY_STATUS ? r[0]->str : "?");
    v->pttl = r[1]->type == REDIS_REPLY_INTEGER ? r[1]->integer : -2;
    snprintf(v->fence, sizeof v->fence, "%s",
             r[2]->type == REDIS_REPLY_STRING && r[2]->len > 0 ? r[2]->str : "-");
    v->owner[0] = '\0';
}

/* Reads the replies of append_describe() into v.  Returns 0 or -1 (I/O). */
static int read_describe(redisContext *c, struct lock_view *v)
{
    redisReply *r[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        if (redisGetReply(c, (void **)&r[i]) != REDIS_OK) {
            for (int j = 0; j < i; j++)
                freeReplyObject(r[j]);
            return -1;
        }
    }
    view_of(r, v);
    for (int i = 0; i < 3; i++)
        freeReplyObject(r[i]);
    return 0;
}

/* Formats a Redisson-style hash (owner -> count) as "owner=count,...". */
static void format_hash_owner(const redisReply *r, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        int w = snprintf(out + n, cap - n, "%s%s=%s", n ? "," : "", r->element[i]->str,
                         r->element[i + 1]->str);
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
}

/* Fills v->owner from the key's value.  Returns 0 or -1 (I/O). */
static int read_owner(redisContext *c, const char *key, struct lock_view *v)
{
    redisReply *r = NULL;
    if (strcmp(v->type, "string") == 0)
        r = redisCommand(c, "GET %s", key);
    else if (strcmp(v->type, "hash") == 0)
        r = redisCommand(c, "HGETALL %s", key);
    else
        return 0; /* not a lock format we know; type says what it is */
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_STRING)
        snprintf(v->owner, sizeof v->owner, "%s", r->str);
    else if (r->type == REDIS_REPLY_ARRAY)
        format_hash_owner(r, v->owner, sizeof v->owner);
    freeReplyObject(r);
    return 0;
}

static const char *ttl_text(long long pttl, char *buf, size_t cap)
{
    if (pttl == -1)
        return "none";
    snprintf(buf, cap, "%lld", pttl);
    return buf;
}

static int is_fence_key(const char *key)
{
    size_t n = strlen(key), s = sizeof RLOCK_FENCE_SUFFIX - 1;
    return n >= s && strcmp(key + n - s, RLOCK_FENCE_SUFFIX) == 0;
}

/* ---- lock list ---- */

/* Describes and prints keys[0..n).  Returns 0 or -1 (I/O). */
static int list_batch(redisContext *c, char **keys, size_t n)
{
    struct lock_view v;
    for (size_t i = 0; i < n; i++)
        if (append_describe(c, keys[i]) < 0)
            return -1;
    /* Owners are fetched after the types are known: one more round trip per key,
     * but lists are short and read by humans. */
    struct lock_view *views = calloc(n, sizeof *views);
    if (!views)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = read_describe(c, &views[i]);
    for (size_t i = 0; i < n && rc == 0; i++) {
        v = views[i];
        if (v.pttl == -2)
            continue; /* released between SCAN and now */
        if (read_owner(c, keys[i], &v) < 0) {
            rc = -1;
            break;
        }
        char ttl[24];
        printf("%-48s %-7s %-34s %9s %s\n", keys[i], v.type, v.owner[0] ? v.owner : "-",
               ttl_text(v.pttl, ttl, sizeof ttl), v.fence);
    }
    free(views);
    return rc;
}

/* The locks on one server (a cluster's master answers SCAN for its own
 * slots), printed. */
static int list_on(redisContext *c, const char *match)
{
    char cursor[32] = "0";
    char *batch[LIST_BATCH];
    size_t n = 0;
    int rc = CTL_EXIT_OK;
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT %s", cursor, match, SCAN_COUNT);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            ctl_say("SCAN failed: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
            freeReplyObject(r);
            rc = CTL_EXIT_ERROR;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements && rc == CTL_EXIT_OK; i++) {
            if (is_fence_key(keys->element[i]->str))
                continue;
            batch[n] = strdup(keys->element[i]->str);
            if (!batch[n]) {
                ctl_say("out of memory");
                rc = CTL_EXIT_ERROR;
                break;
            }
            if (++n == LIST_BATCH) {
                if (list_batch(c, batch, n) < 0)
                    rc = CTL_EXIT_ERROR;
                while (n > 0)
                    free(batch[--n]);
            }
        }
        freeReplyObject(r);
    } while (rc == CTL_EXIT_OK && strcmp(cursor, "0") != 0);
    if (rc == CTL_EXIT_OK && n > 0 && list_batch(c, batch, n) < 0)
        rc = CTL_EXIT_ERROR;
    while (n > 0)
        free(batch[--n]);
    if (rc != CTL_EXIT_OK && c->err)
        ctl_say("Redis: %s", c->errstr);
    return rc;
}

static int cmd_list(struct ctl *ctl, const char *match)
{
    int n = redis_conn_nservers(&ctl->redis);
    redisContext *c = n > 0 ? redis_conn_server(&ctl->redis, 0) : NULL;
    if (!c) {
        (void)ctl_redis(ctl); /* says why */
        return CTL_EXIT_ERROR;
    }
    printf("%-48s %-7s %-34s %9s %s\n", "KEY", "TYPE", "OWNER", "TTL_MS", "FENCE");
    for (int i = 0; i < n; i++) {
        c = redis_conn_server(&ctl->redis, i);
        if (!c) {
            ctl_say("Redis server %d of %d cannot be reached", i + 1, n);
            return CTL_EXIT_ERROR;
        }
        int rc = list_on(c, match);
        if (rc != CTL_EXIT_OK)
            return rc;
    }
    return CTL_EXIT_OK;
}

/* ---- one key's lock, on the node that serves it ---- */

/*
 * inspect and force-release each run one transaction on the key's server,
 * through redis_conn_lock(): on a cluster a MOVED or ASK a queued command
 * got makes it run again where the cluster says (ASKING before MULTI covers
 * the whole transaction).
 */
struct tx_call {
    const char *key;
    redisReply *exec; /* the EXEC reply, on RLOCK_OK; the caller frees it */
    char why[320];
};

/* Reads the replies of MULTI, n queued commands and EXEC from c.  Returns
 * RLOCK_OK with t->exec an array of n; else RLOCK_ERR with t->why: I/O, or
 * the first error a queued command got (a cluster's answer among them). */
static enum rlock_status read_tx(redisContext *c, size_t n, struct tx_call *t)
{
    t->exec = NULL;
    t->why[0] = '\0';
    for (size_t i = 0; i < n + 2; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK) {
            snprintf(t->why, sizeof t->why, "Redis: %s", c->errstr);
            freeReplyObject(t->exec);
            t->exec = NULL;
            return RLOCK_ERR;
        }
        if (i == n + 1)
            t->exec = r;
        else if (r->type == REDIS_REPLY_ERROR && !t->why[0])
            snprintf(t->why, sizeof t->why, "transaction failed: %s", r->str);
        if (i < n + 1)
            freeReplyObject(r);
    }
    if (!t->why[0] && (t->exec->type != REDIS_REPLY_ARRAY || t->exec->elements != n))
        snprintf(t->why, sizeof t->why, "transaction failed: %s",
                 t->exec->type == REDIS_REPLY_ERROR ? t->exec->str : "unexpected reply");
    if (!t->why[0])
        return RLOCK_OK;
    freeReplyObject(t->exec);
    t->exec = NULL;
    return RLOCK_ERR;
}

/* ---- lock inspect ---- */

/* TYPE, PTTL, the fence counter and both owner forms (GET fails inside EXEC
 * for a hash and HGETALL for a string, which is fine), in one transaction. */
static enum rlock_status inspect_on(redisContext *c, void *arg, const char **why)
{
    struct tx_call *t = arg;
    *why = t->why;
    redisAppendCommand(c, "MULTI");
    (void)append_describe(c, t->key); /* an append that failed shows in read_tx */
    redisAppendCommand(c, "GET %s", t->key);
    redisAppendCommand(c, "HGETALL %s", t->key);
    redisAppendCommand(c, "EXEC");
    return read_tx(c, 5, t);
}

static int cmd_inspect(struct ctl *ctl, const char *key)
{
    struct tx_call t = {.key = key};
    if (redis_conn_lock(&ctl->redis, key, 0, inspect_on, &t, t.why, sizeof t.why) != RLOCK_OK) {
        ctl_say("inspect %s: %s", key, t.why);
        return CTL_EXIT_ERROR;
    }
    redisReply **e = t.exec->element;
    struct lock_view v;
    view_of(e, &v);
    if (strcmp(v.type, "string") == 0 && e[3]->type == REDIS_REPLY_STRING)
        snprintf(v.owner, sizeof v.owner, "%s", e[3]->str);
    else if (strcmp(v.type, "hash") == 0)
        format_hash_owner(e[4], v.owner, sizeof v.owner);
    freeReplyObject(t.exec);
    char fence[1024], ttl[24];
    int has_fence = rlock_fence_key(fence, sizeof fence, key) == 0;
    printf("key: %s\ntype: %s\nowner: %s\nttl_ms: %s\nfence_key: %s\nfence: %s\n", key, v.type,
           v.owner[0] ? v.owner : "-", v.pttl == -2 ? "-" : ttl_text(v.pttl, ttl, sizeof ttl),
           has_fence ? fence : "-", v.fence);
    if (strcmp(v.type, "none") == 0) {
        ctl_say("%s is not held", key);
        return CTL_EXIT_STATE;
    }
    return CTL_EXIT_OK;
}

/* ---- lock force-release ---- */

/* One transaction: what is logged is exactly what was deleted.  GET or
 * HGETALL fails inside EXEC for the other type, which is fine. */
static enum rlock_status force_release_on(redisContext *c, void *arg, const char **why)
{
    struct tx_call *t = arg;
    *why = t->why;
    char *channel = rlock_channel_name(RLOCK_RELEASE_CHANNEL_PREFIX, t->key);
    if (!channel) {
        snprintf(t->why, sizeof t->why, "out of memory");
        return RLOCK_ERR;
    }
    redisAppendCommand(c, "MULTI");
    redisAppendCommand(c, "TYPE %s", t->key);
    redisAppendCommand(c, "PTTL %s", t->key);
    redisAppendCommand(c, "GET %s", t->key);
    redisAppendCommand(c, "HGETALL %s", t->key);
    redisAppendCommand(c, "DEL %s", t->key);
    /* Wake waiters polling on the key's release channel (rlock_notify). */
    redisAppendCommand(c, "PUBLISH %s 0", channel);
    redisAppendCommand(c, "EXEC");
    free(channel);
    return read_tx(c, 6, t);
}

static int cmd_force_release(struct ctl *ctl, const char *key)
{
    struct tx_call t = {.key = key};
    if (redis_conn_lock(&ctl->redis, key, 0, force_release_on, &t, t.why, sizeof t.why) !=
        RLOCK_OK) {
        ctl_say("force-release %s: %s", key, t.why);
        return CTL_EXIT_ERROR;
    }
    redisReply *r = t.exec;
    int rc = CTL_EXIT_ERROR;
    if (r->element[4]->type != REDIS_REPLY_INTEGER || r->element[4]->integer == 0) {
        ctl_say("force-release %s: not held, nothing deleted", key);
        rc = CTL_EXIT_STATE;
    } else {
        char owner[OWNER_SHOWN_MAX] = "-";
        if (r->element[2]->type == REDIS_REPLY_STRING)
            snprintf(owner, sizeof owner, "%s", r->element[2]->str);
        else if (r->element[3]->type == REDIS_REPLY_ARRAY)
            format_hash_owner(r->element[3], owner, sizeof owner);
        log_warn("force-release %s: deleted by operator (type %s, owner %s, ttl %lld ms); its "
                 "holder is no longer exclusive",
                 key, r->element[0]->str, owner, r->element[1]->integer);
        rc = CTL_EXIT_OK;
    }
    freeReplyObject(r);
    return rc;
}

/* ---- lock hold ---- */

/* Parses a millisecond count in [min, INT_MAX].  Returns 0 or -1. */
static int parse_ms(const char *s, int min, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

/* The acquire of lock hold, on the node that serves key. */
struct hold_call {
    struct rlock *l;
    const char *key, *fence_key;
    const struct rlock_opts *o;
    int64_t deadline, fence;
};

static enum rlock_status hold_on(redisContext *c, void *arg, const char **why)
{
    struct hold_call *h = arg;
    struct rlock_opts o = *h->o;
    int64_t left = h->deadline - rlock_mono_ms(); /* a redirected try waits what is left */
    o.wait_ms = left > 0 ? (int)left : 0;
    enum rlock_status st =
        rlock_acquire_multi_fenced(c, h->l, &h->key, 1, h->fence_key, &o, &h->fence);
    *why = h->l->err;
    return st;
}

static int cmd_hold(struct ctl *ctl, const char *key, int ttl_ms, int wait_ms,
                    const char *fence_key)
{
    /* Signals are taken synchronously (sigtimedwait): blocked from here on, a
     * SIGTERM during the acquire is still answered by a release. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &stop, NULL) != 0) {
        ctl_say("sigprocmask: %s", strerror(errno));
        return CTL_EXIT_ERROR;
    }
    struct rlock l = {0};
    struct rlock_opts o = {.ttl_ms = ttl_ms, .wait_ms = wait_ms, .retry_ms = 0};
    struct hold_call h = {.l = &l,
                          .key = key,
                          .fence_key = fence_key,
                          .o = &o,
                          .deadline = rlock_mono_ms() + wait_ms};
    enum rlock_status st =
        redis_conn_lock(&ctl->redis, key, h.deadline, hold_on, &h, l.err, sizeof l.err);
    int64_t fence = h.fence;
    if (st == RLOCK_BUSY) {
        ctl_say("hold %s: held by another owner (waited %d ms)", key, wait_ms);
        return CTL_EXIT_STATE;
    }
    if (st != RLOCK_OK) {
        ctl_say("hold %s: %s", key, l.err);
        return CTL_EXIT_ERROR;
    }
    printf("%s %" PRId64 "\n", l.token, fence);
    fflush(stdout);

    /* Hold until a stop signal or nearly the end of the lease: a tenth of it
     * is left for the release to find our key still there. */
    int64_t margin = ttl_ms / HOLD_MARGIN_DIVISOR;
    int signalled = 0;
    for (;;) {
        int64_t left = rlock_remaining_ms(&l) - margin;
        if (left <= 0)
            break;
        struct timespec ts = {.tv_sec = left / 1000, .tv_nsec = (left % 1000) * 1000000};
        if (sigtimedwait(&stop, NULL, &ts) > 0) {
            signalled = 1;
            break;
        }
    }

    st = redis_conn_release(&ctl->redis, &l); /* where the key is now, on a cluster */
    if (st == RLOCK_NOT_OWNER && !signalled) {
        /* Too slow to release before the lease ran out (a loaded machine):
         * the lock is free all the same, which is what was asked. */
        ctl_say("hold %s: the lease ran out before the release", key);
        return CTL_EXIT_OK;
    }
    if (st != RLOCK_OK) {
        ctl_say("hold %s: release: %s: %s", key, rlock_status_str(st),
                l.err[0] ? l.err : "no connection");
        return CTL_EXIT_ERROR;
    }
    return CTL_EXIT_OK;
}

/* ---- argument parsing ---- */

struct lock_args {
    const char *key;
    const char *match;
    const char *fence_key;
    const char *ttl;
    const char *wait;
    int yes;
};

/* Reads flags and the optional KEY.  Returns 0 or a ctl_exit code. */
static int parse_args(const char *cmd, int argc, char **argv, struct lock_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char **slot = NULL;
        const char *name = NULL;
        if (strcmp(arg, "--yes") == 0) {
            a->yes = 1;
            continue;
        }
        static const char *const flags[] = {"--match", "--fence-key", "--ttl", "--wait"};
        for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
            size_t len = strlen(flags[f]);
            if (strncmp(arg, flags[f], len) == 0 && (arg[len] == '\0' || arg[len] == '=')) {
                name = flags[f];
                slot = f == 0 ? &a->match : f == 1 ? &a->fence_key : f == 2 ? &a->ttl : &a->wait;
                if (arg[len] == '=')
                    *slot = arg + len + 1;
                else if (i + 1 < argc)
                    *slot = argv[++i];
                else
                    return ctl_usage_error("lock %s: %s needs a value", cmd, name);
                break;
            }
        }
        if (slot)
            continue;
        if (strncmp(arg, "--", 2) == 0)
            return ctl_usage_error("lock %s: unknown flag %s", cmd, arg);
        if (a->key)
            return ctl_usage_error("lock %s: one KEY only (got \"%s\" and \"%s\")", cmd, a->key,
                                   arg);
        a->key = arg;
    }
    return 0;
}

int ctl_lock_main(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        return ctl_usage_error("lock: which command? list, inspect, force-release or hold");
    const char *cmd = argv[0];
    struct lock_args a = {0};
    int rc = parse_args(cmd, argc, argv, &a);
    if (rc)
        return rc;

    int wants_key = strcmp(cmd, "list") != 0;
    if (strcmp(cmd, "list") != 0 && strcmp(cmd, "inspect") != 0 &&
        strcmp(cmd, "force-release") != 0 && strcmp(cmd, "hold") != 0)
        return ctl_usage_error("lock: unknown command \"%s\"", cmd);
    if (wants_key && (!a.key || !a.key[0]))
        return ctl_usage_error("lock %s: KEY is missing", cmd);
    if (!wants_key && a.key)
        return ctl_usage_error("lock list: unexpected argument \"%s\"", a.key);
    int holds = strcmp(cmd, "hold") == 0;
    if ((a.match && strcmp(cmd, "list") != 0) || (a.yes && strcmp(cmd, "force-release") != 0) ||
        ((a.ttl || a.wait || a.fence_key) && !holds))
        return ctl_usage_error("lock %s: flag not valid for this command", cmd);

    if (strcmp(cmd, "list") == 0)
        return cmd_list(ctl, a.match ? a.match : CTL_LOCK_DEFAULT_MATCH);
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(ctl, a.key);
    if (strcmp(cmd, "force-release") == 0) {
        if (!a.yes)
            return ctl_usage_error("lock force-release %s: refusing without --yes (the holder "
                                   "would lose exclusivity while it may still be working)",
                                   a.key);
        return cmd_force_release(ctl, a.key);
    }
    int ttl_ms = 0, wait_ms = 0;
    if (!a.ttl)
        return ctl_usage_error("lock hold: --ttl MS is required");
    if (parse_ms(a.ttl, 1, &ttl_ms) < 0)
        return ctl_usage_error("lock hold: --ttl must be a whole number of ms >= 1, got \"%s\"",
                               a.ttl);
    if (a.wait && parse_ms(a.wait, 0, &wait_ms) < 0)
        return ctl_usage_error("lock hold: --wait must be a whole number of ms >= 0, got \"%s\"",
                               a.wait);
    return cmd_hold(ctl, a.key, ttl_ms, wait_ms, a.fence_key);
}
