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
#define HEADER_MEMO_MAX 128
struct verify_cache {
    EVP_MAC *mac;
    EVP_MAC_CTX *ctx;
    unsigned char *secret; /* the key ctx holds, or NULL */
    size_t secret_len;
    size_t header_len; /* 0: none yet */
    char header[HEADER_MEMO_MAX];
};

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_ok;

static void cache_free(void *p)
{
    struct verify_cache *vc = p;
    EVP_MAC_CTX_free(vc->ctx);
    EVP_MAC_free(vc->mac);
    if (vc->secret)
        OPENSSL_cleanse(vc->secret, vc->secret_len);
    free(vc->secret);
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
    vc->ctx = vc->mac ? EVP_MAC_CTX_new(vc->mac) : NULL;
    if (!vc->ctx || pthread_setspecific(cache_key, vc) != 0) {
        cache_free(vc);
        return NULL;
    }
    return vc;
}

/* mac_of under this thread's prepared key.  Returns 0 or -1. */
static int mac_prepared(struct verify_cache *vc, const char *secret, size_t secret_len,
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

static enum buyer_token_result check_header(json_t *h)
{
    json_t *alg = json_object_get(h, "alg");
    json_t *typ = json_object_get(h, "typ");
    if (!json_is_string(alg) || strcmp(json_string_value(alg), "HS256") != 0)
        return BUYER_TOKEN_BAD_HEADER;
    if (typ && (!json_is_string(typ) || strcmp(json_string_value(typ), "JWT") != 0))
        return BUYER_TOKEN_BAD_HEADER;
    /* Extensions the recipient must understand: we understand none. */
    if (json_object_get(h, "crit"))
        return BUYER_TOKEN_BAD_HEADER;
    return BUYER_TOKEN_OK;
}

/* The claims' rules, on their values: exp required, nbf optional, sub a user id. */
static enum buyer_token_result check_claim_values(int has_exp, double exp, int has_nbf, double nbf,
                                                  const char *sub, size_t sub_len, int64_t now_s,
                                                  int64_t leeway_s, int64_t *user)
{
    int64_t uid;
    if (has_exp != 1 || has_nbf < 0 || !sub || validate_id_segment(sub, sub_len, &uid) != 0)
        return BUYER_TOKEN_BAD_CLAIMS;
    /* Compared as doubles: exact below 2^53 s, and a date beyond that is in
     * the far future either way. */
    if ((double)now_s - (double)leeway_s >= exp)
        return BUYER_TOKEN_EXPIRED;
    if (has_nbf && nbf > (double)now_s + (double)leeway_s)
        return BUYER_TOKEN_NOT_YET_VALID;
    *user = uid;
    return BUYER_TOKEN_OK;
}

static enum buyer_token_result check_claims(json_t *c, int64_t now_s, int64_t leeway_s,
                                            int64_t *user)
{
    double exp = 0, nbf = 0;
    int has_exp = numeric_date(c, "exp", &exp);
    int has_nbf = numeric_date(c, "nbf", &nbf);
    json_t *sub = json_object_get(c, "sub");
    return check_claim_values(has_exp, exp, has_nbf, nbf,
                              json_is_string(sub) ? json_string_value(sub) : NULL,
                              json_string_length(sub), now_s, leeway_s, user);
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
static int claims_signed_form(const char *part, size_t n, int64_t now_s, int64_t leeway_s,
                              int64_t *user, enum buyer_token_result *r)
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
    *r = check_claim_values(1, (double)exp, 0, 0, sub, sub_len, now_s, leeway_s, user);
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

    /* The MAC first: nothing in the token is parsed before it is authentic. */
    unsigned char want[MAC_BYTES], got[MAC_BYTES + 3];
    struct verify_cache *vc = thread_cache();
    if (v->secret_len < BUYER_TOKEN_SECRET_MIN_BYTES ||
        (vc ? mac_prepared(vc, v->secret, v->secret_len, token, signed_len, want)
            : mac_of(v->secret, v->secret_len, token, signed_len, want)) != 0)
        return BUYER_TOKEN_BAD_SIGNATURE;
    if (b64url_decode(dot2 + 1, sig_len, got, sizeof got) != MAC_BYTES)
        return BUYER_TOKEN_MALFORMED;
    if (CRYPTO_memcmp(want, got, MAC_BYTES) != 0)
        return BUYER_TOKEN_BAD_SIGNATURE;

    /* The header: as the last one that passed on this thread, or decoded. */
    int header_known =
        vc && vc->header_len == header_len && memcmp(vc->header, token, header_len) == 0;
    enum buyer_token_result r;
    if (header_known &&
        claims_signed_form(dot1 + 1, payload_len, now_s, v->leeway_s, user, &r) == 0)
        return r;
    json_t *header = header_known ? NULL : decode_object(token, header_len);
    json_t *claims = header_known || header ? decode_object(dot1 + 1, payload_len) : NULL;
    if ((!header_known && !header) || !claims)
        r = BUYER_TOKEN_MALFORMED;
    else if (header_known || (r = check_header(header)) == BUYER_TOKEN_OK) {
        if (!header_known && vc && header_len <= sizeof vc->header) {
            memcpy(vc->header, token, header_len);
            vc->header_len = header_len;
        }
        r = check_claims(claims, now_s, v->leeway_s, user);
    }
    json_decref(header);
    json_decref(claims);
    return r;
}

int buyer_token_sign(const char *secret, size_t secret_len, int64_t user, int64_t iat_s,
                     int64_t exp_s, char *out, size_t cap)
{
    char claims[SIGN_CLAIMS_MAX];
    if (user < 1 || exp_s <= iat_s || secret_len < BUYER_TOKEN_SECRET_MIN_BYTES)
        return -1;
    int cn = snprintf(claims, sizeof claims,
                      "{\"sub\":\"%" PRId64 "\",\"iat\":%" PRId64 ",\"exp\":%" PRId64 "}", user,
                      iat_s, exp_s);
    if (cn < 0 || (size_t)cn >= sizeof claims)
        return -1;
    int h = b64url_encode((const unsigned char *)SIGN_HEADER, strlen(SIGN_HEADER), out, cap);
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
