#include "rlock/sentinel.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define SWITCH_CHANNEL "+switch-master"

struct rlock_sentinel_watch {
    struct rlock_master_seen seen; /* first: url.c reads it (internal.h) */
    struct rlock_url url;          /* the Sentinels, credentials and master name */
    struct rlock_sentinel_watch_opts o;
    pthread_t thread;
    int stop_fd[2]; /* a byte on [1] wakes the thread to stop */
    _Atomic uint64_t switches;
};

static int stopping(const struct rlock_sentinel_watch *w, int wait_ms)
{
    struct pollfd p = {.fd = w->stop_fd[0], .events = POLLIN};
    return poll(&p, 1, wait_ms) != 0;
}

/* Records n as the master; a new address bumps the generation. */
static void publish(struct rlock_sentinel_watch *w, const struct rlock_url_node *n, const char *how)
{
    struct rlock_url_node old;
    int changed =
        rlock_master_seen_set(&w->seen, n->host, n->port, old.host, sizeof old.host, &old.port);
    if (changed && w->o.on_change)
        w->o.on_change(old.host[0] ? &old : NULL, n, how, w->o.arg);
}

/* "<name> <old-ip> <old-port> <new-ip> <new-port>": the new address, when
 * the announcement is about our master. */
static int parse_switch(const struct rlock_sentinel_watch *w, const char *msg,
                        struct rlock_url_node *n)
{
    char name[sizeof w->url.master], oldip[256], newip[256];
    int oldport, newport;
    if (sscanf(msg, "%127s %255s %d %255s %d", name, oldip, &oldport, newip, &newport) != 5)
        return -1;
    if (strcmp(name, w->url.master) != 0 || newport < 1 || newport > 65535)
        return -1;
    snprintf(n->host, sizeof n->host, "%s", newip);
    n->port = newport;
    return 0;
}

static void on_reply(struct rlock_sentinel_watch *w, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        return;
    const redisReply *kind = r->element[0], *ch = r->element[1], *msg = r->element[2];
    if (kind->type != REDIS_REPLY_STRING || strcmp(kind->str, "message") != 0 ||
        ch->type != REDIS_REPLY_STRING || strcmp(ch->str, SWITCH_CHANNEL) != 0 ||
        msg->type != REDIS_REPLY_STRING)
        return;
    struct rlock_url_node n;
    if (parse_switch(w, msg->str, &n) != 0)
        return;
    atomic_fetch_add(&w->switches, 1);
    publish(w, &n, SWITCH_CHANNEL);
}

