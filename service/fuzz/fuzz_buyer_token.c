/*
 * Fuzz target: the buyer token's verifier, buyer_token_verify(), under two
 * fixed secrets (a rotation: the primary as kid "k1", the next as "k2"), a
 * fixed clock and a maximum lifetime.
 *
 * Input: a mode byte, then
 *   - even ('t'): a token, verified as it is.  No one but the signer holds
 *     the secret, so the only tokens it may accept are the signer's: an
 *     accepted token is byte for byte what buyer_token_sign_kid() makes for
 *     the kid, sub, iat and exp it carries with the secret of that kid (so
 *     its base64url is canonical and its MAC right), and the user returned
 *     is that sub.
 *   - odd ('s'): a header and a claims object as raw bytes, separated by the
 *     first LF, that the target signs itself with the primary secret (with
 *     bit 3 set, 'k': the next one), base64url and MAC through OpenSSL, not
 *     the module's code, so that the checks behind the MAC are fuzzed too.  The verdict must be the
 * one restated here from RFC 7515/7519 and buyer_token.h's rules: malformed unless both parts are
 * JSON objects without duplicate keys; alg "HS256", typ absent or "JWT", kid absent or a string of
 * at most BUYER_TOKEN_KID_MAX bytes, no crit; then the kid must name the signing secret (absent:
 * the primary only); sub a user id 1..2^63-1 written plainly, exp a number, nbf and iat absent or
 * numbers; expired when exp <= now - leeway, not yet valid when nbf > now + leeway, too long-lived
 * when exp - iat or exp - now - leeway exceeds the maximum lifetime.  The same token with any one
 * byte changed is refused. In both modes: a different secret (one byte off, one byte longer, too
 * short) never accepts; an accepted user lies in 1..INT64_MAX and its exp
 * ahead of now - leeway; a refusal leaves *user alone.
 */
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buyer_token.h"
#include "fuzz/fuzz.h"

/* The token seeds in corpus/buyer_token were minted by buyer_token_sign()
 * with this secret, their iat and exp chosen around this clock: changing
 * either means minting them again. */
#define FUZZ_SECRET "fuzz-buyer-token-secret-0123456789abcdef"
#define FUZZ_SECRET_NEXT "fuzz-buyer-token-next-secret-0123456789"
#define FUZZ_KID "k1"
#define FUZZ_KID_NEXT "k2"
#define FUZZ_MAX_TTL 86400
#define FUZZ_NOW 1700000000LL
#define FUZZ_LEEWAY 30
#define FUZZ_MAX_BYTES 8192 /* the config's largest max_buyer_token_bytes */
#define MAC_BYTES 32
#define UNTOUCHED (-7)

static const struct buyer_token_verifier verifier = {.secret = FUZZ_SECRET,
                                                     .secret_len = sizeof FUZZ_SECRET - 1,
                                                     .leeway_s = FUZZ_LEEWAY,
                                                     .max_bytes = FUZZ_MAX_BYTES,
                                                     .kid = FUZZ_KID,
                                                     .next_secret = FUZZ_SECRET_NEXT,
                                                     .next_secret_len = sizeof FUZZ_SECRET_NEXT - 1,
                                                     .next_kid = FUZZ_KID_NEXT,
                                                     .max_ttl_s = FUZZ_MAX_TTL};

/* Verifies token under v at FUZZ_NOW; checks that a refusal leaves the user
 * alone and an acceptance is a user id. */
static enum buyer_token_result verify_under(const struct buyer_token_verifier *v, const char *token,
                                            size_t len, int64_t *user)
{
    *user = UNTOUCHED;
    enum buyer_token_result r = buyer_token_verify(v, token, len, FUZZ_NOW, user);
    if (r == BUYER_TOKEN_OK)
        FUZZ_CHECK(*user >= 1);
    else
        FUZZ_CHECK(*user == UNTOUCHED);
    FUZZ_CHECK(strcmp(buyer_token_result_name(r), "unknown") != 0);
    return r;
}

/* The verdict under secrets that are not the signer's: never OK. */
static enum buyer_token_result verify_other_secrets(const char *token, size_t len)
{
    char off_by_one[sizeof FUZZ_SECRET], longer[sizeof FUZZ_SECRET + 1];
    struct buyer_token_verifier v = verifier;
    enum buyer_token_result first;
    int64_t user;

    memcpy(off_by_one, FUZZ_SECRET, sizeof FUZZ_SECRET);
    off_by_one[sizeof FUZZ_SECRET - 2] ^= 1;
    memcpy(longer, FUZZ_SECRET "x", sizeof longer);

    v.next_secret = NULL; /* neither is the signer's */
    v.secret = off_by_one;
    first = verify_under(&v, token, len, &user);
    FUZZ_CHECK(first != BUYER_TOKEN_OK);
    v.secret = longer;
    v.secret_len = sizeof longer - 1;
    FUZZ_CHECK(verify_under(&v, token, len, &user) == first);
    v.secret = FUZZ_SECRET;
    v.secret_len = BUYER_TOKEN_SECRET_MIN_BYTES - 1;
    FUZZ_CHECK(verify_under(&v, token, len, &user) != BUYER_TOKEN_OK);
    return first;
}

