/* buyer_token: pure unit tests of the buyer token's signer and verifier. */
#include "core/buyer_token.h"

#include <check.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET "test-buyer-secret-0123456789abcdef" /* 34 bytes */
#define NOW 1700000000LL                            /* 2023-11-14 */
#define LEEWAY 30
#define MAX_BYTES 1024
#define FAR 4102444800LL /* 2100-01-01 */

/*
 * Computed independently of the code under test, with the shell:
 *   b64u() { base64 -w0 | tr '+/' '-_' | tr -d '='; }
 *   H=$(printf '%s' '{"alg":"HS256","typ":"JWT"}' | b64u)
 *   P=$(printf '%s' '{"sub":"42","exp":4102444800}' | b64u)
 *   S=$(printf '%s' "$H.$P" | openssl dgst -sha256 -hmac "$SECRET" -binary | b64u)
 *   echo "$H.$P.$S"
 */
static const char known_token[] =
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiIsImV4cCI6NDEwMjQ0NDgwMH0."
    "GVDKSz5aWxvSNyeYitfFJMrSFCNQNGe5_HRbPHWqeDo";

static const struct buyer_token_verifier verifier = {
    .secret = SECRET, .secret_len = sizeof SECRET - 1, .leeway_s = LEEWAY, .max_bytes = MAX_BYTES};

static int64_t got_user;

static enum buyer_token_result verify(const char *token)
{
    got_user = -7;
    return buyer_token_verify(&verifier, token, strlen(token), NOW, &got_user);
}

/* Base64url of n bytes through OpenSSL's base64 (not the module's encoder). */
static void b64u(const void *in, size_t n, char *out)
{
    int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    int o = 0;
    for (int i = 0; i < len; i++) {
        char c = out[i];
        if (c == '=')
            continue;
        out[o++] = c == '+' ? '-' : c == '/' ? '_' : c;
    }
    out[o] = '\0';
}

/* A token with any header and claims, MAC'd under 'secret' (NULL: SECRET). */
static char *craft(const char *header, const char *claims, const char *secret)
{
    static char tok[4096];
    char h[1024], p[2048];
    b64u(header, strlen(header), h);
    b64u(claims, strlen(claims), p);
    int n = snprintf(tok, sizeof tok, "%s.%s", h, p);
    const char *key = secret ? secret : SECRET;
    unsigned char mac[32];
    unsigned int maclen = 0;
    ck_assert(HMAC(EVP_sha256(), key, (int)strlen(key), (unsigned char *)tok, (size_t)n, mac,
                   &maclen) != NULL);
    char s[64];
    b64u(mac, maclen, s);
    snprintf(tok + n, sizeof tok - (size_t)n, ".%s", s);
    return tok;
}

#define HS256 "{\"alg\":\"HS256\",\"typ\":\"JWT\"}"

static void claims_refused(const char *claims, enum buyer_token_result want)
{
    enum buyer_token_result r = verify(craft(HS256, claims, NULL));
    ck_assert_msg(r == want, "claims %s: %s, expected %s", claims, buyer_token_result_name(r),
                  buyer_token_result_name(want));
    ck_assert_int_eq(got_user, -7); /* untouched */
}

START_TEST(test_known_hs256_vector_is_accepted)
{
    ck_assert_int_eq(verify(known_token), BUYER_TOKEN_OK);
    ck_assert_int_eq(got_user, 42);
}
END_TEST

START_TEST(test_signed_token_round_trips)
{
    char tok[512];
    int n = buyer_token_sign(SECRET, strlen(SECRET), 9223372036854775807LL, NOW, NOW + 60, tok,
                             sizeof tok);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq((size_t)n, strlen(tok));
    ck_assert_int_eq(verify(tok), BUYER_TOKEN_OK);
    ck_assert(got_user == 9223372036854775807LL);
    /* and the independently made MAC agrees with the signer's */
    char *again = craft(HS256, "{\"sub\":\"7\",\"iat\":1700000000,\"exp\":1700000060}", NULL);
    n = buyer_token_sign(SECRET, strlen(SECRET), 7, NOW, NOW + 60, tok, sizeof tok);
    ck_assert_int_gt(n, 0);
    ck_assert_str_eq(tok, again);
}
END_TEST

