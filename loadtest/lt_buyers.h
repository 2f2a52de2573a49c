/*
 * lt_buyers: the buyers' identities.  The service takes the buyer from a
 * signed token (Authorization: Bearer <JWT>, service/core/buyer_token.h), so
 * the load generator mints one per buyer with the service's secret, once:
 * signing costs an HMAC, and the request path should cost what a real
 * client's does.
 */
#ifndef LT_BUYERS_H
#define LT_BUYERS_H

#include <stdint.h>

/* Buyers whose tokens are kept; beyond, a token is signed per request. */
#define LT_BUYERS_CACHE_MAX 262144

struct lt_buyers;

/* Tokens for users user_base .. user_base + users - 1, valid ttl_s seconds
 * from now, signed with 'secret' (copied).  Returns NULL when the secret is
 * shorter than the service accepts (BUYER_TOKEN_SECRET_MIN_BYTES). */
struct lt_buyers *lt_buyers_new(const char *secret, int64_t user_base, int64_t users,
                                int64_t ttl_s);

/* The Authorization header value "Bearer <token>" of 'user' (>= 1).  The
 * string is owned by b and valid until the next call.  Returns NULL when
 * signing failed. */
const char *lt_buyers_auth(struct lt_buyers *b, int64_t user);

/* Frees b (NULL is a no-op). */
void lt_buyers_free(struct lt_buyers *b);

#endif