/* Subscribes to +switch-master on Sentinel s.  NULL when it does not answer. */
static redisContext *subscribe(struct rlock_sentinel_watch *w, const struct rlock_url_node *s)
{
    struct timeval tv = {w->o.timeout_ms / 1000, (w->o.timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(s->host, s->port, tv);
    if (!c || c->err || redisSetTimeout(c, tv) != REDIS_OK)
        goto fail;
    struct rlock_url auth_only = w->url; /* the Sentinel's users: no SELECT, no master check */
    auth_only.db = 0;
    auth_only.nsentinels = 0;
    char err[320];
    if (rlock_url_handshake(c, &auth_only, err, sizeof err) != 0)
        goto fail;
    const char *argv[] = {"SUBSCRIBE", SWITCH_CHANNEL};
    redisReply *r = redisCommandArgv(c, 2, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    if (ok)
        return c;
fail:
    redisFree(c);
    return NULL;
}

/* Follows Sentinel s until it fails to answer or the watch stops. */
static void follow(struct rlock_sentinel_watch *w, const struct rlock_url_node *s)
{
    struct rlock_url_node n;
    char err[320];
    if (rlock_sentinel_ask(&w->url, s, w->o.timeout_ms, &n, err, sizeof err) != 0)
        return;
    publish(w, &n, "asked");
    redisContext *c = subscribe(w, s);
    if (!c)
        return;
    /* Subscribed: the asked answer may predate a switch announced before the
     * subscription held, so ask once more now. */
    int64_t next_ask = rlock_mono_ms();
    for (;;) {
        int64_t now = rlock_mono_ms();
        if (now >= next_ask) {
            if (rlock_sentinel_ask(&w->url, s, w->o.timeout_ms, &n, err, sizeof err) != 0)
                break;
            publish(w, &n, "asked");
            next_ask = rlock_mono_ms() + w->o.poll_ms;
            continue;
        }
        struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN},
                              {.fd = w->stop_fd[0], .events = POLLIN}};
        int got = poll(p, 2, (int)(next_ask - now));
        if (got < 0 && errno != EINTR)
            break;
        if (got <= 0)
            continue;
        if (p[1].revents)
            break;
        if (redisBufferRead(c) != REDIS_OK)
            break;
        void *r = NULL;
        int rc;
        while ((rc = redisGetReplyFromReader(c, &r)) == REDIS_OK && r) {
            on_reply(w, r);
            freeReplyObject(r);
            r = NULL;
        }
        if (rc != REDIS_OK)
            break;
    }
    redisFree(c);
}

static void *watch_main(void *arg)
{
    struct rlock_sentinel_watch *w = arg;
    for (int i = 0;; i = (i + 1) % w->url.nsentinels) {
        follow(w, &w->url.sentinel[i]);
        /* That Sentinel failed (or we stop): a pause, then the next one. */
        if (stopping(w, i + 1 == w->url.nsentinels ? w->o.retry_ms : 0))
            break;
    }
    return NULL;
}

struct rlock_sentinel_watch *rlock_sentinel_watch_start(const struct rlock_url *u,
                                                        const struct rlock_sentinel_watch_opts *o,
                                                        char *err, size_t errlen)
{
    if (!u || !o || u->nsentinels < 1 || o->timeout_ms <= 0 || o->poll_ms <= 0 ||
        o->retry_ms <= 0) {
        rlock_err_set(err, errlen, "sentinel watch: %s",
                      !u || u->nsentinels < 1 ? "the URL names no Sentinel"
                                              : "timeout_ms, poll_ms and retry_ms must be > 0");
        return NULL;
    }
    struct rlock_sentinel_watch *w = calloc(1, sizeof *w);
    if (!w) {
        rlock_err_set(err, errlen, "sentinel watch: out of memory");
        return NULL;
    }
    w->url = *u;
    w->url.watch = NULL;
    w->o = *o;
    if (pipe2(w->stop_fd, O_CLOEXEC) != 0) {
        rlock_err_set(err, errlen, "sentinel watch: pipe: %s", strerror(errno));
        free(w);
        return NULL;
    }
    rlock_master_seen_init(&w->seen);
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    if (rc != 0) {
        rlock_err_set(err, errlen, "sentinel watch: no thread: %s", strerror(rc));
        close(w->stop_fd[0]);
        close(w->stop_fd[1]);
        rlock_master_seen_destroy(&w->seen);
        free(w);
        return NULL;
    }
    return w;
}

void rlock_sentinel_watch_stop(struct rlock_sentinel_watch *w)
{
    if (!w)
        return;
    ssize_t n;
    do
        n = write(w->stop_fd[1], "x", 1);
    while (n < 0 && errno == EINTR);
    pthread_join(w->thread, NULL);
    close(w->stop_fd[0]);
    close(w->stop_fd[1]);
    rlock_master_seen_destroy(&w->seen);
    free(w);
}

uint64_t rlock_sentinel_generation(const struct rlock_sentinel_watch *w)
{
    return rlock_master_seen_gen(&((struct rlock_sentinel_watch *)w)->seen);
}

int rlock_sentinel_master(const struct rlock_sentinel_watch *w, struct rlock_url_node *n,
                          uint64_t *gen)
{
    struct rlock_master_seen *m = &((struct rlock_sentinel_watch *)w)->seen;
    return rlock_master_seen_get(m, n->host, sizeof n->host, &n->port, gen);
}

uint64_t rlock_sentinel_switches(const struct rlock_sentinel_watch *w)
{
    return atomic_load(&((struct rlock_sentinel_watch *)w)->switches);
}

int rlock_sentinel_moved(const struct rlock_url *u, uint64_t gen)
{
    return u->watch && rlock_sentinel_generation(u->watch) != gen;
}
