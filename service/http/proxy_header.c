#include "http/proxy_header.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

/* Copies the space-delimited word at *p (within end) into out (cap), moving
 * *p past it and one following space (when 'space').  Returns 0 or -1. */
static int word(const char **p, const char *end, char *out, size_t cap, int space)
{
    const char *w = *p;
    while (*p < end && **p != ' ')
        (*p)++;
    size_t n = (size_t)(*p - w);
    if (n == 0 || n >= cap)
        return -1;
    memcpy(out, w, n);
    out[n] = '\0';
    if (space) {
        if (*p == end)
            return -1;
        (*p)++;
    }
    return 0;
}

/* A port: 1..5 digits, no sign or leading zero, 0..65535. */
static int port_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 5 || (n > 1 && s[0] == '0') || strspn(s, "0123456789") != n)
        return 0;
    return atoi(s) <= 65535;
}

enum proxy_header_result proxy_header_parse(const char *buf, size_t len, char *src, size_t cap,
                                            size_t *used)
{
    static const char sig[] = "PROXY ";
    size_t check = len < sizeof sig - 1 ? len : sizeof sig - 1;
    if (memcmp(buf, sig, check) != 0)
        return PROXY_HEADER_BAD;
    const char *crlf = NULL;
    for (size_t i = 0; i + 1 < len && i + 2 <= PROXY_HEADER_MAX; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n') {
            crlf = buf + i;
            break;
        }
    if (!crlf)
        return len >= PROXY_HEADER_MAX ? PROXY_HEADER_BAD : PROXY_HEADER_MORE;
    if (cap < PROXY_ADDR_MAX)
        return PROXY_HEADER_BAD;
    const char *p = buf + sizeof sig - 1, *end = crlf;
    size_t pl = 0;
    while (p + pl < end && p[pl] != ' ')
        pl++;
    /* UNKNOWN (a proxy's own connection, e.g. its health check): whatever
     * follows is to be ignored, the protocol says */
    if (pl == 7 && memcmp(p, "UNKNOWN", 7) == 0) {
        src[0] = '\0';
        *used = (size_t)(crlf - buf) + 2;
        return PROXY_HEADER_DONE;
    }
    char proto[8], a[PROXY_ADDR_MAX], b[PROXY_ADDR_MAX], sp[8], dp[8];
    if (word(&p, end, proto, sizeof proto, 1) != 0)
        return PROXY_HEADER_BAD;
    int family = strcmp(proto, "TCP4") == 0 ? AF_INET : strcmp(proto, "TCP6") == 0 ? AF_INET6 : 0;
    if (!family || word(&p, end, a, sizeof a, 1) != 0 || word(&p, end, b, sizeof b, 1) != 0 ||
        word(&p, end, sp, sizeof sp, 1) != 0 || word(&p, end, dp, sizeof dp, 0) != 0 || p != end ||
        !port_ok(sp) || !port_ok(dp))
        return PROXY_HEADER_BAD;
    unsigned char bin[16], bin2[16];
    if (inet_pton(family, a, bin) != 1 || inet_pton(family, b, bin2) != 1 ||
        !inet_ntop(family, bin, src, (socklen_t)cap))
        return PROXY_HEADER_BAD;
    *used = (size_t)(crlf - buf) + 2;
    return PROXY_HEADER_DONE;
}

int proxy_header_trusted(const char *list, const char *addr)
{
    if (!list || !addr || !addr[0])
        return 0;
    size_t n = strlen(addr);
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ')
            p++;
        size_t w = strcspn(p, ", ");
        if (w == n && memcmp(p, addr, n) == 0)
            return 1;
        p += w;
    }
    return 0;
}
