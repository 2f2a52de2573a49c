/*
 * rlock: lease locks on Redis (see rlock.h for the protocol and contract).
 */
#include "rlock.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "rlock_script.h"

/* Generated from lua/rlock_*.lua by service/tools/embed.c. */
extern const char lua_rlock_release[];
extern const size_t lua_rlock_release_len;
extern const char lua_rlock_extend[];
extern const size_t lua_rlock_extend_len;
extern const char lua_rlock_multi_acquire[];
extern const size_t lua_rlock_multi_acquire_len;
extern const char lua_rlock_multi_release[];
extern const size_t lua_rlock_multi_release_len;

/* The only shared state: immutable once scripts_init() has run. */
static struct rlock_script script_release;
static struct rlock_script script_extend;
static struct rlock_script script_multi_acquire;
static struct rlock_script script_multi_release;
static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;

static void scripts_init(void)
{
    rlock_script_init(&script_release, "rlock_release", lua_rlock_release, lua_rlock_release_len);
    rlock_script_init(&script_extend, "rlock_extend", lua_rlock_extend, lua_rlock_extend_len);
    rlock_script_init(&script_multi_acquire, "rlock_multi_acquire", lua_rlock_multi_acquire,
                      lua_rlock_multi_acquire_len);
    rlock_script_init(&script_multi_release, "rlock_multi_release", lua_rlock_multi_release,
                      lua_rlock_multi_release_len);
}

/* Lazily computes the script SHAs; pthread_once makes the first use from
 * several threads at once safe without a library init call. */
static void scripts_ensure(void)
{
    (void)pthread_once(&scripts_once, scripts_init);
}

int64_t rlock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

__attribute__((format(printf, 2, 3))) static void set_err(struct rlock *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err, sizeof l->err, fmt, ap);
    va_end(ap);
}

/* Frees the keys and resets every field except err, which explains to the
 * caller why the lock ended up empty. */
static void rlock_empty(struct rlock *l)
{
    free(l->keys);
    l->keys = NULL;
    l->nkeys = 0;
    memset(l->token, 0, sizeof l->token);
    l->ttl_ms = 0;
    l->acquired_mono_ms = 0;
    l->held = 0;
}

void rlock_clear(struct rlock *l)
{
    rlock_empty(l);
    l->err[0] = '\0';
}

/* Fills buf with len bytes from the kernel CSPRNG.  Returns 0, or -1 with
 * errno set. */
static int fill_random(void *buf, size_t len)
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

/* Copies keys into one allocation (pointer vector followed by the strings),
 * so the lock frees them with a single free().  Returns 0 or -1 on OOM. */
static int copy_keys(struct rlock *l, const char *const *keys, size_t nkeys)
{
    size_t total = nkeys * sizeof(char *);
    for (size_t i = 0; i < nkeys; i++) {
        size_t len = strlen(keys[i]) + 1;
        if (len > SIZE_MAX - total)
            return -1;
        total += len;
    }
    char **v = malloc(total);
    if (!v)
        return -1;
    char *p = (char *)(v + nkeys);
    for (size_t i = 0; i < nkeys; i++) {
        size_t len = strlen(keys[i]) + 1;
        memcpy(p, keys[i], len);
        v[i] = p;
        p += len;
    }
    l->keys = v;
    l->nkeys = nkeys;
    return 0;
}

/*
 * Runs one of the lock scripts with KEYS = l's keys and ARGV = token [, arg].
 * Returns RLOCK_OK with *out set to the script's integer reply, or RLOCK_ERR
 * with l->err set (I/O error, error reply, unexpected reply type, OOM).
 */
static enum rlock_status run_lock_script(redisContext *c, struct rlock *l,
                                         const struct rlock_script *s, const char *arg,
                                         const char *op, long long *out)
{
    int nargs = arg ? 2 : 1;
    const char **argv = malloc((l->nkeys + 2) * sizeof *argv);
    if (!argv) {
        set_err(l, "%s: out of memory", op);
        return RLOCK_ERR;
    }
    for (size_t i = 0; i < l->nkeys; i++)
        argv[i] = l->keys[i];
    argv[l->nkeys] = l->token;
    argv[l->nkeys + 1] = arg;

    redisReply *r = rlock_script_run(c, s, (int)l->nkeys, nargs, argv, NULL);
    free(argv);

    enum rlock_status st = RLOCK_ERR;
    if (!r)
        set_err(l, "%s: %s", op, c->errstr[0] ? c->errstr : "I/O error");
    else if (r->type == REDIS_REPLY_ERROR)
        set_err(l, "%s: %s", op, r->str);
    else if (r->type != REDIS_REPLY_INTEGER)
        set_err(l, "%s: unexpected reply type %d from %s", op, r->type, s->name);
    else {
        *out = r->integer;
        st = RLOCK_OK;
    }
    freeReplyObject(r);
    return st;
}

