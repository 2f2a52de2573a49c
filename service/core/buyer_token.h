/*
 * buyer_token: who a buyer is, from a signed token instead of the request body.
 *
 * A buyer token is a compact JWT (RFC 7519) signed with HMAC-SHA256 (JWS
 * "HS256", RFC 7515) under the service's buyer_token_secret:
 *
 *   base64url({"alg":"HS256","typ":"JWT"}) . base64url({"sub":"42","exp":...}) . base64url(MAC)
 *
 * The verifier is strict, because the token is the only thing that says who
 * may buy and who may read an order:
 *   - at most max_bytes long; exactly three parts; base64url without padding,
 *     in its canonical form only (unused trailing bits are zero);
 *   - the MAC is compared in constant time before anything in the token is
 *     parsed, so no claim is read from an unauthenticated token;
 *   - two secrets may be configured at once (a rotation), each with a key id
 *     ("kid").  The MAC is tried under each (at most two HMACs, no header
 *     read first); only then is the header read, and its "kid" must name
 *     the secret that verified it: no kid is the primary secret's (tokens
 *     from before key ids), a kid no configured secret has, or another
 *     secret's, is refused;
 *   - the header says "alg": "HS256" (no "none", HS384/512, RS*, ...), "typ",
 *     when present, "JWT", "kid", when present, a string of at most
 *     BUYER_TOKEN_KID_MAX bytes, and no "crit" (we understand no extension);
 *   - "exp" (a number) is required and must lie ahead of now - leeway;
 *     "nbf", when present, must not lie ahead of now + leeway; "iat", when
 *     present, a number;
 *   - with max_ttl_s, a token may not live longer: exp - iat (iat present)
 *     and exp - now (beyond leeway) are at most max_ttl_s, so a leaked token
 *     of a careless issuer does not stay good for years;
 *   - "sub" is required: the user id as a decimal string, 1..2^63-1 without
 *     sign or leading zero (validate_id_segment, the rule of every id here).
 *
 * No I/O, no clock (the caller passes now); safe from any thread.  The HMAC
 * is OpenSSL's.  Each thread keeps an HMAC key prepared per secret (compared
 * with the verifier's on every call) and the last header part that passed
 * with its kid, and
 * reads claims in the form buyer_token_sign writes without building a JSON
 * object (any other form goes to jansson): nothing cached is a verdict on a
 * token, only work that gives the same answer for the same bytes.
 */
#ifndef SECKILL_BUYER_TOKEN_H
#define SECKILL_BUYER_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define BUYER_TOKEN_MUST_CHECK __attribute__((warn_unused_result))

/* A shorter secret is refused: HS256 keys should be as long as its output
 * (RFC 7518 section 3.2). */
#define BUYER_TOKEN_SECRET_MIN_BYTES 32

/* The longest key id, and its letters: [A-Za-z0-9._-] (buyer_token_kid_valid). */
#define BUYER_TOKEN_KID_MAX 64

enum buyer_token_result {
    BUYER_TOKEN_OK,
    BUYER_TOKEN_TOO_LONG,          /* longer than max_bytes */
    BUYER_TOKEN_MALFORMED,         /* not three canonical base64url parts of JSON objects */
    BUYER_TOKEN_BAD_SIGNATURE,     /* the MAC does not match */
    BUYER_TOKEN_BAD_HEADER,        /* alg other than HS256, typ other than JWT, crit */
    BUYER_TOKEN_BAD_CLAIMS,        /* exp or sub missing or malformed, nbf not a number */
    BUYER_TOKEN_EXPIRED,           /* exp <= now - leeway */
    BUYER_TOKEN_NOT_YET_VALID,     /* nbf > now + leeway */
    BUYER_TOKEN_UNKNOWN_KID,       /* its kid does not name the secret that signed it */
    BUYER_TOKEN_LIFETIME_TOO_LONG, /* exp - iat or exp - now beyond max_ttl_s */
};

/* What a verification needs besides the token; owns nothing. */
struct buyer_token_verifier {
    const char *secret; /* secret_len bytes, at least BUYER_TOKEN_SECRET_MIN_BYTES */
    size_t secret_len;
    int64_t leeway_s;        /* clock skew tolerated on exp and nbf, >= 0 */
    size_t max_bytes;        /* longest token accepted */
    const char *kid;         /* the secret's key id; NULL or "": none */
    const char *next_secret; /* a second secret (a rotation), or NULL */
    size_t next_secret_len;
    const char *next_kid; /* its key id: tokens under it must carry it */
    int64_t max_ttl_s;    /* longest lifetime accepted; 0: no limit */
};

/* Short lower-case name of a result, for logs ("expired", "bad_signature"). */
const char *buyer_token_result_name(enum buyer_token_result r);

/*
 * Verifies 'token' (len bytes, need not be NUL-terminated) at Unix time
 * now_s.  Returns BUYER_TOKEN_OK and the buyer's user id in *user, or the
 * first reason for refusing it (*user untouched).  A secret shorter than
 * BUYER_TOKEN_SECRET_MIN_BYTES verifies nothing (a verifier with no other
 * refuses every token: BUYER_TOKEN_BAD_SIGNATURE).
 */
enum buyer_token_result buyer_token_verify(const struct buyer_token_verifier *v, const char *token,
                                           size_t len, int64_t now_s,
                                           int64_t *user) BUYER_TOKEN_MUST_CHECK;

/*
 * Signs a token for 'user' (>= 1) issued at iat_s and valid until exp_s
 * (> iat_s), with the header {"alg":"HS256","typ":"JWT"}.  Writes it
 * NUL-terminated to out.  Returns its length, or -1 when an argument is out
 * of range, the secret is shorter than BUYER_TOKEN_SECRET_MIN_BYTES, cap is
 * too small or the MAC failed.
 */
int buyer_token_sign(const char *secret, size_t secret_len, int64_t user, int64_t iat_s,
                     int64_t exp_s, char *out, size_t cap) BUYER_TOKEN_MUST_CHECK;

/* buyer_token_sign() with the key id 'kid' in the header,
 * {"alg":"HS256","typ":"JWT","kid":"<kid>"} (NULL or "": no kid, as
 * buyer_token_sign).  Returns -1 as it does, and for a kid that is not
 * buyer_token_kid_valid. */
int buyer_token_sign_kid(const char *secret, size_t secret_len, const char *kid, int64_t user,
                         int64_t iat_s, int64_t exp_s, char *out,
                         size_t cap) BUYER_TOKEN_MUST_CHECK;

/* Returns 1 when kid is 1..BUYER_TOKEN_KID_MAX bytes of [A-Za-z0-9._-] (what
 * needs no escape in JSON, nor in a config file), else 0. */
int buyer_token_kid_valid(const char *kid);

#endif
