#include "order/order_wait.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "store/redis_async.h"

#define OW_BUCKETS 16384 /* power of two; a chain holds a few entries at 20k orders/s */

/* A waiter (fn set) or a decision that came first (fn NULL). */
struct ow_entry {
    struct order_wait *ow;
    int64_t id;
    char entry[ORDER_ENTRY_MAX]; /* waiters: the reservation's stream entry, "" unknown */
    struct ow_entry *chain;      /* bucket */
    order_wait_fn *fn;
    void *arg;
    struct event *timer;
    struct order_decision d; /* early decisions only */
    int64_t at_ms;
    struct ow_entry *later; /* early decisions, oldest first */
};

struct order_wait {
    struct event_base *base;
    struct redis_async *sub;
    const struct cfg *cfg;
    /* A common timeout of order_ack_wait_ms (one heap entry for all
     * waiters), made again when a reload changed the setting (a base holds
     * up to 256 such durations; beyond, a plain timer of that length). */
    const struct timeval *wait_tv;
    struct timeval wait_plain;
    int64_t wait_ms;
    int64_t keep_early_ms;
    struct ow_entry *bucket[OW_BUCKETS];
    struct ow_entry *oldest, *newest; /* early decisions */
};

static struct ow_entry **slot(struct order_wait *ow, int64_t id)
{
    uint64_t h = (uint64_t)id * UINT64_C(0x9E3779B97F4A7C15);
    return &ow->bucket[h >> 50 & (OW_BUCKETS - 1)];
}

static void unlink_entry(struct order_wait *ow, struct ow_entry *e)
{
    for (struct ow_entry **p = slot(ow, e->id); *p; p = &(*p)->chain)
        if (*p == e) {
            *p = e->chain;
            break;
        }
}

/* Wakes waiter e with d (NULL: none came) and frees it. */
static void wake(struct ow_entry *e, const struct order_decision *d)
{
    unlink_entry(e->ow, e);
    event_free(e->timer);
    order_wait_fn *fn = e->fn;
    void *arg = e->arg;
    free(e);
    fn(d, arg);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    metrics_add(M_ORDERS_ACK_TIMEOUTS, 1);
    wake(arg, NULL);
}

/* Drops early decisions nobody can wait for any more. */
static void expire_early(struct order_wait *ow, int64_t now)
{
    while (ow->oldest && ow->oldest->at_ms + ow->keep_early_ms < now) {
        struct ow_entry *e = ow->oldest;
        ow->oldest = e->later;
        if (!ow->oldest)
            ow->newest = NULL;
        unlink_entry(ow, e); /* kept decisions stay in the table until they expire */
        free(e);
    }
}

/* Wakes every waiter of d's reservation (a retry with the same key may have
 * added a second) and keeps d for waiters still to come: the reserve reply of
 * this very order, or of a retry, may reach the loop after the decision. */
static void decided(struct order_wait *ow, const struct order_decision *d, int64_t now)
{
    int known = 0;
    struct ow_entry **p = slot(ow, d->order_id);
    while (*p) {
        struct ow_entry *e = *p;
        if (e->fn && order_decision_is_for(d, e->id, e->entry)) {
            wake(e, d);
            p = slot(ow, d->order_id); /* the chain changed under us */
        } else {
            /* already kept: a replayed batch published it again */
            known |= !e->fn && e->id == d->order_id && strcmp(e->d.entry, d->entry) == 0;
            p = &e->chain;
        }
    }
    if (known)
        return;
    struct ow_entry *e = xcalloc(1, sizeof *e);
    e->ow = ow;
    e->id = d->order_id;
    e->d = *d;
    e->at_ms = now;
    e->chain = *slot(ow, e->id);
    *slot(ow, e->id) = e;
    if (ow->newest)
        ow->newest->later = e;
    else
        ow->oldest = e;
    ow->newest = e;
}

static void on_message(const char *payload, size_t len, void *arg)
{
    struct order_wait *ow = arg;
    if (!payload) {
        log_info("subscribed to %s", KEYS_DECISIONS_CHANNEL);
        return;
    }
    (void)len; /* hiredis NUL-terminates string replies */
    int64_t now = clock_mono_ms();
    expire_early(ow, now);
    struct order_decision d;
    int rc;
    for (const char *p = payload; (rc = order_decision_next(&p, &d)) != 0;) {
        if (rc < 0) {
            log_warn("malformed decision in a message on %s", KEYS_DECISIONS_CHANNEL);
            continue;
        }
        decided(ow, &d, now);
    }
}

/* The wait of a new waiter: order_ack_wait_ms as it is now. */
static const struct timeval *wait_tv(struct order_wait *ow)
{
    int64_t ms = CFG_LIVE(ow->cfg, order_ack_wait_ms);
    if (ms != ow->wait_ms || !ow->wait_tv) {
        ow->wait_plain = (struct timeval){(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
        ow->wait_tv = event_base_init_common_timeout(ow->base, &ow->wait_plain);
        if (!ow->wait_tv)
            ow->wait_tv = &ow->wait_plain;
        ow->wait_ms = ms;
    }
    return ow->wait_tv;
}

struct order_wait *order_wait_new(struct event_base *base, const struct cfg *c, char *err,
                                  size_t errlen)
{
    struct order_wait *ow = xcalloc(1, sizeof *ow);
    ow->base = base;
    ow->cfg = c;
    ow->keep_early_ms = c->redis_timeout_ms;
    ow->sub = redis_async_new(base, c, err, errlen);
    if (!ow->sub) {
        free(ow);
        return NULL;
    }
    redis_async_subscribe(ow->sub, KEYS_DECISIONS_CHANNEL, on_message, ow);
    return ow;
}

void order_wait_add(struct order_wait *ow, int64_t order_id, const char *entry, order_wait_fn *fn,
                    void *arg)
{
    for (struct ow_entry *e = *slot(ow, order_id); e; e = e->chain)
        if (!e->fn && order_decision_is_for(&e->d, order_id, entry)) { /* it came first */
            struct order_decision d = e->d;
            fn(&d, arg);
            return;
        }
    struct ow_entry *e = xcalloc(1, sizeof *e);
    e->ow = ow;
    e->id = order_id;
    snprintf(e->entry, sizeof e->entry, "%s", entry);
    e->fn = fn;
    e->arg = arg;
    e->timer = evtimer_new(ow->base, on_timeout, e);
    if (!e->timer)
        abort();
    e->chain = *slot(ow, order_id);
    *slot(ow, order_id) = e;
    evtimer_add(e->timer, wait_tv(ow));
}

void order_wait_free(struct order_wait *ow)
{
    if (!ow)
        return;
    /* Waiters first: their buyers still get an answer ("pending"). */
    for (size_t i = 0; i < OW_BUCKETS; i++) {
        struct ow_entry **p = &ow->bucket[i];
        while (*p) {
            if ((*p)->fn)
                wake(*p, NULL);
            else
                p = &(*p)->chain;
        }
    }
    while (ow->oldest) {
        struct ow_entry *e = ow->oldest;
        ow->oldest = e->later;
        free(e);
    }
    redis_async_free(ow->sub);
    free(ow);
}
