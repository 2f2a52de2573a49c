#include "core/buyer_token.h"

#include <inttypes.h>
#include <jansson.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"

#define MAC_BYTES 32 /* SHA-256 */
/* The header every token this service mints carries (its base64url form is
 * the first part of the token). */
#define SIGN_HEADER "{\"alg\":\"HS256\",\"typ\":\"JWT\"}"
/* Largest claims object buyer_token_sign writes: three int64s and field names. */
#define SIGN_CLAIMS_MAX 128

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

const char *buyer_token_result_name(enum buyer_token_result r)
{
    switch (r) {
    case BUYER_TOKEN_OK:
        return "ok";
    case BUYER_TOKEN_TOO_LONG:
        return "too_long";
    case BUYER_TOKEN_MALFORMED:
        return "malformed";
    case BUYER_TOKEN_BAD_SIGNATURE:
        return "bad_signature";
    case BUYER_TOKEN_BAD_HEADER:
        return "bad_header";
    case BUYER_TOKEN_BAD_CLAIMS:
        return "bad_claims";
    case BUYER_TOKEN_EXPIRED:
        return "expired";
    case BUYER_TOKEN_NOT_YET_VALID:
        return "not_yet_valid";
    case BUYER_TOKEN_UNKNOWN_KID:
        return "unknown_kid";
    case BUYER_TOKEN_LIFETIME_TOO_LONG:
        return "lifetime_too_long";
    }
    return "unknown";
}

/* Encodes n bytes as base64url without padding into out (NUL-terminated).
 * Returns the length written, or -1 when cap is too small. */
static int b64url_encode(const unsigned char *in, size_t n, char *out, size_t cap)
{
    size_t need = n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    if (need + 1 > cap)
        return -1;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64url[v >> 18 & 63];
        out[o++] = b64url[v >> 12 & 63];
        out[o++] = b64url[v >> 6 & 63];
        out[o++] = b64url[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = b64url[v >> 18 & 63];
        out[o++] = b64url[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = b64url[v >> 18 & 63];
        out[o++] = b64url[v >> 12 & 63];
        out[o++] = b64url[v >> 6 & 63];
    }
    out[o] = '\0';
    return (int)o;
}

static int b64url_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

/*
 * Decodes n base64url characters (no padding) into out.  Only the canonical
 * encoding is accepted: a length of 1 mod 4 is impossible, and the bits of
 * the last character that carry no byte must be zero, so one byte string has
 * exactly one spelling.  Returns the number of bytes, or -1.
 */
static long b64url_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
    if (n % 4 == 1 || n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0) > cap)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64url_value((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            out[o++] = (unsigned char)(acc >> 16);
            out[o++] = (unsigned char)(acc >> 8);
            out[o++] = (unsigned char)acc;
            acc = 0;
        }
    }
    if (n % 4 == 2) {
        if (acc & 0xf)
            return -1;
        out[o++] = (unsigned char)(acc >> 4);
    } else if (n % 4 == 3) {
        if (acc & 0x3)
            return -1;
        out[o++] = (unsigned char)(acc >> 10);
        out[o++] = (unsigned char)(acc >> 2);
    }
    return (long)o;
}

/* HMAC-SHA256 of n bytes under the secret into mac.  Returns 0 or -1. */
static int mac_of(const char *secret, size_t secret_len, const char *data, size_t n,
                  unsigned char mac[MAC_BYTES])
{
    unsigned int len = 0;
    if (secret_len > INT32_MAX)
        return -1;
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, (const unsigned char *)data, n, mac, &len) ||
        len != MAC_BYTES)
        return -1;
    return 0;
}

/*
 * What a thread keeps between verifications, so that a token costs its own
 * work only: the HMAC key prepared once (EVP_MAC_init with the key hashes it
 * into the inner and outer states; an init without a key starts again from
 * them, instead of HMAC() fetching SHA-256 and hashing the key per call),
 * and the last header part that passed check_header, byte for byte (the
 * verdict on a header depends on its bytes only; every buyer's token carries
 * the same one).  The secret is compared with the verifier's on every call:
 * another secret prepares another key.
 */