START_TEST(test_sign_refuses_bad_arguments)
{
    char tok[512];
    ck_assert_int_eq(buyer_token_sign("short", 5, 1, NOW, NOW + 60, tok, sizeof tok), -1);
    ck_assert_int_eq(buyer_token_sign(SECRET, strlen(SECRET), 0, NOW, NOW + 60, tok, sizeof tok),
                     -1);
    ck_assert_int_eq(buyer_token_sign(SECRET, strlen(SECRET), 1, NOW, NOW, tok, sizeof tok), -1);
    ck_assert_int_eq(buyer_token_sign(SECRET, strlen(SECRET), 1, NOW, NOW + 60, tok, 40), -1);
}
END_TEST

START_TEST(test_expired_token_is_refused)
{
    char claims[128];
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld}", NOW - LEEWAY);
    claims_refused(claims, BUYER_TOKEN_EXPIRED);
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld}", NOW - 3600);
    claims_refused(claims, BUYER_TOKEN_EXPIRED);
    /* within the leeway it still counts */
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld}", NOW - LEEWAY + 1);
    ck_assert_int_eq(verify(craft(HS256, claims, NULL)), BUYER_TOKEN_OK);
    /* a fractional NumericDate is a number too */
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld.5}", NOW);
    ck_assert_int_eq(verify(craft(HS256, claims, NULL)), BUYER_TOKEN_OK);
}
END_TEST

START_TEST(test_not_before_is_honoured)
{
    char claims[128];
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld,\"nbf\":%lld}", FAR,
             NOW + LEEWAY + 1);
    claims_refused(claims, BUYER_TOKEN_NOT_YET_VALID);
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld,\"nbf\":%lld}", FAR,
             NOW + LEEWAY);
    ck_assert_int_eq(verify(craft(HS256, claims, NULL)), BUYER_TOKEN_OK);
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld,\"nbf\":\"0\"}", FAR);
    claims_refused(claims, BUYER_TOKEN_BAD_CLAIMS);
}
END_TEST

START_TEST(test_wrong_signature_is_refused)
{
    char claims[128];
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld}", FAR);
    ck_assert_int_eq(verify(craft(HS256, claims, "another-secret-of-at-least-32-bytes!")),
                     BUYER_TOKEN_BAD_SIGNATURE);
    /* one character of the signature changed */
    char tok[256];
    snprintf(tok, sizeof tok, "%s", known_token);
    tok[strlen(tok) - 2] = tok[strlen(tok) - 2] == 'A' ? 'B' : 'A';
    ck_assert_int_eq(verify(tok), BUYER_TOKEN_BAD_SIGNATURE);
    /* the claims changed under the old signature: another buyer */
    char forged[256];
    char *dot = strchr(known_token, '.');
    char *dot2 = strchr(dot + 1, '.');
    char p[128];
    b64u("{\"sub\":\"43\",\"exp\":4102444800}", 29, p);
    snprintf(forged, sizeof forged, "%.*s.%s%s", (int)(dot - known_token), known_token, p, dot2);
    ck_assert_int_eq(verify(forged), BUYER_TOKEN_BAD_SIGNATURE);
    ck_assert_int_eq(got_user, -7);
    /* a verifier with a short secret accepts nothing */
    struct buyer_token_verifier weak = verifier;
    weak.secret_len = BUYER_TOKEN_SECRET_MIN_BYTES - 1;
    int64_t u = -7;
    ck_assert_int_eq(buyer_token_verify(&weak, known_token, strlen(known_token), NOW, &u),
                     BUYER_TOKEN_BAD_SIGNATURE);
}
END_TEST

