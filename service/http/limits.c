#include "http/limits.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/metrics.h"
#include "core/ratelimit.h"
#include "http/peer_key.h"

/* Made by limits_init whatever the settings (a reload may turn a limit on);
 * NULL before limits_init and after limits_free: nothing is limited. */
static struct ratelimit *addr_table, *admin_table, *payment_table;

/* Scatters keys over a table's sets unpredictably from outside. */
static uint64_t seed(void)
{
    uint64_t s;
    if (getentropy(&s, sizeof s) != 0)
        s = (uint64_t)clock_mono_us() * UINT64_C(0x9E3779B97F4A7C15);
    return s;
}

/* The interval of 'amount' tokens per per_us microseconds (0 amount: 0, off). */
static int64_t interval_us(int64_t per_us, int64_t amount)
{
    return amount > 0 ? per_us / amount : 0;
}

/* A table of 'entries' buckets, its rate set apart (ratelimit_new has none
 * for "off", and a table may be turned on later). */
static struct ratelimit *table(size_t entries)
{
    return ratelimit_new(RATELIMIT_US_PER_S, 1, entries, seed());
}

void limits_init(const struct cfg *c)
{
    size_t entries = (size_t)c->rate_addr_buckets;
    addr_table = table(entries);
    admin_table = table(entries);
    payment_table = table(entries);
    limits_update(c);
}

void limits_update(const struct cfg *c)
{
    int64_t now = clock_mono_us(), minute = 60 * RATELIMIT_US_PER_S;
    ratelimit_set_rate(addr_table, interval_us(RATELIMIT_US_PER_S, CFG_LIVE(c, rate_addr_per_s)),
                       CFG_LIVE(c, rate_addr_burst), now);
    ratelimit_set_rate(admin_table, interval_us(minute, CFG_LIVE(c, admin_auth_fail_per_min)),
                       CFG_LIVE(c, admin_auth_fail_burst), now);
    ratelimit_set_rate(payment_table, interval_us(minute, CFG_LIVE(c, payment_auth_fail_per_min)),
                       CFG_LIVE(c, payment_auth_fail_burst), now);
}

void limits_free(void)
{
    ratelimit_free(addr_table);
    ratelimit_free(admin_table);
    ratelimit_free(payment_table);
    addr_table = admin_table = payment_table = NULL;
}

/* The wait for a token of r's client in table t (0: go on); with 'take', a
 * token is taken when there is one.  NULL t, or a limit that is off: 0. */
static int64_t client_wait(struct ratelimit *t, const struct http_req *r, int take)
{
    if (!t)
        return 0;
    char key[PEER_KEY_MAX]; /* the connection cap's key too: one client, one rule */
    peer_key_of(http_peer_addr(r), key, sizeof key);
    return take ? ratelimit_take(t, key, clock_mono_us()) : ratelimit_wait(t, key, clock_mono_us());
}

int limits_addr_pass(const struct http_req *r)
{
    int64_t wait = client_wait(addr_table, r, 1);
    if (wait)
        limits_reply(r, LIMITS_ADDR, wait);
    return wait == 0;
}

int64_t limits_auth_failed(const struct http_req *r, enum limits_scope scope)
{
    return client_wait(scope == LIMITS_PAYMENT_AUTH ? payment_table : admin_table, r, 1);
}

void limits_reply(const struct http_req *r, enum limits_scope scope, int64_t wait_us)
{
    static const struct {
        enum metric m;
        const char *detail;
    } scopes[] = {
        [LIMITS_BUYER] = {M_RATE_LIMITED_BUYER,
                          "too many orders from this buyer for this SKU; retry after Retry-After "
                          "seconds"},
        [LIMITS_ADDR] = {M_RATE_LIMITED_ADDR,
                         "too many requests from this address; retry after Retry-After seconds"},
        [LIMITS_ADMIN_AUTH] = {M_RATE_LIMITED_ADMIN_AUTH,
                               "too many failed admin authentications from this address; retry "
                               "after Retry-After seconds"},
        [LIMITS_PAYMENT_AUTH] = {M_RATE_LIMITED_PAYMENT_AUTH,
                                 "too many failed payment callback authentications from this "
                                 "address; retry after Retry-After seconds"},
    };
    metrics_add(scopes[scope].m, 1);
    char secs[24];
    snprintf(secs, sizeof secs, "%" PRId64, ratelimit_retry_after_s(wait_us));
    http_add_header(r, "Retry-After", secs);
    http_reply_error(r, 429, "rate_limited", scopes[scope].detail);
}
