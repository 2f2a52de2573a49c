/*
 * notify: one subscriber thread per notifier, channels subscribed on
 * demand (see rlock/notify.h).
 *
 * The thread alone touches its redisContext: it poll()s the socket and a
 * wake-up pipe; other threads change the channel table under the mutex and
 * write a byte to the pipe, and the thread then sends the SUBSCRIBE /
 * UNSUBSCRIBE commands the table asks for.  Replies are read without
 * blocking (only after poll() said the socket is readable), so the thread
 * never hangs on Redis and stopping it is bounded.
 */
#include "rlock/notify.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Back-off between reconnect attempts, and the longest poll() sleep (a
 * safety net: the pipe wakes the thread whenever there is work). */
#define NOTIFY_RECONNECT_MIN_MS 50
#define NOTIFY_RECONNECT_MAX_MS 2000
#define NOTIFY_POLL_MS 1000
/* Bounds a write to the subscriber socket (commands are tiny). */
#define NOTIFY_SEND_TIMEOUT_MS 2000

/* One waiter's membership in one channel's list. */
struct nlink {
    struct nlink *next;
    struct rlock_notify_wait *w;
    struct nchan *ch;
};

struct nchan {
    struct nchan *next;
    struct nlink *links;
    int want;     /* waiters registered on this channel */
    int sent;     /* 1 if the last command sent for it was SUBSCRIBE */
    int inflight; /* (UN)SUBSCRIBE commands sent and not yet acknowledged */
    char name[];
};

struct rlock_notify_wait {
    struct rlock_notifier *n;
    uint64_t events; /* bumped by messages, confirmations, reconnects */
    uint64_t seen;   /* events already consumed by rlock_notify_wait_until */
    pthread_cond_t cond;
    rlock_notify_fn *fn;
    void *arg;
    size_t nlinks;
    struct nlink links[];
};

struct rlock_notifier {
    pthread_mutex_t mu;
    pthread_t thread;
    int pipe_fd[2];
    int stop;
    int dirty; /* the channel table changed: commands may be due */
    atomic_int connected;
    rlock_connect_fn *connect;
    void *connect_arg;
    struct nchan *chans;
};

static _Atomic(struct rlock_notifier *) default_notifier;

/* Wakes one waiter: its condition variable or its callback. */
static void do_wake(struct rlock_notify_wait *w)
{
    w->events++;
    if (w->fn)
        w->fn(w->arg);
    else
        pthread_cond_signal(&w->cond);
}

static void do_wake_channel(struct nchan *ch)
{
    for (struct nlink *k = ch->links; k; k = k->next)
        do_wake(k->w);
}

static void poke(struct rlock_notifier *n)
{
    char b = 1;
    ssize_t r;
    do
        r = write(n->pipe_fd[1], &b, 1);
    while (r < 0 && errno == EINTR);
    /* EAGAIN: the pipe is full, so the thread is going to wake anyway. */
}