START_TEST(test_only_hs256_is_accepted)
{
    char claims[128];
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld}", FAR);
    static const char *const headers[] = {
        "{\"alg\":\"none\"}",
        "{\"alg\":\"none\",\"typ\":\"JWT\"}",
        "{\"alg\":\"HS512\",\"typ\":\"JWT\"}",
        "{\"alg\":\"HS384\",\"typ\":\"JWT\"}",
        "{\"alg\":\"RS256\",\"typ\":\"JWT\"}",
        "{\"alg\":\"ES256\"}",
        "{\"alg\":\"hs256\"}",
        "{\"alg\":\"HS256 \"}",
        "{\"typ\":\"JWT\"}",
        "{\"alg\":null}",
        "{\"alg\":[\"HS256\"]}",
        "{\"alg\":\"HS256\",\"typ\":\"JWS\"}",
        "{\"alg\":\"HS256\",\"typ\":1}",
        "{\"alg\":\"HS256\",\"crit\":[\"exp\"]}",
    };
    /* Each header is MAC'd correctly: only the header check can refuse it. */
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        enum buyer_token_result r = verify(craft(headers[i], claims, NULL));
        ck_assert_msg(r == BUYER_TOKEN_BAD_HEADER, "header %s: %s", headers[i],
                      buyer_token_result_name(r));
    }
    /* typ is optional */
    ck_assert_int_eq(verify(craft("{\"alg\":\"HS256\"}", claims, NULL)), BUYER_TOKEN_OK);
    /* "alg":"none" with the empty signature it calls for */
    char tok[512], h[64], p[128];
    b64u("{\"alg\":\"none\"}", strlen("{\"alg\":\"none\"}"), h);
    b64u(claims, strlen(claims), p);
    snprintf(tok, sizeof tok, "%s.%s.", h, p);
    ck_assert_int_eq(verify(tok), BUYER_TOKEN_MALFORMED);
    ck_assert_int_eq(got_user, -7);
}
END_TEST

START_TEST(test_bad_base64_is_refused)
{
    char tok[512];
    const char *dot2 = strrchr(known_token, '.');
    size_t signed_len = (size_t)(dot2 - known_token);
    static const char *const bad_sigs[] = {
        "GVDKSz5aWxvSNyeYitfFJMrSFCNQNGe5_HRbPHWqeDo=", /* padding */
        "GVDKSz5aWxvSNyeYitfFJMrSFCNQNGe5/HRbPHWqeDo",  /* base64, not base64url */
        "GVDKSz5aWxvSNyeYitfFJMrSFCNQNGe5_HRbPHWqeDp",  /* non-canonical: spare bits set */
        "GVDKSz5aWxvSNyeYitfFJMrSFCNQNGe5_HRbPHWqeD",   /* one character short */
        "GVDKSz5aWxvSNyeYitfFJMrSFCNQNGe5_HRbPHWqeDoA", /* one too many */
        "GVDKSz5aWxvSNyeYitfFJMrSFCNQNGe5_HRbPHW qeDo", /* space */
        "",
    };
    for (size_t i = 0; i < sizeof bad_sigs / sizeof bad_sigs[0]; i++) {
        snprintf(tok, sizeof tok, "%.*s.%s", (int)signed_len, known_token, bad_sigs[i]);
        enum buyer_token_result r = verify(tok);
        ck_assert_msg(r == BUYER_TOKEN_MALFORMED || r == BUYER_TOKEN_BAD_SIGNATURE,
                      "signature %s: %s", bad_sigs[i], buyer_token_result_name(r));
        ck_assert_msg(r != BUYER_TOKEN_OK, "accepted %s", bad_sigs[i]);
    }
    /* A header or payload part that is not canonical base64url, MAC'd
     * correctly over its text: refused although the MAC matches. */
    static const char *const bad_parts[][2] = {
        {"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", "eyJzdWIiOiI0MiIsImV4cCI6NDEwMjQ0NDgwMH0="},
        {"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", "eyJzdWIiOiI0MiIsImV4cCI6NDEwMjQ0NDgwMH1"},
        {"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", "eyJzdWIiOiI0MiIsImV4cCI6NDEwMjQ0NDgwMH0A"},
        {"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", "e+JzdWIiOiI0MiIsImV4cCI6NDEwMjQ0NDgwMH0"},
    };
    for (size_t i = 0; i < sizeof bad_parts / sizeof bad_parts[0]; i++) {
        char signing[256];
        int n = snprintf(signing, sizeof signing, "%s.%s", bad_parts[i][0], bad_parts[i][1]);
        unsigned char mac[32];
        unsigned int maclen;
        char s[64];
        ck_assert(HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (unsigned char *)signing,
                       (size_t)n, mac, &maclen) != NULL);
        b64u(mac, maclen, s);
        snprintf(tok, sizeof tok, "%s.%s", signing, s);
        ck_assert_msg(verify(tok) == BUYER_TOKEN_MALFORMED, "payload %s accepted", bad_parts[i][1]);
    }
}
END_TEST