/* Base64url of n bytes, without padding, through OpenSSL's base64; out has
 * room for 4 * (n + 2) / 3 + 1 bytes.  Returns the length written. */
static size_t b64url(const unsigned char *in, size_t n, char *out)
{
    int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    size_t o = 0;

    for (int i = 0; i < len; i++)
        if (out[i] != '=')
            out[o++] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    out[o] = '\0';
    return o;
}

/* Decodes n base64url characters (a part of a token the verifier accepted)
 * through OpenSSL's base64 into a new NUL-terminated buffer (caller frees). */
static char *b64url_decoded(const char *in, size_t n, size_t *out_len)
{
    size_t padded = (n + 3) / 4 * 4;
    unsigned char *std = malloc(padded + 1), *out = malloc(padded / 4 * 3 + 1);

    if (std == NULL || out == NULL)
        abort();
    for (size_t i = 0; i < padded; i++)
        std[i] = i >= n ? '=' : in[i] == '-' ? '+' : in[i] == '_' ? '/' : (unsigned char)in[i];
    int len = EVP_DecodeBlock(out, std, (int)padded);
    FUZZ_CHECK(len >= 0);
    *out_len = (size_t)len - (padded - n); /* EVP_DecodeBlock counts the padding */
    out[*out_len] = '\0';
    free(std);
    return (char *)out;
}

/* A user id as buyer_token.h says: 1..19 digits, no sign, no leading zero,
 * at most INT64_MAX.  Returns 1 with *id, else 0. */
static int plain_user_id(const char *s, size_t n, int64_t *id)
{
    static const char max[] = "9223372036854775807";
    int64_t v = 0;

    if (n == 0 || n > sizeof max - 1 || s[0] == '0')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    if (n == sizeof max - 1 && memcmp(s, max, n) > 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    *id = v;
    return 1;
}

/* The verdict for a correctly signed token of header h and claims c (raw
 * bytes), restated from the rules; *user gets the sub on OK. */
static enum buyer_token_result expected_verdict(const char *h, size_t hn, const char *c, size_t cn,
                                                const char *signer_kid, int primary, int64_t *user)
{
    json_t *header = json_loadb(h, hn, JSON_REJECT_DUPLICATES, NULL);
    json_t *claims = json_loadb(c, cn, JSON_REJECT_DUPLICATES, NULL);
    enum buyer_token_result r = BUYER_TOKEN_OK;

    if (!json_is_object(header) || !json_is_object(claims)) {
        r = BUYER_TOKEN_MALFORMED;
    } else {
        json_t *alg = json_object_get(header, "alg"), *typ = json_object_get(header, "typ");
        json_t *sub = json_object_get(claims, "sub"), *exp = json_object_get(claims, "exp");
        json_t *nbf = json_object_get(claims, "nbf"), *iat = json_object_get(claims, "iat");
        json_t *kid = json_object_get(header, "kid");
        double now = (double)FUZZ_NOW, leeway = (double)FUZZ_LEEWAY, ttl = (double)FUZZ_MAX_TTL;

        if (!json_is_string(alg) || strcmp(json_string_value(alg), "HS256") != 0 ||
            (typ != NULL && (!json_is_string(typ) || strcmp(json_string_value(typ), "JWT") != 0)) ||
            (kid != NULL &&
             (!json_is_string(kid) || json_string_length(kid) > BUYER_TOKEN_KID_MAX)) ||
            json_object_get(header, "crit") != NULL)
            r = BUYER_TOKEN_BAD_HEADER;
        else if (kid == NULL ? !primary : strcmp(json_string_value(kid), signer_kid) != 0)
            r = BUYER_TOKEN_UNKNOWN_KID;
        else if (!json_is_string(sub) ||
                 !plain_user_id(json_string_value(sub), json_string_length(sub), user) ||
                 !json_is_number(exp) || (nbf != NULL && !json_is_number(nbf)) ||
                 (iat != NULL && !json_is_number(iat)))
            r = BUYER_TOKEN_BAD_CLAIMS;
        else if (json_number_value(exp) <= now - leeway)
            r = BUYER_TOKEN_EXPIRED;
        else if (nbf != NULL && json_number_value(nbf) > now + leeway)
            r = BUYER_TOKEN_NOT_YET_VALID;
        else if ((iat != NULL && json_number_value(exp) - json_number_value(iat) > ttl) ||
                 json_number_value(exp) - now > ttl + leeway)
            r = BUYER_TOKEN_LIFETIME_TOO_LONG;
    }
    json_decref(header);
    json_decref(claims);
    return r;
}

/* Signs header h and claims c with the primary secret (next: the next one),
 * checks the verdict, and that neither another secret nor a changed byte is
 * accepted. */
static void sign_and_verify(const char *h, size_t hn, const char *c, size_t cn, int next,
                            uint32_t salt)
{
    const char *secret = next ? FUZZ_SECRET_NEXT : FUZZ_SECRET;
    size_t cap = (hn + 2) / 3 * 4 + (cn + 2) / 3 * 4 + (MAC_BYTES + 2) / 3 * 4 + 3;
    char *token = malloc(cap);
    unsigned char mac[MAC_BYTES];
    unsigned int mac_len = 0;
    int64_t user, want_user = 0;

    if (token == NULL)
        abort();
    size_t n = b64url((const unsigned char *)h, hn, token);
    token[n++] = '.';
    n += b64url((const unsigned char *)c, cn, token + n);
    FUZZ_CHECK(HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)token, n, mac,
                    &mac_len) != NULL &&
               mac_len == MAC_BYTES);
    token[n++] = '.';
    n += b64url(mac, MAC_BYTES, token + n);

    enum buyer_token_result got = verify_under(&verifier, token, n, &user), want;
    if (n > FUZZ_MAX_BYTES)
        want = BUYER_TOKEN_TOO_LONG;
    else if (hn == 0 || cn == 0)
        want = BUYER_TOKEN_MALFORMED;
    else
        want = expected_verdict(h, hn, c, cn, next ? FUZZ_KID_NEXT : FUZZ_KID, !next, &want_user);
    if (got != want)
        fprintf(stderr, "verdict %s, expected %s\n", buyer_token_result_name(got),
                buyer_token_result_name(want));
    FUZZ_CHECK(got == want);
    if (got == BUYER_TOKEN_OK)
        FUZZ_CHECK(user == want_user);

    /* Under another secret: refused for its MAC unless refused unread. */
    enum buyer_token_result unread = n > FUZZ_MAX_BYTES   ? BUYER_TOKEN_TOO_LONG
                                     : hn == 0 || cn == 0 ? BUYER_TOKEN_MALFORMED
                                                          : BUYER_TOKEN_BAD_SIGNATURE;
    FUZZ_CHECK(verify_other_secrets(token, n) == unread);

    if (got == BUYER_TOKEN_OK) {
        size_t at = salt % n;
        token[at] ^= (char)(1u << (salt >> 8) % 8);
        FUZZ_CHECK(verify_under(&verifier, token, n, &user) != BUYER_TOKEN_OK);
    }
    free(token);
}