#define HEADER_MEMO_MAX 160
#define KEYS 2 /* the primary secret and the next one */
struct prepared_key {
    EVP_MAC_CTX *ctx;
    unsigned char *secret; /* the key ctx holds, or NULL */
    size_t secret_len;
};
struct verify_cache {
    EVP_MAC *mac;
    struct prepared_key key[KEYS]; /* one per verifier secret, by position */
    size_t header_len;             /* 0: none yet */
    char header[HEADER_MEMO_MAX];
    int header_has_kid; /* the memo's header carries a kid: header_kid */
    char header_kid[BUYER_TOKEN_KID_MAX + 1];
};

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_ok;

static void cache_free(void *p)
{
    struct verify_cache *vc = p;
    for (int i = 0; i < KEYS; i++) {
        struct prepared_key *k = &vc->key[i];
        EVP_MAC_CTX_free(k->ctx);
        if (k->secret)
            OPENSSL_cleanse(k->secret, k->secret_len);
        free(k->secret);
    }
    EVP_MAC_free(vc->mac);
    free(vc);
}

static void cache_init(void)
{
    cache_ok = pthread_key_create(&cache_key, cache_free) == 0;
}

/* This thread's cache, or NULL (then every call takes the one-shot path). */
static struct verify_cache *thread_cache(void)
{
    pthread_once(&cache_once, cache_init);
    if (!cache_ok)
        return NULL;
    struct verify_cache *vc = pthread_getspecific(cache_key);
    if (vc)
        return vc;
    vc = calloc(1, sizeof *vc);
    if (!vc)
        return NULL;
    vc->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    int ok = vc->mac != NULL;
    for (int i = 0; ok && i < KEYS; i++)
        ok = (vc->key[i].ctx = EVP_MAC_CTX_new(vc->mac)) != NULL;
    if (!ok || pthread_setspecific(cache_key, vc) != 0) {
        cache_free(vc);
        return NULL;
    }
    return vc;
}

/* mac_of under one of this thread's prepared keys.  Returns 0 or -1. */
static int mac_prepared(struct prepared_key *vc, const char *secret, size_t secret_len,
                        const char *data, size_t n, unsigned char mac[MAC_BYTES])
{
    if (!vc->secret || vc->secret_len != secret_len ||
        CRYPTO_memcmp(vc->secret, secret, secret_len) != 0) {
        if (vc->secret)
            OPENSSL_cleanse(vc->secret, vc->secret_len);
        free(vc->secret);
        vc->secret = NULL;
        char digest[] = "SHA256";
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
        unsigned char *copy = malloc(secret_len ? secret_len : 1);
        if (!copy ||
            EVP_MAC_init(vc->ctx, (const unsigned char *)secret, secret_len, params) != 1) {
            free(copy);
            return -1;
        }
        memcpy(copy, secret, secret_len);
        vc->secret = copy;
        vc->secret_len = secret_len;
    } else if (EVP_MAC_init(vc->ctx, NULL, 0, NULL) != 1) {
        return -1;
    }
    size_t len = 0;
    if (EVP_MAC_update(vc->ctx, (const unsigned char *)data, n) != 1 ||
        EVP_MAC_final(vc->ctx, mac, &len, MAC_BYTES) != 1 || len != MAC_BYTES)
        return -1;
    return 0;
}

/* Decodes one base64url part holding a JSON object (no duplicate keys, nothing
 * after it).  Returns the object (caller json_decref), or NULL. */
