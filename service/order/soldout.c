#include "order/soldout.h"

#include <stdatomic.h>
#include <stdlib.h>

/*
 * One slot: which SKU, until when its flag is trusted, and the probe claim.
 * 'seq' is a sequence lock over (sku, until): odd while a writer changes
 * them; a reader that sees it odd or changed drops what it read.  'probe' is
 * outside it: a claim on the wrong SKU only delays that SKU's next probe.
 */
struct slot {
    _Alignas(64) atomic_uint_least64_t seq;
    atomic_llong sku;   /* 0: empty */
    atomic_llong until; /* monotonic ms; the flag holds while now < until */
    atomic_llong probe; /* the claim of the probe in flight (the instant it was made), 0 none */
};

struct soldout {
    struct slot slots[SOLDOUT_SLOTS];
};

static struct soldout shared; /* static storage: every slot zero, no flag */

struct soldout *soldout_shared(void)
{
    return &shared;
}

struct soldout *soldout_new(void)
{
    struct soldout *t = aligned_alloc(64, sizeof *t);
    if (!t)
        abort();
    for (size_t i = 0; i < SOLDOUT_SLOTS; i++) {
        atomic_init(&t->slots[i].seq, 0);
        atomic_init(&t->slots[i].sku, 0);
        atomic_init(&t->slots[i].until, 0);
        atomic_init(&t->slots[i].probe, 0);
    }
    return t;
}

void soldout_free(struct soldout *t)
{
    free(t);
}

static struct slot *slot_of(struct soldout *t, int64_t sku)
{
    uint64_t h = (uint64_t)sku * UINT64_C(0x9E3779B97F4A7C15);
    return &t->slots[h >> (64 - 12)]; /* SOLDOUT_SLOTS == 1 << 12 */
}
_Static_assert(SOLDOUT_SLOTS == 1 << 12, "slot_of takes the top 12 bits of the hash");

/* Reads (sku, until) as one writer left them.  Returns 0, or -1 when a
 * writer was at work (the caller acts as if the slot were empty). */
static int slot_read(struct slot *s, int64_t *sku, int64_t *until)
{
    uint_least64_t v1 = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (v1 & 1)
        return -1;
    *sku = atomic_load_explicit(&s->sku, memory_order_relaxed);
    *until = atomic_load_explicit(&s->until, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&s->seq, memory_order_relaxed) == v1 ? 0 : -1;
}

/* Takes the slot for writing, without waiting.  Returns 0 with *v (to give
 * to slot_unlock), or -1 when another writer has it (the caller gives up). */
static int slot_lock(struct slot *s, uint_least64_t *v)
{
    uint_least64_t v0 = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if ((v0 & 1) || !atomic_compare_exchange_strong_explicit(
                        &s->seq, &v0, v0 + 1, memory_order_acquire, memory_order_relaxed))
        return -1;
    atomic_thread_fence(memory_order_release);
    *v = v0;
    return 0;
}

static void slot_unlock(struct slot *s, uint_least64_t v)
{
    atomic_store_explicit(&s->seq, v + 2, memory_order_release);
}

enum soldout_check soldout_check(struct soldout *t, int64_t sku, int64_t now_ms, int64_t window_ms,
                                 int64_t *claim)
{
    *claim = 0;
    if (window_ms <= 0 || sku <= 0)
        return SOLDOUT_ASK;
    struct slot *s = slot_of(t, sku);
    int64_t k, until;
    if (slot_read(s, &k, &until) != 0 || k != sku || now_ms >= until)
        return SOLDOUT_ASK;
    /* Trusted for the first half of the window as it is; in the second half
     * one request asks Redis again while the others are still answered. */
    int64_t half = window_ms / 2 > 0 ? window_ms / 2 : 1;
    if (now_ms < until - window_ms + half)
        return SOLDOUT_FLAGGED;
    long long p = atomic_load_explicit(&s->probe, memory_order_relaxed);
    if (p != 0 && now_ms - p < half)
        return SOLDOUT_FLAGGED; /* a probe is in flight */
    long long mine = now_ms != 0 ? now_ms : 1;
    if (!atomic_compare_exchange_strong_explicit(&s->probe, &p, mine, memory_order_relaxed,
                                                 memory_order_relaxed))
        return SOLDOUT_FLAGGED; /* another thread claimed it just now */
    *claim = mine;
    return SOLDOUT_PROBE;
}