START_TEST(test_wrong_shape_is_refused)
{
    ck_assert_int_eq(verify(""), BUYER_TOKEN_MALFORMED);
    ck_assert_int_eq(verify("abc"), BUYER_TOKEN_MALFORMED);
    ck_assert_int_eq(verify("a.b"), BUYER_TOKEN_MALFORMED);
    ck_assert_int_eq(verify(".."), BUYER_TOKEN_MALFORMED);
    char tok[256];
    snprintf(tok, sizeof tok, "%s.x", known_token); /* four parts */
    ck_assert_int_eq(verify(tok), BUYER_TOKEN_MALFORMED);
    /* authentic, but not JSON objects */
    char claims[128];
    snprintf(claims, sizeof claims, "[\"sub\",\"42\",%lld]", FAR);
    ck_assert_int_eq(verify(craft(HS256, claims, NULL)), BUYER_TOKEN_MALFORMED);
    ck_assert_int_eq(verify(craft(HS256, "{\"sub\":\"42\",\"exp\":", NULL)), BUYER_TOKEN_MALFORMED);
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld}x", FAR);
    ck_assert_int_eq(verify(craft(HS256, claims, NULL)), BUYER_TOKEN_MALFORMED);
    /* a repeated claim is ambiguous: which sub? */
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"sub\":\"43\",\"exp\":%lld}", FAR);
    ck_assert_int_eq(verify(craft(HS256, claims, NULL)), BUYER_TOKEN_MALFORMED);
    ck_assert_int_eq(verify(craft("\"HS256\"", "{}", NULL)), BUYER_TOKEN_MALFORMED);
}
END_TEST

START_TEST(test_sub_must_be_a_user_id)
{
    static const char *const subs[] = {
        NULL,                          /* missing */
        "42",                          /* a number, not a string */
        "\"\"",                        /* empty */
        "\"abc\"",                     /* not decimal */
        "\"0\"",                       /* zero is no user */
        "\"-1\"",                      /* negative */
        "\"+1\"",                      /* signed */
        "\"042\"",                     /* leading zero: two spellings of one user */
        "\" 42\"",                     /* space */
        "\"4.2\"",                     /* not an integer */
        "\"9223372036854775808\"",     /* 2^63: beyond the user id range */
        "\"99999999999999999999999\"", /* far beyond */
        "null",
    };
    char claims[160];
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        if (subs[i])
            snprintf(claims, sizeof claims, "{\"sub\":%s,\"exp\":%lld}", subs[i], FAR);
        else
            snprintf(claims, sizeof claims, "{\"exp\":%lld}", FAR);
        claims_refused(claims, BUYER_TOKEN_BAD_CLAIMS);
    }
    snprintf(claims, sizeof claims, "{\"sub\":\"9223372036854775807\",\"exp\":%lld}", FAR);
    ck_assert_int_eq(verify(craft(HS256, claims, NULL)), BUYER_TOKEN_OK);
    ck_assert(got_user == 9223372036854775807LL);
}
END_TEST