static json_t *decode_object(const char *part, size_t n)
{
    unsigned char buf[8192];
    if (n / 4 * 3 + 3 > sizeof buf)
        return NULL;
    long len = b64url_decode(part, n, buf, sizeof buf);
    if (len <= 0)
        return NULL;
    json_t *o = json_loadb((const char *)buf, (size_t)len, JSON_REJECT_DUPLICATES, NULL);
    if (o && !json_is_object(o)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A NumericDate claim (RFC 7519: seconds, possibly fractional).  Returns 1
 * with *out when present and a number, 0 when absent, -1 otherwise. */
static int numeric_date(json_t *claims, const char *name, double *out)
{
    json_t *v = json_object_get(claims, name);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return -1;
    *out = json_number_value(v);
    return 1;
}

/* The header's rules; its kid, when it has one, into kid (NUL-terminated,
 * *has_kid 1). */
static enum buyer_token_result check_header(json_t *h, int *has_kid,
                                            char kid[BUYER_TOKEN_KID_MAX + 1])
{
    json_t *alg = json_object_get(h, "alg");
    json_t *typ = json_object_get(h, "typ");
    json_t *k = json_object_get(h, "kid");
    if (!json_is_string(alg) || strcmp(json_string_value(alg), "HS256") != 0)
        return BUYER_TOKEN_BAD_HEADER;
    if (typ && (!json_is_string(typ) || strcmp(json_string_value(typ), "JWT") != 0))
        return BUYER_TOKEN_BAD_HEADER;
    /* Any kid string up to the bound (one we have none for is refused by
     * its value, later); an embedded NUL could alias a shorter one. */
    if (k && (!json_is_string(k) || json_string_length(k) > BUYER_TOKEN_KID_MAX ||
              strlen(json_string_value(k)) != json_string_length(k)))
        return BUYER_TOKEN_BAD_HEADER;
    *has_kid = k != NULL;
    if (k)
        memcpy(kid, json_string_value(k), json_string_length(k) + 1);
    /* Extensions the recipient must understand: we understand none. */
    if (json_object_get(h, "crit"))
        return BUYER_TOKEN_BAD_HEADER;
    return BUYER_TOKEN_OK;
}

/* The dates of a token's claims: has_* 1 present, 0 absent, -1 not a number. */
struct claim_dates {
    int has_exp, has_nbf, has_iat;
    double exp, nbf, iat;
};

/* The claims' rules, on their values: exp required, nbf and iat optional,
 * sub a user id, the lifetime within v->max_ttl_s. */
static enum buyer_token_result check_claim_values(const struct claim_dates *d, const char *sub,
                                                  size_t sub_len, int64_t now_s,
                                                  const struct buyer_token_verifier *v,
                                                  int64_t *user)
{
    int64_t uid;
    if (d->has_exp != 1 || d->has_nbf < 0 || d->has_iat < 0 || !sub ||
        validate_id_segment(sub, sub_len, &uid) != 0)
        return BUYER_TOKEN_BAD_CLAIMS;
    /* Compared as doubles: exact below 2^53 s, and a date beyond that is in
     * the far future either way. */
    double now = (double)now_s, leeway = (double)v->leeway_s, ttl = (double)v->max_ttl_s;
    if (now - leeway >= d->exp)
        return BUYER_TOKEN_EXPIRED;
    if (d->has_nbf && d->nbf > now + leeway)
        return BUYER_TOKEN_NOT_YET_VALID;
    /* Both: an iat in the future must not stretch the lifetime either. */
    if (v->max_ttl_s > 0 && ((d->has_iat && d->exp - d->iat > ttl) || d->exp - now > ttl + leeway))
        return BUYER_TOKEN_LIFETIME_TOO_LONG;
    *user = uid;
    return BUYER_TOKEN_OK;
}

static enum buyer_token_result check_claims(json_t *c, int64_t now_s,
                                            const struct buyer_token_verifier *v, int64_t *user)
{
    struct claim_dates d = {0};
    d.has_exp = numeric_date(c, "exp", &d.exp);
    d.has_nbf = numeric_date(c, "nbf", &d.nbf);
    d.has_iat = numeric_date(c, "iat", &d.iat);
    json_t *sub = json_object_get(c, "sub");
    return check_claim_values(&d, json_is_string(sub) ? json_string_value(sub) : NULL,
                              json_string_length(sub), now_s, v, user);
}

/* Takes 'word' at *p (within end); returns 1 when it is there. */
static int take_word(const char **p, const char *end, const char *word, size_t n)
{
    if ((size_t)(end - *p) < n || memcmp(*p, word, n) != 0)
        return 0;
    *p += n;
    return 1;
}

/* A JSON integer at *p: "0" or 1-18 digits without a leading zero (always
 * an int64, so json_loadb reads the same number).  Returns 1 with *out. */
static int take_small_int(const char **p, const char *end, int64_t *out)
{
    const char *s = *p;
    size_t n = 0;
    int64_t v = 0;
    for (; s + n < end && s[n] >= '0' && s[n] <= '9'; n++) {
        if (n == 18)
            return 0; /* longer: json_loadb decides */
        v = v * 10 + (s[n] - '0');
    }
    if (n == 0 || (n > 1 && s[0] == '0'))
        return 0;
    *p = s + n;
    *out = v;
    return 1;
}

/*
 * The claims exactly as buyer_token_sign writes them,
 * {"sub":"<digits>","iat":<int>,"exp":<int>}, read without building a JSON
 * object.  Returns -1 when the part has any other form (then json_loadb
 * reads it, with every rule), else the verdict: for this form, the one
 * decode_object and check_claims give.
 */
static int claims_signed_form(const char *part, size_t n, int64_t now_s,
                              const struct buyer_token_verifier *v, int64_t *user,
                              enum buyer_token_result *r)
{
    unsigned char buf[SIGN_CLAIMS_MAX];
    if (n / 4 * 3 + 3 > sizeof buf)
        return -1;
    long len = b64url_decode(part, n, buf, sizeof buf);
    if (len <= 0)
        return -1;
    const char *p = (const char *)buf, *end = p + len;
    if (!take_word(&p, end, "{\"sub\":\"", 8))
        return -1;
    const char *sub = p;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    size_t sub_len = (size_t)(p - sub);
    int64_t iat, exp;
    if (sub_len == 0 || !take_word(&p, end, "\",\"iat\":", 8) || !take_small_int(&p, end, &iat) ||
        !take_word(&p, end, ",\"exp\":", 7) || !take_small_int(&p, end, &exp) ||
        !take_word(&p, end, "}", 1) || p != end)
        return -1;
    const struct claim_dates d = {
        .has_exp = 1, .exp = (double)exp, .has_iat = 1, .iat = (double)iat};
    *r = check_claim_values(&d, sub, sub_len, now_s, v, user);
    return 0;
}

enum buyer_token_result buyer_token_verify(const struct buyer_token_verifier *v, const char *token,
                                           size_t len, int64_t now_s, int64_t *user)
{
    if (!token || len > v->max_bytes)
        return BUYER_TOKEN_TOO_LONG;
    const char *dot1 = memchr(token, '.', len);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token)) : NULL;
    if (!dot2 || memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - token)))
        return BUYER_TOKEN_MALFORMED;
    size_t header_len = (size_t)(dot1 - token);
    size_t payload_len = (size_t)(dot2 - dot1 - 1);
    size_t signed_len = (size_t)(dot2 - token);
    size_t sig_len = len - signed_len - 1;
    if (header_len == 0 || payload_len == 0 || sig_len == 0)
        return BUYER_TOKEN_MALFORMED;

    /* The MAC first, under each secret: nothing in the token is parsed
     * before it is authentic, not even the kid that names its secret. */
    const struct {
        const char *secret, *kid;
        size_t len;
    } keys[KEYS] = {{v->secret, v->kid, v->secret_len},
                    {v->next_secret, v->next_kid, v->next_secret ? v->next_secret_len : 0}};
    int usable = 0;
    for (int k = 0; k < KEYS; k++)
        usable += keys[k].len >= BUYER_TOKEN_SECRET_MIN_BYTES;
    if (!usable)
        return BUYER_TOKEN_BAD_SIGNATURE;
    unsigned char want[MAC_BYTES], got[MAC_BYTES + 3];
    if (b64url_decode(dot2 + 1, sig_len, got, sizeof got) != MAC_BYTES)
        return BUYER_TOKEN_MALFORMED;
    struct verify_cache *vc = thread_cache();
    int signer = -1;
    for (int k = 0; k < KEYS && signer < 0; k++) {
        if (keys[k].len < BUYER_TOKEN_SECRET_MIN_BYTES)
            continue;
        if ((vc ? mac_prepared(&vc->key[k], keys[k].secret, keys[k].len, token, signed_len, want)
                : mac_of(keys[k].secret, keys[k].len, token, signed_len, want)) != 0)
            return BUYER_TOKEN_BAD_SIGNATURE;
        if (CRYPTO_memcmp(want, got, MAC_BYTES) == 0)
            signer = k;
    }
    if (signer < 0)
        return BUYER_TOKEN_BAD_SIGNATURE;

    /* The header: as the last one that passed on this thread, or decoded;
     * the claims in the signer's form read directly, else decoded.  Parts
     * that are not JSON objects are malformed before any rule is applied. */
    int header_known =
        vc && vc->header_len == header_len && memcmp(vc->header, token, header_len) == 0;
    json_t *header = header_known ? NULL : decode_object(token, header_len), *claims = NULL;
    enum buyer_token_result r = BUYER_TOKEN_OK, fast_r;
    int64_t fast_user = 0;
    int fast = (header_known || header) &&
               claims_signed_form(dot1 + 1, payload_len, now_s, v, &fast_user, &fast_r) == 0;
    if ((!header_known && !header) || (!fast && !(claims = decode_object(dot1 + 1, payload_len)))) {
        json_decref(header);
        return BUYER_TOKEN_MALFORMED;
    }
    int has_kid = 0;
    char kid[BUYER_TOKEN_KID_MAX + 1];
    if (header_known) {
        has_kid = vc->header_has_kid;
        memcpy(kid, vc->header_kid, sizeof kid);
    } else if ((r = check_header(header, &has_kid, kid)) == BUYER_TOKEN_OK && vc &&
               header_len <= sizeof vc->header) {
        memcpy(vc->header, token, header_len);
        vc->header_len = header_len;
        vc->header_has_kid = has_kid;
        memcpy(vc->header_kid, kid, sizeof kid);
    }
    json_decref(header);
    /* The kid must name the secret that signed: none is the primary's. */
    const char *signer_kid = keys[signer].kid ? keys[signer].kid : "";
    if (r == BUYER_TOKEN_OK && (has_kid ? !kid[0] || strcmp(kid, signer_kid) != 0 : signer != 0))
        r = BUYER_TOKEN_UNKNOWN_KID;
    if (r == BUYER_TOKEN_OK && fast && (r = fast_r) == BUYER_TOKEN_OK)
        *user = fast_user;
    else if (r == BUYER_TOKEN_OK && !fast)
        r = check_claims(claims, now_s, v, user);
    json_decref(claims);
    return r;
}