static struct nchan *do_find(struct rlock_notifier *n, const char *name, size_t len)
{
    for (struct nchan *ch = n->chans; ch; ch = ch->next)
        if (strlen(ch->name) == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

/* Frees channels nobody wants any more and Redis no longer delivers. */
static void do_collect(struct rlock_notifier *n)
{
    struct nchan **pp = &n->chans;
    while (*pp) {
        struct nchan *ch = *pp;
        if (ch->want == 0 && !ch->sent && ch->inflight == 0) {
            *pp = ch->next;
            free(ch);
        } else {
            pp = &ch->next;
        }
    }
}

/* Forgets the connection's state: nothing is subscribed any more.  Every
 * waiter is woken, because a release may have been published meanwhile. */
static void do_reset_channels(struct rlock_notifier *n)
{
    for (struct nchan *ch = n->chans; ch; ch = ch->next) {
        ch->sent = 0;
        ch->inflight = 0;
        do_wake_channel(ch);
    }
    do_collect(n);
    n->dirty = 1;
}

/* Appends the commands the table asks for to c's output buffer.
 * Returns 0, or -1 if hiredis could not append (out of memory). */
static int do_queue_commands(struct rlock_notifier *n, redisContext *c)
{
    for (struct nchan *ch = n->chans; ch; ch = ch->next) {
        const char *cmd = NULL;
        if (ch->want > 0 && !ch->sent)
            cmd = "SUBSCRIBE";
        else if (ch->want == 0 && ch->sent)
            cmd = "UNSUBSCRIBE";
        if (!cmd)
            continue;
        const char *argv[] = {cmd, ch->name};
        if (redisAppendCommandArgv(c, 2, argv, NULL) != REDIS_OK)
            return -1;
        ch->sent = !ch->sent;
        ch->inflight++;
    }
    n->dirty = 0;
    return 0;
}

/* Handles one push from the subscriber connection. */
static void do_handle_reply(struct rlock_notifier *n, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    struct nchan *ch = do_find(n, r->element[1]->str, r->element[1]->len);
    if (!ch)
        return;
    if (strcmp(kind, "message") == 0) {
        do_wake_channel(ch);
    } else if (strcmp(kind, "subscribe") == 0 || strcmp(kind, "unsubscribe") == 0) {
        if (ch->inflight > 0)
            ch->inflight--;
        /* Confirmed: a release published before this point was missed, so
         * the waiters retry once now; later ones will be delivered. */
        if (ch->sent && ch->inflight == 0)
            do_wake_channel(ch);
        do_collect(n);
    }
}

static void drain_pipe(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0)
        ;
}

/* Sleeps up to ms on the pipe only (while disconnected). */
static void nap(struct rlock_notifier *n, int ms)
{
    struct pollfd p = {.fd = n->pipe_fd[0], .events = POLLIN};
    if (poll(&p, 1, ms) > 0)
        drain_pipe(n->pipe_fd[0]);
}

/* Opens the connection.  Returns a usable context or NULL. */
static redisContext *open_connection(struct rlock_notifier *n)
{
    redisContext *c = n->connect(n->connect_arg);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c) {
        struct timeval tv = {NOTIFY_SEND_TIMEOUT_MS / 1000, (NOTIFY_SEND_TIMEOUT_MS % 1000) * 1000};
        (void)redisSetTimeout(c, tv);
    }
    return c;
}

static void *notifier_main(void *arg)
{
    struct rlock_notifier *n = arg;
    redisContext *c = NULL;
    int backoff = NOTIFY_RECONNECT_MIN_MS;

    pthread_mutex_lock(&n->mu);
    while (!n->stop) {
        if (!c) {
            pthread_mutex_unlock(&n->mu);
            c = open_connection(n);
            pthread_mutex_lock(&n->mu);
            if (!c) {
                pthread_mutex_unlock(&n->mu);
                nap(n, backoff);
                backoff =
                    backoff * 2 > NOTIFY_RECONNECT_MAX_MS ? NOTIFY_RECONNECT_MAX_MS : backoff * 2;
                pthread_mutex_lock(&n->mu);
                continue;
            }
            backoff = NOTIFY_RECONNECT_MIN_MS;
            atomic_store(&n->connected, 1);
            do_reset_channels(n);
        }
        int failed = 0;
        if (n->dirty && do_queue_commands(n, c) < 0)
            failed = 1;
        pthread_mutex_unlock(&n->mu);

        int done = 0;
        while (!failed && !done)
            if (redisBufferWrite(c, &done) != REDIS_OK)
                failed = 1;

        struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN},
                              {.fd = n->pipe_fd[0], .events = POLLIN}};
        if (!failed && poll(p, 2, NOTIFY_POLL_MS) < 0 && errno != EINTR)
            failed = 1;
        if (!failed && (p[1].revents & POLLIN))
            drain_pipe(n->pipe_fd[0]);
        if (!failed && (p[0].revents & (POLLIN | POLLERR | POLLHUP)))
            if (redisBufferRead(c) != REDIS_OK)
                failed = 1;

        pthread_mutex_lock(&n->mu);
        void *reply = NULL;
        while (!failed) {
            if (redisGetReplyFromReader(c, &reply) != REDIS_OK) {
                failed = 1;
                break;
            }
            if (!reply)
                break;
            do_handle_reply(n, reply);
            freeReplyObject(reply);
        }
        if (failed) {
            redisFree(c);
            c = NULL;
            atomic_store(&n->connected, 0);
            do_reset_channels(n);
        }
    }
    pthread_mutex_unlock(&n->mu);
    redisFree(c);
    atomic_store(&n->connected, 0);
    return NULL;
}