START_TEST(test_exp_is_required_and_a_number)
{
    claims_refused("{\"sub\":\"42\"}", BUYER_TOKEN_BAD_CLAIMS);
    claims_refused("{\"sub\":\"42\",\"exp\":\"4102444800\"}", BUYER_TOKEN_BAD_CLAIMS);
    claims_refused("{\"sub\":\"42\",\"exp\":null}", BUYER_TOKEN_BAD_CLAIMS);
    claims_refused("{\"sub\":\"42\",\"exp\":true}", BUYER_TOKEN_BAD_CLAIMS);
}
END_TEST

START_TEST(test_token_longer_than_the_limit_is_refused_unread)
{
    /* an authentic token, padded by an extra claim to just over the limit */
    char claims[2048], pad[1024];
    memset(pad, 'x', 700);
    pad[700] = '\0';
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld,\"pad\":\"%s\"}", FAR, pad);
    char *tok = craft(HS256, claims, NULL);
    ck_assert_int_gt(strlen(tok), MAX_BYTES);
    ck_assert_int_eq(verify(tok), BUYER_TOKEN_TOO_LONG);
    /* the same with a shorter pad fits, and is accepted */
    pad[600] = '\0';
    snprintf(claims, sizeof claims, "{\"sub\":\"42\",\"exp\":%lld,\"pad\":\"%s\"}", FAR, pad);
    tok = craft(HS256, claims, NULL);
    ck_assert_int_le(strlen(tok), MAX_BYTES);
    ck_assert_int_eq(verify(tok), BUYER_TOKEN_OK);
}
END_TEST

/* ---- lifetime ------------------------------------------------------------ */

#define TTL 3600

/* verify() under a verifier with max_ttl_s TTL. */
static enum buyer_token_result verify_ttl(const char *token)
{
    struct buyer_token_verifier v = verifier;
    v.max_ttl_s = TTL;
    got_user = -7;
    return buyer_token_verify(&v, token, strlen(token), NOW, &got_user);
}

/* A crafted token of sub 5 with the claims' dates 'dates' (after sub). */
static char *dated(const char *dates)
{
    char claims[256];
    snprintf(claims, sizeof claims, "{\"sub\":\"5\",%s}", dates);
    return craft(HS256, claims, NULL);
}

START_TEST(test_a_token_living_longer_than_max_ttl_is_refused)
{
    char tok[512], d[128];
    ck_assert_int_gt(buyer_token_sign(SECRET, strlen(SECRET), 5, NOW, NOW + TTL, tok, sizeof tok),
                     0);
    ck_assert_int_eq(verify_ttl(tok), BUYER_TOKEN_OK);
    ck_assert_int_eq(got_user, 5);
    ck_assert_int_gt(
        buyer_token_sign(SECRET, strlen(SECRET), 5, NOW, NOW + TTL + 1, tok, sizeof tok), 0);
    ck_assert_int_eq(verify_ttl(tok), BUYER_TOKEN_LIFETIME_TOO_LONG);
    ck_assert_int_eq(got_user, -7);
    /* issued long ago, valid for long: exp - iat counts, not what is left */
    ck_assert_int_gt(
        buyer_token_sign(SECRET, strlen(SECRET), 5, NOW - 2 * TTL, NOW + 60, tok, sizeof tok), 0);
    ck_assert_int_eq(verify_ttl(tok), BUYER_TOKEN_LIFETIME_TOO_LONG);
    /* without iat: exp - now, with the leeway */
    snprintf(d, sizeof d, "\"exp\":%lld", NOW + TTL + LEEWAY);
    ck_assert_int_eq(verify_ttl(dated(d)), BUYER_TOKEN_OK);
    snprintf(d, sizeof d, "\"exp\":%lld", NOW + TTL + LEEWAY + 1);
    ck_assert_int_eq(verify_ttl(dated(d)), BUYER_TOKEN_LIFETIME_TOO_LONG);
    /* an iat in the future does not stretch it */
    snprintf(d, sizeof d, "\"iat\":%lld,\"exp\":%lld", NOW + 2 * TTL, NOW + 2 * TTL + 60);
    ck_assert_int_eq(verify_ttl(dated(d)), BUYER_TOKEN_LIFETIME_TOO_LONG);
    /* in jansson's path too (fractional dates are not the signer's form) */
    snprintf(d, sizeof d, "\"iat\":%lld.5,\"exp\":%lld", NOW - 1, NOW + TTL);
    ck_assert_int_eq(verify_ttl(dated(d)), BUYER_TOKEN_LIFETIME_TOO_LONG);
    /* iat, when present, is a number */
    snprintf(d, sizeof d, "\"iat\":\"%lld\",\"exp\":%lld", NOW, NOW + 60);
    ck_assert_int_eq(verify_ttl(dated(d)), BUYER_TOKEN_BAD_CLAIMS);
    /* max_ttl_s 0 is no limit */
    snprintf(d, sizeof d, "\"exp\":%lld", FAR);
    ck_assert_int_eq(verify(dated(d)), BUYER_TOKEN_OK);
}
END_TEST

