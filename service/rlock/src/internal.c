/*
 * internal.c: the helpers every lock module shares (see internal.h), and the
 * public ones declared in rlock.h that the modules under the locks use.
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "rlock/metrics.h"

/* ---- errors ---- */

void rlock_err_set(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int rlock_reply_int(const redisContext *c, const redisReply *r, const char *op, long long *out,
                    char *err, size_t errlen)
{
    if (!r) {
        rlock_err_set(err, errlen, "%s: %s", op, c && c->errstr[0] ? c->errstr : "I/O error");
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        rlock_err_set(err, errlen, "%s: %s", op, r->str);
        return -1;
    }
    if (r->type != REDIS_REPLY_INTEGER) {
        rlock_err_set(err, errlen, "%s: unexpected reply type %d", op, r->type);
        return -1;
    }
    *out = r->integer;
    return 0;
}

const char *rlock_status_str(enum rlock_status st)
{
    switch (st) {
    case RLOCK_OK:
        return "RLOCK_OK";
    case RLOCK_BUSY:
        return "RLOCK_BUSY";
    case RLOCK_NOT_OWNER:
        return "RLOCK_NOT_OWNER";
    case RLOCK_ERR:
        return "RLOCK_ERR";
    }
    return "RLOCK_UNKNOWN";
}

/* ---- time ---- */

int64_t rlock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timeval rlock_ms_tv(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

int64_t rlock_drift_ms(int ttl_ms)
{
    return ((int64_t)ttl_ms + 99) / 100 + 2;
}

int64_t rlock_lease_left_ms(int ttl_ms, int64_t since_mono_ms)
{
    int64_t left = (int64_t)ttl_ms - (rlock_mono_ms() - since_mono_ms) - rlock_drift_ms(ttl_ms);
    return left > 0 ? left : 0;
}

struct timespec rlock_mono_timespec(int64_t mono_ms)
{
    struct timespec ts = {.tv_sec = mono_ms / 1000, .tv_nsec = (mono_ms % 1000) * 1000000};
    return ts;
}

void rlock_sleep_until(int64_t until_mono_ms)
{
    struct timespec ts = rlock_mono_timespec(until_mono_ms);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* ---- random bytes and tokens ---- */

int rlock_random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void rlock_hex(char *out, const void *in, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = in;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 0xf];
    }
    out[2 * len] = '\0';
}

/*
 * Tokens come from a per-thread buffer of getrandom() bytes, refilled every
 * TOKEN_POOL_BYTES / 16 tokens: one system call for many locks instead of
 * one each.  A forked child must never hand out its parent's next tokens, so
 * a fork handler bumps a generation that makes the child's copy of the
 * buffer stale; consumed bytes are wiped.  Without the fork handler
 * (pthread_atfork failed) every token is drawn directly.
 */
#define TOKEN_POOL_BYTES 512
#define TOKEN_BYTES (RLOCK_TOKEN_LEN / 2)

static atomic_uint fork_generation;
static int token_pool_usable;
static pthread_once_t token_pool_once = PTHREAD_ONCE_INIT;
static _Thread_local struct {
    unsigned char bytes[TOKEN_POOL_BYTES];
    size_t left;
    unsigned generation;
} token_pool;

static void token_pool_after_fork(void)
{
    atomic_fetch_add_explicit(&fork_generation, 1, memory_order_relaxed);
}

static void token_pool_init(void)
{
    token_pool_usable = pthread_atfork(NULL, NULL, token_pool_after_fork) == 0;
}

int rlock_token_new(char out[RLOCK_TOKEN_LEN + 1])
{
    (void)pthread_once(&token_pool_once, token_pool_init);
    if (!token_pool_usable) {
        unsigned char rnd[TOKEN_BYTES];
        if (rlock_random_bytes(rnd, sizeof rnd) < 0)
            return -1;
        rlock_hex(out, rnd, sizeof rnd);
        return 0;
    }
    unsigned gen = atomic_load_explicit(&fork_generation, memory_order_relaxed);
    if (token_pool.left < TOKEN_BYTES || token_pool.generation != gen) {
        token_pool.left = 0;
        if (rlock_random_bytes(token_pool.bytes, sizeof token_pool.bytes) < 0)
            return -1;
        token_pool.left = sizeof token_pool.bytes;
        token_pool.generation = gen;
    }
    unsigned char *p = token_pool.bytes + sizeof token_pool.bytes - token_pool.left;
    rlock_hex(out, p, TOKEN_BYTES);
    memset(p, 0, TOKEN_BYTES);
    token_pool.left -= TOKEN_BYTES;
    return 0;
}

/* ---- strings ---- */

char **rlock_strv_dup(const char *const *v, size_t n)
{
    if (n == 0 || n > SIZE_MAX / sizeof(char *))
        return NULL;
    size_t total = n * sizeof(char *);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(v[i]) + 1;
        if (len > SIZE_MAX - total)
            return NULL;
        total += len;
    }
    char **copy = malloc(total);
    if (!copy)
        return NULL;
    char *p = (char *)(copy + n);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(v[i]) + 1;
        memcpy(p, v[i], len);
        copy[i] = p;
        p += len;
    }
    return copy;
}