/* Sets sku's flag until 'until', unless it already holds a later one. */
static void arm(struct slot *s, int64_t sku, int64_t until)
{
    uint_least64_t v;
    if (slot_lock(s, &v) != 0)
        return;
    if (atomic_load_explicit(&s->sku, memory_order_relaxed) != sku ||
        atomic_load_explicit(&s->until, memory_order_relaxed) < until) {
        atomic_store_explicit(&s->sku, sku, memory_order_relaxed);
        atomic_store_explicit(&s->until, until, memory_order_relaxed);
    }
    slot_unlock(s, v);
}

static void clear(struct slot *s, int64_t sku)
{
    int64_t k, until;
    if (slot_read(s, &k, &until) == 0 && (k != sku || until == 0))
        return; /* the common case (every accepted order): nothing to write */
    uint_least64_t v;
    if (slot_lock(s, &v) != 0)
        return;
    if (atomic_load_explicit(&s->sku, memory_order_relaxed) == sku)
        atomic_store_explicit(&s->until, 0, memory_order_relaxed);
    slot_unlock(s, v);
}

void soldout_note(struct soldout *t, int64_t sku, enum soldout_news news, int64_t sent_ms,
                  int64_t window_ms, int64_t claim)
{
    if (window_ms <= 0 || sku <= 0)
        return;
    struct slot *s = slot_of(t, sku);
    if (news == SOLDOUT_NEWS_EMPTY)
        arm(s, sku, sent_ms + window_ms);
    else if (news == SOLDOUT_NEWS_OPEN)
        clear(s, sku);
    if (claim != 0) {
        long long mine = claim;
        atomic_compare_exchange_strong_explicit(&s->probe, &mine, 0, memory_order_relaxed,
                                                memory_order_relaxed);
    }
}

enum soldout_news soldout_news_of(const struct order_reply *rep)
{
    if (!rep || rep->replayed) /* a replay is an earlier answer, not the stock now */
        return SOLDOUT_NEWS_NONE;
    switch (rep->result) {
    case ORDER_SOLD_OUT:
        return rep->remaining == 0  ? SOLDOUT_NEWS_EMPTY
               : rep->remaining > 0 ? SOLDOUT_NEWS_OPEN /* smaller orders can still succeed */
                                    : SOLDOUT_NEWS_NONE;
    case ORDER_PENDING:
    case ORDER_CONFIRMED:
    case ORDER_REJECTED:
    /* answers the flag must never stand in for */
    case ORDER_SALE_NOT_ACTIVE:
    case ORDER_SKU_NOT_LOADED:
    case ORDER_SKU_UNKNOWN:
        return SOLDOUT_NEWS_OPEN;
    default: /* the buyer's limit or bucket, a failure: says nothing of the stock */
        return SOLDOUT_NEWS_NONE;
    }
}

void soldout_clear(struct soldout *t, int64_t sku)
{
    if (sku > 0)
        clear(slot_of(t, sku), sku);
}

int soldout_each(struct soldout *t, int64_t now_ms, void (*fn)(int64_t sku, void *arg), void *arg)
{
    int n = 0;
    for (size_t i = 0; i < SOLDOUT_SLOTS; i++) {
        int64_t k, until;
        if (slot_read(&t->slots[i], &k, &until) == 0 && k > 0 && now_ms < until) {
            if (fn)
                fn(k, arg);
            n++;
        }
    }
    return n;
}
