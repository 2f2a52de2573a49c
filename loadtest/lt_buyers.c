#include "lt_buyers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/buyer_token.h"

#define AUTH_MAX 320 /* "Bearer " and a token of three int64 claims */

struct lt_buyers {
    char *secret;
    int64_t user_base, cached; /* users user_base .. user_base + cached - 1 are kept */
    int64_t iat_s, exp_s;      /* one lifetime for all: the run's */
    char **auth;               /* [cached], minted on first use */
    char scratch[AUTH_MAX];    /* a user beyond the cache */
};

struct lt_buyers *lt_buyers_new(const char *secret, int64_t user_base, int64_t users, int64_t ttl_s)
{
    if (!secret || strlen(secret) < BUYER_TOKEN_SECRET_MIN_BYTES || users < 1 || ttl_s < 1)
        return NULL;
    struct lt_buyers *b = xcalloc(1, sizeof *b);
    b->secret = xstrdup(secret);
    b->user_base = user_base;
    b->cached = users < LT_BUYERS_CACHE_MAX ? users : LT_BUYERS_CACHE_MAX;
    b->auth = xcalloc((size_t)b->cached, sizeof *b->auth);
    b->iat_s = (int64_t)time(NULL);
    b->exp_s = b->iat_s + ttl_s;
    return b;
}

/* Writes "Bearer <token>" of user into out (AUTH_MAX bytes); returns 0 or -1. */
static int mint(const struct lt_buyers *b, int64_t user, char *out)
{
    static const char scheme[] = "Bearer ";
    memcpy(out, scheme, sizeof scheme - 1);
    return buyer_token_sign(b->secret, strlen(b->secret), user, b->iat_s, b->exp_s,
                            out + sizeof scheme - 1, AUTH_MAX - (sizeof scheme - 1)) > 0
               ? 0
               : -1;
}

const char *lt_buyers_auth(struct lt_buyers *b, int64_t user)
{
    int64_t i = user - b->user_base;
    if (i < 0 || i >= b->cached)
        return mint(b, user, b->scratch) == 0 ? b->scratch : NULL;
    if (!b->auth[i]) {
        char buf[AUTH_MAX];
        if (mint(b, user, buf) != 0)
            return NULL;
        b->auth[i] = xstrdup(buf);
    }
    return b->auth[i];
}

void lt_buyers_free(struct lt_buyers *b)
{
    if (!b)
        return;
    for (int64_t i = 0; i < b->cached; i++)
        free(b->auth[i]);
    free(b->auth);
    free(b->secret);
    free(b);
}