/* Redisson's rule: "<prefix>:{<key>}", or "<prefix>:<key>" when the key
 * already has a brace, so that the name hashes to the key's cluster slot. */
size_t rlock_channel_len(const char *prefix, const char *key, size_t key_len)
{
    int braced = memchr(key, '{', key_len) != NULL;
    return strlen(prefix) + 1 + key_len + (braced ? 0 : 2);
}

void rlock_channel_write(char *out, const char *prefix, const char *key, size_t key_len)
{
    int braced = memchr(key, '{', key_len) != NULL;
    size_t n = strlen(prefix);
    memcpy(out, prefix, n);
    out[n++] = ':';
    if (!braced)
        out[n++] = '{';
    memcpy(out + n, key, key_len);
    n += key_len;
    if (!braced)
        out[n++] = '}';
    out[n] = '\0';
}

/* Returns the length without the NUL; writes when out is not NULL (cap is
 * then at least that length + 1). */
static size_t format_channel(char *out, size_t cap, const char *prefix, const char *key)
{
    (void)cap;
    size_t key_len = strlen(key);
    if (out)
        rlock_channel_write(out, prefix, key, key_len);
    return rlock_channel_len(prefix, key, key_len);
}

char *rlock_channel_name(const char *prefix, const char *key)
{
    size_t cap = format_channel(NULL, 0, prefix, key) + 1;
    char *s = malloc(cap);
    if (s)
        format_channel(s, cap, prefix, key);
    return s;
}

char **rlock_release_channels(const char *const *keys, size_t n)
{
    if (n == 0 || n > SIZE_MAX / sizeof(char *))
        return NULL;
    size_t total = n * sizeof(char *);
    for (size_t i = 0; i < n; i++) {
        size_t len = format_channel(NULL, 0, RLOCK_RELEASE_CHANNEL_PREFIX, keys[i]) + 1;
        if (len > SIZE_MAX - total)
            return NULL;
        total += len;
    }
    char **v = malloc(total);
    if (!v)
        return NULL;
    char *p = (char *)(v + n);
    for (size_t i = 0; i < n; i++) {
        size_t cap = format_channel(NULL, 0, RLOCK_RELEASE_CHANNEL_PREFIX, keys[i]) + 1;
        format_channel(p, cap, RLOCK_RELEASE_CHANNEL_PREFIX, keys[i]);
        v[i] = p;
        p += cap;
    }
    return v;
}

/* ---- metrics ---- */

void rlock_count_acquire(enum rlock_status st, int waited, int64_t waited_ms)
{
    if (waited)
        rlock_metrics_add(RLOCK_M_WAIT_MS, (uint64_t)waited_ms);
    if (st == RLOCK_OK) {
        rlock_metrics_add(RLOCK_M_ACQUIRED, 1);
        if (waited)
            rlock_metrics_add(RLOCK_M_WAITED, 1);
    } else if (st == RLOCK_BUSY) {
        rlock_metrics_add(RLOCK_M_BUSY, 1);
    }
}

void rlock_count_release(enum rlock_status st)
{
    if (st == RLOCK_OK)
        rlock_metrics_add(RLOCK_M_RELEASED, 1);
    else if (st == RLOCK_NOT_OWNER)
        rlock_metrics_add(RLOCK_M_RELEASE_REFUSED, 1);
}

/* ---- where a Sentinel watch says the master is ---- */

void rlock_master_seen_init(struct rlock_master_seen *m)
{
    pthread_mutex_init(&m->mu, NULL);
    m->host[0] = '\0';
    m->port = 0;
    atomic_init(&m->gen, 0);
}

void rlock_master_seen_destroy(struct rlock_master_seen *m)
{
    pthread_mutex_destroy(&m->mu);
}

int rlock_master_seen_set(struct rlock_master_seen *m, const char *host, int port, char *old_host,
                          size_t cap, int *old_port)
{
    pthread_mutex_lock(&m->mu);
    int changed = strcmp(m->host, host) != 0 || m->port != port;
    if (changed) {
        snprintf(old_host, cap, "%s", m->host);
        *old_port = m->port;
        snprintf(m->host, sizeof m->host, "%s", host);
        m->port = port;
        atomic_fetch_add(&m->gen, 1);
    }
    pthread_mutex_unlock(&m->mu);
    return changed;
}

int rlock_master_seen_get(struct rlock_master_seen *m, char *host, size_t cap, int *port,
                          uint64_t *gen)
{
    pthread_mutex_lock(&m->mu);
    int known = m->host[0] != '\0';
    if (known) {
        snprintf(host, cap, "%s", m->host);
        *port = m->port;
        if (gen)
            *gen = atomic_load(&m->gen);
    }
    pthread_mutex_unlock(&m->mu);
    return known ? 0 : -1;
}

uint64_t rlock_master_seen_gen(struct rlock_master_seen *m)
{
    return atomic_load(&m->gen);
}