struct rlock_notifier *rlock_notifier_new(rlock_connect_fn *connect, void *connect_arg, char *err,
                                          size_t errlen)
{
    if (!connect) {
        rlock_err_set(err, errlen, "notifier: no connect function");
        return NULL;
    }
    struct rlock_notifier *n = calloc(1, sizeof *n);
    if (!n) {
        rlock_err_set(err, errlen, "notifier: out of memory");
        return NULL;
    }
    n->connect = connect;
    n->connect_arg = connect_arg;
    if (pipe2(n->pipe_fd, O_NONBLOCK | O_CLOEXEC) < 0) {
        rlock_err_set(err, errlen, "notifier: pipe: %s", strerror(errno));
        free(n);
        return NULL;
    }
    pthread_mutex_init(&n->mu, NULL);
    int rc = pthread_create(&n->thread, NULL, notifier_main, n);
    if (rc != 0) {
        rlock_err_set(err, errlen, "notifier: pthread_create: %s", strerror(rc));
        pthread_mutex_destroy(&n->mu);
        close(n->pipe_fd[0]);
        close(n->pipe_fd[1]);
        free(n);
        return NULL;
    }
    return n;
}

void rlock_notifier_free(struct rlock_notifier *n)
{
    if (!n)
        return;
    struct rlock_notifier *expected = n;
    atomic_compare_exchange_strong(&default_notifier, &expected, NULL);
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_mutex_unlock(&n->mu);
    poke(n);
    pthread_join(n->thread, NULL);
    while (n->chans) {
        struct nchan *ch = n->chans;
        n->chans = ch->next;
        /* Waiters left behind are the caller's bug; detach them so a late
         * unwatch does not touch freed memory through ch. */
        for (struct nlink *k = ch->links; k; k = k->next)
            k->ch = NULL;
        free(ch);
    }
    pthread_mutex_destroy(&n->mu);
    close(n->pipe_fd[0]);
    close(n->pipe_fd[1]);
    free(n);
}

void rlock_notifier_set_default(struct rlock_notifier *n)
{
    atomic_store(&default_notifier, n);
}

struct rlock_notifier *rlock_notifier_default(void)
{
    return atomic_load(&default_notifier);
}

int rlock_notifier_connected(struct rlock_notifier *n)
{
    return n ? atomic_load(&n->connected) : 0;
}

/* Finds or creates channel name.  Returns NULL when out of memory. */
static struct nchan *do_get_channel(struct rlock_notifier *n, const char *name)
{
    size_t len = strlen(name);
    struct nchan *ch = do_find(n, name, len);
    if (ch)
        return ch;
    ch = calloc(1, sizeof *ch + len + 1);
    if (!ch)
        return NULL;
    memcpy(ch->name, name, len + 1);
    ch->next = n->chans;
    n->chans = ch;
    return ch;
}

/* Takes link k out of its channel.  Returns 1 if an UNSUBSCRIBE is due. */
static int do_unlink(struct rlock_notifier *n, struct nlink *k)
{
    struct nchan *ch = k->ch;
    if (!ch)
        return 0;
    for (struct nlink **pp = &ch->links; *pp; pp = &(*pp)->next) {
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    }
    k->ch = NULL;
    if (--ch->want > 0)
        return 0;
    if (ch->sent) {
        n->dirty = 1;
        return 1;
    }
    do_collect(n);
    return 0;
}

struct rlock_notify_wait *rlock_notify_watch(struct rlock_notifier *n, const char *const *channels,
                                             size_t nchannels, rlock_notify_fn *fn, void *arg)
{
    if (!n || !channels || nchannels == 0 ||
        nchannels > (SIZE_MAX - sizeof(struct rlock_notify_wait)) / sizeof(struct nlink))
        return NULL;
    struct rlock_notify_wait *w = calloc(1, sizeof *w + nchannels * sizeof(struct nlink));
    if (!w)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        free(w);
        return NULL;
    }
    w->n = n;
    w->fn = fn;
    w->arg = arg;

    int need_poke = 0;
    pthread_mutex_lock(&n->mu);
    for (size_t i = 0; i < nchannels; i++) {
        struct nchan *ch = channels[i] ? do_get_channel(n, channels[i]) : NULL;
        if (!ch) {
            for (size_t j = 0; j < i; j++)
                need_poke |= do_unlink(n, &w->links[j]);
            pthread_mutex_unlock(&n->mu);
            if (need_poke)
                poke(n);
            pthread_cond_destroy(&w->cond);
            free(w);
            return NULL;
        }
        struct nlink *k = &w->links[i];
        k->w = w;
        k->ch = ch;
        k->next = ch->links;
        ch->links = k;
        if (ch->want++ == 0 && !ch->sent) {
            n->dirty = 1;
            need_poke = 1;
        }
    }
    w->nlinks = nchannels;
    pthread_mutex_unlock(&n->mu);
    if (need_poke)
        poke(n);
    return w;
}

