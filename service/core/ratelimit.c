#include "core/ratelimit.h"
#include "core/alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct slot {
    char key[RATELIMIT_KEY_MAX]; /* "" when the slot is free */
    int64_t full_at_us;          /* the bucket is full from this instant on */
};

/* Each set keeps its own copy of the rate, changed under its mutex together
 * with its buckets (ratelimit_set_rate), so a visit never sees a bucket of
 * one rate judged by another. */
struct set {
    pthread_mutex_t mu;
    int64_t interval_us, burst; /* 0: no limit */
    struct slot slots[RATELIMIT_WAYS];
};

struct ratelimit {
    uint64_t seed;
    size_t nsets;
    struct set *sets;
};

struct ratelimit *ratelimit_new(int64_t interval_us, int64_t burst, size_t entries, uint64_t seed)
{
    if (interval_us <= 0 || burst <= 0)
        return NULL;
    struct ratelimit *rl = xcalloc(1, sizeof *rl);
    rl->seed = seed;
    rl->nsets = entries / RATELIMIT_WAYS + (entries % RATELIMIT_WAYS != 0);
    if (rl->nsets == 0)
        rl->nsets = 1;
    rl->sets = xcalloc(rl->nsets, sizeof *rl->sets);
    for (size_t i = 0; i < rl->nsets; i++) {
        if (pthread_mutex_init(&rl->sets[i].mu, NULL) != 0)
            abort();
        rl->sets[i].interval_us = interval_us;
        rl->sets[i].burst = burst;
    }
    return rl;
}

/* FNV-1a over the seed and the key: cheap, and with a secret seed nobody
 * outside can tell which keys share a set. */
static struct set *set_of(struct ratelimit *rl, const char *key, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325) ^ rl->seed;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)key[i];
        h *= UINT64_C(0x100000001b3);
    }
    h ^= h >> 29;
    return &rl->sets[h % rl->nsets];
}

/* The slot of key in s, or NULL (s locked). */
static struct slot *do_find(struct set *s, const char *key, size_t n)
{
    for (size_t i = 0; i < RATELIMIT_WAYS; i++)
        if (s->slots[i].key[0] && strncmp(s->slots[i].key, key, n) == 0 &&
            s->slots[i].key[n] == '\0')
            return &s->slots[i];
    return NULL;
}

/* A slot for a new key in s (s locked): a free one, else a full bucket,
 * else the one that will be full first. */
static struct slot *do_claim(struct set *s, int64_t now_us)
{
    struct slot *best = &s->slots[0];
    for (size_t i = 0; i < RATELIMIT_WAYS; i++) {
        struct slot *sl = &s->slots[i];
        if (!sl->key[0] || sl->full_at_us <= now_us)
            return sl;
        if (sl->full_at_us < best->full_at_us)
            best = sl;
    }
    return best;
}

/* The wait for one token of a bucket full from full_at_us on (GCRA: taking
 * one moves that instant one interval later; the burst allows it to lie up
 * to burst intervals ahead of now).  Returns 0 and sets *next when a token
 * is there, else the wait. */
static int64_t gcra(const struct set *s, int64_t full_at_us, int64_t now_us, int64_t *next)
{
    int64_t from = full_at_us > now_us ? full_at_us : now_us;
    int64_t over = from + s->interval_us - now_us - s->burst * s->interval_us;
    if (over > 0)
        return over;
    *next = from + s->interval_us;
    return 0;
}

/* The wait for a token of key's bucket; with 'take', a token is taken when
 * there is one (and a slot claimed for a key not yet remembered). */
static int64_t visit(struct ratelimit *rl, const char *key, int64_t now_us, int take)
{
    if (!rl)
        return 0;
    size_t n = strnlen(key, RATELIMIT_KEY_MAX - 1); /* as stored */
    struct set *s = set_of(rl, key, n);
    pthread_mutex_lock(&s->mu);
    if (s->interval_us == 0) { /* turned off by ratelimit_set_rate */
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    struct slot *sl = do_find(s, key, n);
    int64_t next = 0, wait = gcra(s, sl ? sl->full_at_us : now_us, now_us, &next);
    if (take && wait == 0) {
        if (!sl) {
            sl = do_claim(s, now_us);
            memcpy(sl->key, key, n);
            sl->key[n] = '\0';
        }
        sl->full_at_us = next;
    }
    pthread_mutex_unlock(&s->mu);
    return wait;
}

int64_t ratelimit_take(struct ratelimit *rl, const char *key, int64_t now_us)
{
    return visit(rl, key, now_us, 1);
}

int64_t ratelimit_wait(struct ratelimit *rl, const char *key, int64_t now_us)
{
    return visit(rl, key, now_us, 0);
}

/* The instant a bucket of set s (locked) that is full from full_at_us on
 * will be full under the new rate: it keeps the tokens it holds, at most
 * new_burst of them (a raised burst is earned at the rate, not handed out;
 * a lowered one cuts what is held).  Integer arithmetic in whole and partial
 * tokens, which cannot overflow within the settings' bounds. */
static int64_t do_rescale(const struct set *s, int64_t full_at_us, int64_t now_us,
                          int64_t new_interval_us, int64_t new_burst)
{
    int64_t debt = full_at_us - now_us;
    if (debt <= 0)
        return full_at_us; /* full: full under any rate */
    int64_t held = s->burst * s->interval_us - debt;
    if (held < 0)
        held = 0;
    int64_t whole = held / s->interval_us, part = held % s->interval_us;
    if (whole >= new_burst)
        return now_us;
    return now_us + (new_burst - whole) * new_interval_us - part * new_interval_us / s->interval_us;
}

void ratelimit_set_rate(struct ratelimit *rl, int64_t interval_us, int64_t burst, int64_t now_us)
{
    if (interval_us <= 0 || burst <= 0)
        interval_us = burst = 0;
    for (size_t i = 0; rl && i < rl->nsets; i++) {
        struct set *s = &rl->sets[i];
        pthread_mutex_lock(&s->mu);
        for (size_t j = 0; j < RATELIMIT_WAYS; j++) {
            struct slot *sl = &s->slots[j];
            if (!sl->key[0])
                continue;
            if (s->interval_us == 0 || interval_us == 0)
                sl->key[0] = '\0'; /* to or from no limit: every bucket starts full */
            else
                sl->full_at_us = do_rescale(s, sl->full_at_us, now_us, interval_us, burst);
        }
        s->interval_us = interval_us;
        s->burst = burst;
        pthread_mutex_unlock(&s->mu);
    }
}

size_t ratelimit_size(struct ratelimit *rl)
{
    size_t held = 0;
    for (size_t i = 0; rl && i < rl->nsets; i++) {
        pthread_mutex_lock(&rl->sets[i].mu);
        for (size_t j = 0; j < RATELIMIT_WAYS; j++)
            held += rl->sets[i].slots[j].key[0] != '\0';
        pthread_mutex_unlock(&rl->sets[i].mu);
    }
    return held;
}

size_t ratelimit_capacity(const struct ratelimit *rl)
{
    return rl ? rl->nsets * RATELIMIT_WAYS : 0;
}

int64_t ratelimit_retry_after_s(int64_t wait_us)
{
    int64_t s = wait_us / RATELIMIT_US_PER_S + (wait_us % RATELIMIT_US_PER_S > 0);
    return s < 1 ? 1 : s;
}

void ratelimit_free(struct ratelimit *rl)
{
    if (!rl)
        return;
    for (size_t i = 0; i < rl->nsets; i++)
        pthread_mutex_destroy(&rl->sets[i].mu);
    free(rl->sets);
    free(rl);
}