/* One attempt to take every key of l.  Returns RLOCK_OK, RLOCK_BUSY, or
 * RLOCK_ERR with l->err set. */
static enum rlock_status try_acquire(redisContext *c, struct rlock *l, const char *ttl)
{
    if (l->nkeys > 1) {
        long long n = 0;
        enum rlock_status st = run_lock_script(c, l, &script_multi_acquire, ttl, "acquire", &n);
        if (st != RLOCK_OK)
            return st;
        return n == 1 ? RLOCK_OK : RLOCK_BUSY;
    }

    /* Plain SET NX PX, byte for byte what redsync and node-redlock send. */
    const char *argv[] = {"SET", l->keys[0], l->token, "NX", "PX", ttl};
    redisReply *r = redisCommandArgv(c, 6, argv, NULL);
    enum rlock_status st = RLOCK_ERR;
    if (!r)
        set_err(l, "acquire: %s", c->errstr[0] ? c->errstr : "I/O error");
    else if (r->type == REDIS_REPLY_NIL)
        st = RLOCK_BUSY;
    else if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0)
        st = RLOCK_OK;
    else if (r->type == REDIS_REPLY_ERROR)
        set_err(l, "acquire: %s", r->str);
    else
        set_err(l, "acquire: unexpected reply type %d to SET", r->type);
    freeReplyObject(r);
    return st;
}

/* xorshift64*: retry jitter only needs to spread waiters apart, not to be
 * unpredictable, and keeping its state on the caller's stack avoids shared
 * mutable state between threads. */
static uint64_t jitter_next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dULL;
}

/* Returns a pause uniformly in [retry/2, retry*3/2], at least 1 ms. */
static int64_t jitter_pause(uint64_t *state, int retry_ms)
{
    int64_t pause = retry_ms / 2 + (int64_t)(jitter_next(state) % ((uint64_t)retry_ms + 1));
    return pause > 0 ? pause : 1;
}

/*
 * Blocks until the monotonic clock reaches until_ms.  This is the single
 * place a waiter idles between attempts: a pub/sub wake-up on release will
 * plug in here and may return early, which the caller already tolerates.
 */
