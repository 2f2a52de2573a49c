/*
 * Fuzz target: the PROXY protocol v1 header a trusted load balancer sends
 * first (proxy_header_parse()).
 *
 * Properties: a header is whole (DONE) only up to its first CRLF, within
 * PROXY_HEADER_MAX bytes, and then names no client or a valid one in its
 * canonical text; the verdict does not depend on what follows the header or
 * on how much of it has arrived (a prefix of a whole header asks for more,
 * the same bytes with more after them give the same header); MORE only
 * before any CRLF and below the bound.
 */
#include <arpa/inet.h>
#include <string.h>

#include "fuzz.h"
#include "http/proxy_header.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    char src[PROXY_ADDR_MAX];
    size_t used = 0;
    enum proxy_header_result r = proxy_header_parse(buf, size, src, sizeof src, &used);
    const char *crlf = NULL;
    for (size_t i = 0; i + 1 < size && !crlf; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n')
            crlf = buf + i;
    if (r == PROXY_HEADER_MORE) {
        FUZZ_CHECK(size < PROXY_HEADER_MAX);
        FUZZ_CHECK(!crlf);
        return 0;
    }
    if (r == PROXY_HEADER_BAD)
        return 0;
    FUZZ_CHECK(r == PROXY_HEADER_DONE);
    FUZZ_CHECK(crlf && used == (size_t)(crlf - buf) + 2);
    FUZZ_CHECK(used <= PROXY_HEADER_MAX && used <= size);
    FUZZ_CHECK(strncmp(buf, "PROXY ", 6) == 0);
    if (src[0]) {
        unsigned char bin[16];
        char again[PROXY_ADDR_MAX];
        int family = strchr(src, ':') ? AF_INET6 : AF_INET;
        FUZZ_CHECK(inet_pton(family, src, bin) == 1);
        FUZZ_CHECK(inet_ntop(family, bin, again, sizeof again) && strcmp(again, src) == 0);
    }
    /* the header alone gives the same; each proper prefix of it asks for more */
    char src2[PROXY_ADDR_MAX];
    size_t used2 = 0;
    FUZZ_CHECK(proxy_header_parse(buf, used, src2, sizeof src2, &used2) == PROXY_HEADER_DONE);
    FUZZ_CHECK(used2 == used && strcmp(src2, src) == 0);
    for (size_t n = 1; n < used - 1; n++) {
        enum proxy_header_result p = proxy_header_parse(buf, n, src2, sizeof src2, &used2);
        FUZZ_CHECK(p == PROXY_HEADER_MORE || p == PROXY_HEADER_BAD);
    }
    return 0;
}