/* ---- key ids ---------------------------------------------------------------- */

#define SECRET2 "test-buyer-secret-the-next-one-0123456789"

/* verify() under the rotation: SECRET as "k1", SECRET2 as "k2". */
static enum buyer_token_result verify_rotating(const char *token)
{
    struct buyer_token_verifier v = verifier;
    v.kid = "k1";
    v.next_secret = SECRET2;
    v.next_secret_len = strlen(SECRET2);
    v.next_kid = "k2";
    got_user = -7;
    return buyer_token_verify(&v, token, strlen(token), NOW, &got_user);
}

/* A token of user 3 signed with 'secret' under 'kid' (NULL: none). */
static const char *signed_kid(const char *secret, const char *kid)
{
    static char tok[512];
    ck_assert_int_gt(
        buyer_token_sign_kid(secret, strlen(secret), kid, 3, NOW, NOW + 60, tok, sizeof tok), 0);
    return tok;
}

START_TEST(test_the_kid_picks_the_secret_and_must_name_the_signer)
{
    const struct {
        const char *secret, *kid;
        enum buyer_token_result want;
    } cases[] = {
        {SECRET, "k1", BUYER_TOKEN_OK},
        {SECRET, NULL, BUYER_TOKEN_OK}, /* no kid: the primary, as before key ids */
        {SECRET2, "k2", BUYER_TOKEN_OK},
        {SECRET, "k1", BUYER_TOKEN_OK},           /* back again: each thread keeps both keys */
        {SECRET2, NULL, BUYER_TOKEN_UNKNOWN_KID}, /* no kid is never the next key */
        {SECRET2, "k1", BUYER_TOKEN_UNKNOWN_KID},
        {SECRET, "k2", BUYER_TOKEN_UNKNOWN_KID},
        {SECRET, "k3", BUYER_TOKEN_UNKNOWN_KID},
        {"a-secret-nobody-here-holds-0123456789", "k2", BUYER_TOKEN_BAD_SIGNATURE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum buyer_token_result r = verify_rotating(signed_kid(cases[i].secret, cases[i].kid));
        ck_assert_msg(r == cases[i].want, "case %zu: %s, expected %s", i,
                      buyer_token_result_name(r), buyer_token_result_name(cases[i].want));
        ck_assert_int_eq(got_user, r == BUYER_TOKEN_OK ? 3 : -7);
    }
    /* with one secret only, a token of the next one is a bad signature */
    ck_assert_int_eq(verify(signed_kid(SECRET2, "k2")), BUYER_TOKEN_BAD_SIGNATURE);
    /* a kid with no secret configured for it: a primary without kid has none */
    ck_assert_int_eq(verify(signed_kid(SECRET, "k1")), BUYER_TOKEN_UNKNOWN_KID);
    /* the header's kid, read after the MAC, is bounded and a string */
    char claims[96], kid[BUYER_TOKEN_KID_MAX + 2], header[160];
    snprintf(claims, sizeof claims, "{\"sub\":\"3\",\"exp\":%lld}", NOW + 60);
    const char *bad_headers[] = {
        "{\"alg\":\"HS256\",\"kid\":1}",
        "{\"alg\":\"HS256\",\"kid\":null}",
        "{\"alg\":\"HS256\",\"kid\":[\"k1\"]}",
    };
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++)
        ck_assert_msg(verify_rotating(craft(bad_headers[i], claims, NULL)) ==
                          BUYER_TOKEN_BAD_HEADER,
                      "header %s", bad_headers[i]);
    /* a NUL could alias a shorter kid: not JSON we read at all */
    ck_assert_int_eq(
        verify_rotating(craft("{\"alg\":\"HS256\",\"kid\":\"k1\\u0000x\"}", claims, NULL)),
        BUYER_TOKEN_MALFORMED);
    memset(kid, 'k', sizeof kid - 1);
    kid[sizeof kid - 1] = '\0';
    snprintf(header, sizeof header, "{\"alg\":\"HS256\",\"kid\":\"%s\"}", kid);
    ck_assert_int_eq(verify_rotating(craft(header, claims, NULL)), BUYER_TOKEN_BAD_HEADER);
    ck_assert_int_eq(verify_rotating(craft("{\"alg\":\"HS256\",\"kid\":\"\"}", claims, NULL)),
                     BUYER_TOKEN_UNKNOWN_KID);
    ck_assert_int_eq(verify_rotating(craft("{\"alg\":\"HS256\",\"kid\":\"k1\"}", claims, NULL)),
                     BUYER_TOKEN_OK);
}
END_TEST