/* Checks that an accepted token is what buyer_token_sign_kid() makes of its
 * kid and claims with the secret of that kid, byte for byte. */
static void check_signer_made(const char *token, size_t len, int64_t user)
{
    const char *dot1 = memchr(token, '.', len);
    FUZZ_CHECK(dot1 != NULL);
    const char *dot2 = memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token));
    FUZZ_CHECK(dot2 != NULL);
    size_t claims_len, header_len;
    char *header_text = b64url_decoded(token, (size_t)(dot1 - token), &header_len);
    json_t *header = json_loadb(header_text, header_len, JSON_REJECT_DUPLICATES, NULL);
    json_t *kid = json_object_get(header, "kid");
    FUZZ_CHECK(kid == NULL || json_is_string(kid));
    const char *kid_text = kid ? json_string_value(kid) : NULL;
    const char *secret =
        kid_text && strcmp(kid_text, FUZZ_KID_NEXT) == 0 ? FUZZ_SECRET_NEXT : FUZZ_SECRET;
    char *claims_text = b64url_decoded(dot1 + 1, (size_t)(dot2 - dot1 - 1), &claims_len);
    json_t *claims = json_loadb(claims_text, claims_len, JSON_REJECT_DUPLICATES, NULL);
    json_t *sub = json_object_get(claims, "sub"), *iat = json_object_get(claims, "iat"),
           *exp = json_object_get(claims, "exp");
    char again[FUZZ_MAX_BYTES + 1];
    int64_t sub_id;

    FUZZ_CHECK(json_is_string(sub) && json_is_integer(iat) && json_is_integer(exp));
    FUZZ_CHECK(plain_user_id(json_string_value(sub), json_string_length(sub), &sub_id) &&
               sub_id == user);
    FUZZ_CHECK((double)json_integer_value(exp) > (double)(FUZZ_NOW - FUZZ_LEEWAY));
    FUZZ_CHECK((double)json_integer_value(exp) - (double)json_integer_value(iat) <= FUZZ_MAX_TTL);
    int n = buyer_token_sign_kid(secret, strlen(secret), kid_text, user, json_integer_value(iat),
                                 json_integer_value(exp), again, sizeof again);
    FUZZ_CHECK(n > 0 && (size_t)n == len && memcmp(again, token, len) == 0);
    json_decref(claims);
    json_decref(header);
    free(claims_text);
    free(header_text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;

    if (data[0] & 1) {
        const char *lf = memchr(rest, '\n', n);
        size_t hn = lf ? (size_t)(lf - rest) : n;
        sign_and_verify(rest, hn, lf ? lf + 1 : rest + n, lf ? n - hn - 1 : 0, data[0] & 8,
                        (uint32_t)size * 2654435761u);
        return 0;
    }
    int64_t user;
    enum buyer_token_result r = verify_under(&verifier, rest, n, &user);
    verify_other_secrets(rest, n);
    if (r == BUYER_TOKEN_OK)
        check_signer_made(rest, n, user);
    return 0;
}