int rlock_notify_wait_until(struct rlock_notify_wait *w, int64_t until_ms)
{
    struct rlock_notifier *n = w->n;
    struct timespec ts = rlock_mono_timespec(until_ms);
    pthread_mutex_lock(&n->mu);
    while (w->events == w->seen && rlock_mono_ms() < until_ms) {
        int rc = pthread_cond_timedwait(&w->cond, &n->mu, &ts);
        if (rc == ETIMEDOUT)
            break;
    }
    int woken = w->events != w->seen;
    w->seen = w->events;
    pthread_mutex_unlock(&n->mu);
    return woken;
}

void rlock_notify_unwatch(struct rlock_notify_wait *w)
{
    if (!w)
        return;
    struct rlock_notifier *n = w->n;
    int need_poke = 0;
    pthread_mutex_lock(&n->mu);
    for (size_t i = 0; i < w->nlinks; i++)
        need_poke |= do_unlink(n, &w->links[i]);
    pthread_mutex_unlock(&n->mu);
    if (need_poke)
        poke(n);
    pthread_cond_destroy(&w->cond);
    free(w);
}

/* ---- waiting loop ---- */

/* xorshift64*: the jitter only has to spread waiters apart. */
static uint64_t jitter_next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dULL;
}

int64_t rlock_jitter_pause(uint64_t *state, int retry_ms)
{
    if (retry_ms <= 0)
        retry_ms = RLOCK_DEFAULT_RETRY_MS;
    int64_t pause = retry_ms / 2 + (int64_t)(jitter_next(state) % ((uint64_t)retry_ms + 1));
    return pause > 0 ? pause : 1;
}

uint64_t rlock_jitter_seed(void)
{
    static atomic_uint_fast64_t counter;
    uint64_t seed;
    if (rlock_random_bytes(&seed, sizeof seed) < 0)
        seed = (uint64_t)rlock_mono_ms() * 0x9e3779b97f4a7c15ULL + atomic_fetch_add(&counter, 1);
    return seed | 1;
}

enum rlock_status rlock_wait_acquire(const struct rlock_opts *o, const char *const *channels,
                                     size_t nchannels, rlock_try_fn *try_once, void *arg)
{
    struct rlock_notifier *n = o->notifier ? o->notifier : rlock_notifier_default();
    struct rlock_notify_wait *w = NULL;
    uint64_t seed = rlock_jitter_seed();
    int64_t start = rlock_mono_ms();
    int64_t deadline = start + (o->wait_ms > 0 ? o->wait_ms : 0);
    int waited = 0;
    enum rlock_status st;

    for (;;) {
        int64_t busy_ms = -1;
        st = try_once(arg, &busy_ms);
        if (st != RLOCK_BUSY)
            break;
        int64_t now = rlock_mono_ms();
        if (now >= deadline)
            break;
        waited = 1;
        /* Subscribe only once the lock turned out busy, so uncontended
         * acquisitions never touch the notifier.  The subscription's
         * confirmation wakes us for one more try, which closes the gap of a
         * release published before we were listening. */
        if (!w && n && nchannels > 0)
            w = rlock_notify_watch(n, channels, nchannels, NULL, NULL);
        int64_t pause = rlock_jitter_pause(&seed, o->retry_ms);
        if (busy_ms >= 0 && busy_ms + 1 < pause)
            pause = busy_ms + 1; /* the lease ends sooner: try right after it */
        int64_t until = now + pause < deadline ? now + pause : deadline;
        if (w)
            (void)rlock_notify_wait_until(w, until);
        else
            rlock_sleep_until(until);
    }
    rlock_notify_unwatch(w);
    rlock_count_acquire(st, waited, waited ? rlock_mono_ms() - start : 0);
    return st;
}