START_TEST(test_the_signer_writes_the_kid_and_refuses_a_bad_one)
{
    char tok[512];
    char *want = craft("{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"k2\"}",
                       "{\"sub\":\"3\",\"iat\":1700000000,\"exp\":1700000060}", SECRET2);
    ck_assert_str_eq(signed_kid(SECRET2, "k2"), want);
    ck_assert_int_gt(
        buyer_token_sign_kid(SECRET, strlen(SECRET), "", 3, NOW, NOW + 60, tok, sizeof tok), 0);
    ck_assert_str_eq(tok, signed_kid(SECRET, NULL)); /* "" is no kid */
    const char *bad[] = {
        "k\"1", "k 1",      "k/1",
        "k\\1", "\xc3\xa9", "12345678901234567890123456789012345678901234567890123456789012345"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(buyer_token_kid_valid(bad[i]), 0);
        ck_assert_int_eq(
            buyer_token_sign_kid(SECRET, strlen(SECRET), bad[i], 3, NOW, NOW + 60, tok, sizeof tok),
            -1);
    }
    ck_assert_int_eq(buyer_token_kid_valid("2026-11.key_A"), 1);
    ck_assert_int_eq(buyer_token_kid_valid(""), 0);
}
END_TEST

static Suite *buyer_token_suite(void)
{
    Suite *s = suite_create("buyer_token");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_known_hs256_vector_is_accepted);
    tcase_add_test(tc, test_signed_token_round_trips);
    tcase_add_test(tc, test_sign_refuses_bad_arguments);
    tcase_add_test(tc, test_expired_token_is_refused);
    tcase_add_test(tc, test_not_before_is_honoured);
    tcase_add_test(tc, test_wrong_signature_is_refused);
    tcase_add_test(tc, test_only_hs256_is_accepted);
    tcase_add_test(tc, test_bad_base64_is_refused);
    tcase_add_test(tc, test_wrong_shape_is_refused);
    tcase_add_test(tc, test_sub_must_be_a_user_id);
    tcase_add_test(tc, test_exp_is_required_and_a_number);
    tcase_add_test(tc, test_token_longer_than_the_limit_is_refused_unread);
    tcase_add_test(tc, test_a_token_living_longer_than_max_ttl_is_refused);
    tcase_add_test(tc, test_the_kid_picks_the_secret_and_must_name_the_signer);
    tcase_add_test(tc, test_the_signer_writes_the_kid_and_refuses_a_bad_one);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(buyer_token_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