int buyer_token_kid_valid(const char *kid)
{
    size_t n = kid ? strlen(kid) : 0;
    if (n == 0 || n > BUYER_TOKEN_KID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)kid[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int buyer_token_sign(const char *secret, size_t secret_len, int64_t user, int64_t iat_s,
                     int64_t exp_s, char *out, size_t cap)
{
    return buyer_token_sign_kid(secret, secret_len, NULL, user, iat_s, exp_s, out, cap);
}

int buyer_token_sign_kid(const char *secret, size_t secret_len, const char *kid, int64_t user,
                         int64_t iat_s, int64_t exp_s, char *out, size_t cap)
{
    char claims[SIGN_CLAIMS_MAX], header[sizeof SIGN_HEADER + BUYER_TOKEN_KID_MAX + 16];
    if (user < 1 || exp_s <= iat_s || secret_len < BUYER_TOKEN_SECRET_MIN_BYTES)
        return -1;
    if (kid && kid[0] && !buyer_token_kid_valid(kid))
        return -1;
    if (kid && kid[0]) /* the kid needs no escaping: buyer_token_kid_valid */
        snprintf(header, sizeof header, "{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"%s\"}", kid);
    else
        snprintf(header, sizeof header, "%s", SIGN_HEADER);
    int cn = snprintf(claims, sizeof claims,
                      "{\"sub\":\"%" PRId64 "\",\"iat\":%" PRId64 ",\"exp\":%" PRId64 "}", user,
                      iat_s, exp_s);
    if (cn < 0 || (size_t)cn >= sizeof claims)
        return -1;
    int h = b64url_encode((const unsigned char *)header, strlen(header), out, cap);
    if (h < 0 || (size_t)h + 1 >= cap)
        return -1;
    out[h] = '.';
    int p =
        b64url_encode((const unsigned char *)claims, (size_t)cn, out + h + 1, cap - (size_t)h - 1);
    size_t signed_len = (size_t)h + 1 + (size_t)(p < 0 ? 0 : p);
    unsigned char mac[MAC_BYTES];
    if (p < 0 || signed_len + 1 >= cap || mac_of(secret, secret_len, out, signed_len, mac) != 0)
        return -1;
    out[signed_len] = '.';
    int s = b64url_encode(mac, sizeof mac, out + signed_len + 1, cap - signed_len - 1);
    if (s < 0)
        return -1;
    return (int)(signed_len + 1 + (size_t)s);
}
