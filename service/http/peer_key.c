/*
 * peer_key: see peer_key.h.
 */
#include "http/peer_key.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "core/clock.h"

void peer_key_of(const char *addr, char *out, size_t cap)
{
    struct in6_addr a6;
    if (strchr(addr, ':') && inet_pton(AF_INET6, addr, &a6) == 1 && !IN6_IS_ADDR_V4MAPPED(&a6)) {
        memset(a6.s6_addr + 8, 0, 8); /* the interface half: the subscriber's to choose */
        if (inet_ntop(AF_INET6, &a6, out, (socklen_t)cap))
            return;
    }
    snprintf(out, cap, "%s", addr);
}

uint64_t peer_key_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) == (ssize_t)sizeof s)
        return s;
    /* Early boot, no entropy yet: unpredictable enough to differ per process. */
    return ((uint64_t)clock_mono_us() ^ (uint64_t)(uintptr_t)&s) * UINT64_C(0x9E3779B97F4A7C15);
}

/* The finalizer of MurmurHash3 (fmix64): every bit of the seed and of the
 * key ends up moving every bit of the result. */
static uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

uint64_t peer_key_hash(uint64_t seed, const char *key)
{
    /* FNV-1a from a seeded start, then mixed with the seed once more, so that
     * two keys that meet under one seed part under another. */
    uint64_t h = mix64(seed ^ UINT64_C(0xcbf29ce484222325));
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * UINT64_C(0x100000001b3);
    return mix64(h ^ seed);
}