static void wait_before_retry(int64_t until_ms)
{
    struct timespec ts = {.tv_sec = until_ms / 1000, .tv_nsec = (until_ms % 1000) * 1000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Validates the arguments shared by both acquire calls.  Returns 0, or -1
 * with l->err set. */
static int check_acquire_args(struct rlock *l, const char *const *keys, size_t nkeys,
                              const struct rlock_opts *o)
{
    if (l->keys || l->nkeys) {
        set_err(l, "acquire: lock struct already in use (release or clear it first)");
        return -1;
    }
    if (!o || o->ttl_ms <= 0 || o->wait_ms < 0) {
        set_err(l, "acquire: invalid options (need ttl_ms > 0, wait_ms >= 0)");
        return -1;
    }
    /* A script call sends nkeys + 5 words and hiredis counts them in an int. */
    if (!keys || nkeys == 0 || nkeys > (size_t)INT_MAX - 5) {
        set_err(l, "acquire: need between 1 and INT_MAX-5 keys");
        return -1;
    }
    for (size_t i = 0; i < nkeys; i++) {
        if (!keys[i]) {
            set_err(l, "acquire: key %zu is NULL", i);
            return -1;
        }
    }
    /* Duplicates would make release count fewer deletions than keys and
     * report a lost lease that never happened.  Multi-locks are small, so
     * the quadratic check is cheap. */
    for (size_t i = 0; i < nkeys; i++) {
        for (size_t j = i + 1; j < nkeys; j++) {
            if (strcmp(keys[i], keys[j]) == 0) {
                set_err(l, "acquire: duplicate key \"%s\"", keys[i]);
                return -1;
            }
        }
    }
    return 0;
}

enum rlock_status rlock_acquire_multi(redisContext *c, struct rlock *l, const char *const *keys,
                                      size_t nkeys, const struct rlock_opts *o)
{
    if (check_acquire_args(l, keys, nkeys, o) < 0)
        return RLOCK_ERR;
    l->err[0] = '\0';

    /* 16 bytes make the token, 8 more seed this call's retry jitter. */
    unsigned char rnd[24];
    if (fill_random(rnd, sizeof rnd) < 0) {
        set_err(l, "acquire: getrandom: %s", strerror(errno));
        return RLOCK_ERR;
    }
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < RLOCK_TOKEN_LEN / 2; i++) {
        l->token[2 * i] = hex[rnd[i] >> 4];
        l->token[2 * i + 1] = hex[rnd[i] & 0xf];
    }
    l->token[RLOCK_TOKEN_LEN] = '\0';
    uint64_t seed;
    memcpy(&seed, rnd + 16, sizeof seed);
    seed |= 1; /* xorshift never leaves 0 */

    if (copy_keys(l, keys, nkeys) < 0) {
        rlock_empty(l);
        set_err(l, "acquire: out of memory");
        return RLOCK_ERR;
    }
    scripts_ensure();

    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", o->ttl_ms);
    int retry_ms = o->retry_ms > 0 ? o->retry_ms : RLOCK_DEFAULT_RETRY_MS;
    int64_t deadline = rlock_mono_ms() + o->wait_ms;
    enum rlock_status st;
    for (;;) {
        /* The lease may start as soon as Redis sees the request, so its
         * validity counts from before sending, never from the reply. */
        int64_t start = rlock_mono_ms();
        st = try_acquire(c, l, ttl);
        if (st == RLOCK_OK) {
            l->ttl_ms = o->ttl_ms;
            l->acquired_mono_ms = start;
            l->held = 1;
            return RLOCK_OK;
        }
        if (st != RLOCK_BUSY)
            break;
        int64_t now = rlock_mono_ms();
        if (now >= deadline) {
            set_err(l, "acquire: held by another owner after waiting %d ms", o->wait_ms);
            break;
        }
        int64_t pause = jitter_pause(&seed, retry_ms);
        wait_before_retry(now + (pause < deadline - now ? pause : deadline - now));
    }
    rlock_empty(l);
    return st;
}

enum rlock_status rlock_acquire(redisContext *c, struct rlock *l, const char *key,
                                const struct rlock_opts *o)
{
    return rlock_acquire_multi(c, l, &key, 1, o);
}

enum rlock_status rlock_release(redisContext *c, struct rlock *l)
{
    l->err[0] = '\0';
    if (l->nkeys == 0) {
        set_err(l, "release: lock is not held");
        return RLOCK_NOT_OWNER;
    }
    scripts_ensure();

    const struct rlock_script *s = l->nkeys == 1 ? &script_release : &script_multi_release;
    long long deleted = 0;
    enum rlock_status st = run_lock_script(c, l, s, NULL, "release", &deleted);
    if (st == RLOCK_OK && (deleted < 0 || (unsigned long long)deleted != l->nkeys)) {
        set_err(l, "release: only %lld of %zu keys still held our token", deleted, l->nkeys);
        st = RLOCK_NOT_OWNER;
    }
    rlock_empty(l);
    return st;
}

enum rlock_status rlock_extend(redisContext *c, struct rlock *l, int ttl_ms)
{
    l->err[0] = '\0';
    if (ttl_ms <= 0) {
        set_err(l, "extend: ttl_ms must be > 0");
        return RLOCK_ERR;
    }
    if (!l->held || l->nkeys == 0) {
        set_err(l, "extend: lock is not held");
        return RLOCK_NOT_OWNER;
    }
    scripts_ensure();

    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    int64_t start = rlock_mono_ms();
    long long ok = 0;
    enum rlock_status st = run_lock_script(c, l, &script_extend, ttl, "extend", &ok);
    if (st != RLOCK_OK)
        return st;
    if (ok != 1) {
        set_err(l, "extend: a key expired or is held by another owner");
        l->held = 0;
        return RLOCK_NOT_OWNER;
    }
    l->ttl_ms = ttl_ms;
    l->acquired_mono_ms = start;
    return RLOCK_OK;
}

int64_t rlock_remaining_ms(const struct rlock *l)
{
    if (!l->held)
        return 0;
    /* Allowance for the Redis clock running faster than ours (as Redlock
     * does), rounded up so short leases are never overestimated. */
    int64_t drift = ((int64_t)l->ttl_ms + 99) / 100 + 2;
    int64_t left = (int64_t)l->ttl_ms - (rlock_mono_ms() - l->acquired_mono_ms) - drift;
    return left > 0 ? left : 0;
}
