/*
 * Fuzz target: the token bucket tables of core/ratelimit (the per-address
 * limits of the buyer API and of failed admin and payment authentications),
 * driven with fuzzed keys, times and table shapes.
 *
 * Input: three bytes of shape, then operations of three bytes each:
 *   byte 0: the interval, (b % 64 + 1) ms;
 *   byte 1: the burst, b % 16 + 1 (255: 0, no limit: a NULL table);
 *   byte 2: bit 0 the mode, bits 1-3 the table's entries, 8 * (n + 1);
 *   per op: a key byte, then a little-endian 16-bit time step (in units of
 *   interval / 64 + 1 us, so steps fall both within and across intervals);
 *   the key byte's bit 7 takes a token, else only asks for the wait; in
 *   the few-keys mode the key byte RATE_CHANGE instead changes the table's
 *   rate (ratelimit_set_rate, as a reload does) after the time step: the
 *   step's low byte gives the interval as byte 0 does, its high byte the
 *   burst, b % 17 (0: the limit off).
 * Modes:
 *   - few keys (bit 0 clear): at most RATELIMIT_WAYS distinct keys, so no
 *     set can overflow and no bucket is forgotten before it is full again;
 *     then, per key, the tokens taken since its first take never exceed
 *     burst + elapsed / interval (the GCRA bound), and a refused take's
 *     wait is exact: no token one microsecond before it, one at it; after
 *     a rate change the bound starts again from each key's next take, with
 *     the new rate and burst (a bucket keeps at most the new burst);
 *   - many keys (bit 0 set): the key byte is a length, the next that many
 *     input bytes the key (up to RATELIMIT_KEY_MAX + 8, so long keys share
 *     their prefix's bucket), flooding a small table.
 * In both: ratelimit_wait and ratelimit_take agree on whether a token is
 * there, a refusal waits 1..interval us, and the table never holds more
 * buckets than its capacity, which is the entries asked for rounded up to
 * whole sets.
 */
#include <stdlib.h>
#include <string.h>

#include "core/ratelimit.h"
#include "fuzz/fuzz.h"

#define FEW_KEYS RATELIMIT_WAYS
#define MAX_OPS 4096
#define START_US (INT64_C(1) << 40) /* a monotonic clock well past zero */
#define RATE_CHANGE 0x7f

struct shadow {
    int used;
    int64_t first_take_us, taken;
};

/* One visit of key at now_us; returns 1 when a token was taken.  Checks
 * that wait and take agree and that a refusal waits 1..interval us. */
static int visit(struct ratelimit *rl, const char *key, int64_t now_us, int take,
                 int64_t interval_us)
{
    int64_t wait = ratelimit_wait(rl, key, now_us);
    FUZZ_CHECK(wait >= 0 && wait <= interval_us);
    FUZZ_CHECK(ratelimit_wait(rl, key, now_us) == wait); /* asking remembers nothing */
    if (!take)
        return 0;
    int64_t got = ratelimit_take(rl, key, now_us);
    FUZZ_CHECK(got == wait); /* the same verdict, and the same wait */
    return got == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    int64_t interval_us = (int64_t)(data[0] % 64 + 1) * 1000;
    int64_t burst = data[1] == 255 ? 0 : data[1] % 16 + 1;
    int many = data[2] & 1;
    size_t entries = (size_t)(((data[2] >> 1) & 7) + 1) * 8;
    struct ratelimit *rl = ratelimit_new(interval_us, burst, entries, (uint64_t)size * 0x9E37u);
    FUZZ_CHECK((rl == NULL) == (burst == 0));
    FUZZ_CHECK(!rl || ratelimit_capacity(rl) ==
                          (entries + RATELIMIT_WAYS - 1) / RATELIMIT_WAYS * RATELIMIT_WAYS);

    struct shadow few[FEW_KEYS];
    memset(few, 0, sizeof few);
    char key[RATELIMIT_KEY_MAX + 9];
    int64_t now = START_US, unit = interval_us / 64 + 1;
    size_t at = 3;
    for (int op = 0; op < MAX_OPS && at + 3 <= size; op++) {
        uint8_t k = data[at];
        now += (int64_t)(data[at + 1] | data[at + 2] << 8) * unit;
        at += 3;
        int take = k >> 7;
        if (!many && k == RATE_CHANGE && rl) {
            interval_us = (int64_t)(data[at - 2] % 64 + 1) * 1000;
            burst = data[at - 1] % 17;
            ratelimit_set_rate(rl, interval_us, burst, now);
            memset(few, 0, sizeof few);
            continue;
        }
        if (!many) {
            struct shadow *s = &few[k % FEW_KEYS];
            key[0] = 'a' + (char)(k % FEW_KEYS);
            key[1] = '\0';
            if (!visit(rl, key, now, take, interval_us))
                continue;
            if (!rl || burst == 0)
                continue;
            if (!s->used)
                *s = (struct shadow){.used = 1, .first_take_us = now};
            s->taken++;
            FUZZ_CHECK(s->taken <= burst + (now - s->first_take_us) / interval_us);
            continue;
        }
        size_t n = (size_t)(k & 0x7f) % sizeof key;
        if (n > size - at)
            n = size - at;
        memcpy(key, data + at, n);
        key[n] = '\0'; /* an embedded NUL ends the key early, as in C */
        at += n;
        (void)visit(rl, key, now, take, interval_us);
        FUZZ_CHECK(ratelimit_size(rl) <= ratelimit_capacity(rl));
    }

    /* A refused few-keys take's wait is exact, then the bucket serves. */
    for (int i = 0; !many && rl && i < FEW_KEYS; i++) {
        key[0] = 'a' + (char)i;
        key[1] = '\0';
        int64_t wait = ratelimit_wait(rl, key, now);
        if (wait == 0)
            continue;
        FUZZ_CHECK(ratelimit_wait(rl, key, now + wait - 1) > 0);
        FUZZ_CHECK(ratelimit_take(rl, key, now + wait) == 0);
    }
    FUZZ_CHECK(ratelimit_size(rl) <= ratelimit_capacity(rl));
    ratelimit_free(rl);
    return 0;
}
