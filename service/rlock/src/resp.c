/*
 * resp: commands written in the Redis protocol, and error replies told
 * apart by their code (see rlock/resp.h).  At the bottom of the library:
 * it uses nothing of it.
 */
#include "rlock/resp.h"

#include <string.h>

size_t rlock_resp_u64(char *out, uint64_t v)
{
    char tmp[RLOCK_RESP_DIGITS_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

char *rlock_resp_head(char *p, char kind, size_t n)
{
    *p++ = kind;
    p += rlock_resp_u64(p, (uint64_t)n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

size_t rlock_resp_bulk_bytes(size_t len)
{
    char digits[RLOCK_RESP_DIGITS_MAX];
    return 1 + rlock_resp_u64(digits, (uint64_t)len) + 2 + len + 2;
}

char *rlock_resp_bulk(char *p, const void *s, size_t len)
{
    p = rlock_resp_head(p, '$', len);
    memcpy(p, s, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

size_t rlock_resp_argv_bytes(int argc, const char *const *argv, const size_t *lens)
{
    char digits[RLOCK_RESP_DIGITS_MAX];
    size_t total = 1 + rlock_resp_u64(digits, (uint64_t)argc) + 2;
    for (int i = 0; i < argc; i++)
        total += rlock_resp_bulk_bytes(lens ? lens[i] : strlen(argv[i]));
    return total;
}

char *rlock_resp_argv(char *p, int argc, const char *const *argv, const size_t *lens)
{
    p = rlock_resp_head(p, '*', (size_t)argc);
    for (int i = 0; i < argc; i++)
        p = rlock_resp_bulk(p, argv[i], lens ? lens[i] : strlen(argv[i]));
    return p;
}

enum rlock_reply_kind rlock_reply_kind(const redisReply *r)
{
    if (!r)
        return RLOCK_REPLY_NONE;
    if (r->type != REDIS_REPLY_ERROR)
        return RLOCK_REPLY_VALUE;
    return rlock_error_kind(r->str);
}

enum rlock_reply_kind rlock_error_kind(const char *msg)
{
    static const struct {
        const char *code;
        enum rlock_reply_kind kind;
    } codes[] = {{"NOSCRIPT", RLOCK_REPLY_NOSCRIPT},
                 {"OOM", RLOCK_REPLY_OOM},
                 {"READONLY", RLOCK_REPLY_READONLY},
                 {"MOVED", RLOCK_REPLY_MOVED},
                 {"ASK", RLOCK_REPLY_ASK},
                 {"TRYAGAIN", RLOCK_REPLY_TRYAGAIN},
                 {"CLUSTERDOWN", RLOCK_REPLY_CLUSTERDOWN}};
    if (!msg)
        return RLOCK_REPLY_ERROR;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        size_t n = strlen(codes[i].code);
        if (strncmp(msg, codes[i].code, n) == 0 && (msg[n] == ' ' || msg[n] == '\0'))
            return codes[i].kind;
    }
    /* Redis 7 words it "ERR Function not found": a generic code. */
    if (strstr(msg, "Function not found"))
        return RLOCK_REPLY_NO_FUNCTION;
    return RLOCK_REPLY_ERROR;
}
