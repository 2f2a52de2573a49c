/*
 * validate: request parsing and validation.  See validate.h for the contract.
 */
#include "core/validate.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static void set_detail(char *detail, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_detail(char *detail, size_t cap, const char *fmt, ...)
{
    va_list ap;

    if (detail == NULL || cap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(detail, cap, fmt, ap);
    va_end(ap);
}

/*
 * Client-chosen text (an unknown key, jansson's "near '...'") echoed in a
 * detail message: shortened, and anything but printable ASCII replaced, so
 * that details are always printable ASCII -- safe for logs, and valid UTF-8
 * for json_string() when the handler puts them in a response.
 */
static void safe_echo(char *dst, size_t cap, const char *src)
{
    size_t i = 0;

    for (; src[i] != '\0' && i + 1 < cap; i++) {
        unsigned char c = (unsigned char)src[i];

        dst[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    dst[i] = '\0';
    if (src[i] != '\0' && cap >= 4)
        memcpy(dst + cap - 4, "...", 4);
}

/*
 * Valid UTF-8 (shortest form, no surrogates, <= U+10FFFF) without control
 * characters: C0, DEL and C1.  Names and reasons end up in logs, CSV exports
 * and admin pages, where such bytes only do harm.
 */
static int text_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        unsigned char c = s[i];
        unsigned char lo = 0x80, hi = 0xbf;
        size_t more;

        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f)
                return 0;
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            more = 1;
            if (c == 0xc2 && i + 1 < n && s[i + 1] <= 0x9f)
                return 0; /* U+0080..U+009F, the C1 controls */
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2;
            if (c == 0xe0)
                lo = 0xa0; /* overlong */
            else if (c == 0xed)
                hi = 0x9f; /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3;
            if (c == 0xf0)
                lo = 0x90; /* overlong */
            else if (c == 0xf4)
                hi = 0x8f; /* above U+10FFFF */
        } else {
            return 0;
        }
        if (n - i - 1 < more)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= more; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf)
                return 0;
        i += more + 1;
    }
    return 1;
}

/* Parses body as exactly one JSON object; the caller owns the result. */
static json_t *load_object(const char *body, size_t len, char *detail, size_t cap)
{
    json_error_t jerr;
    json_t *root;

    if (body == NULL || len == 0) {
        set_detail(detail, cap, "body is empty; expected a JSON object");
        return NULL;
    }
    /*
     * Duplicate keys are refused: two parsers that pick different copies of
     * "qty" are a classic smuggling trick.  Without JSON_DISABLE_EOF_CHECK
     * trailing bytes are an error; without JSON_ALLOW_NUL so is \u0000; and
     * without JSON_DECODE_INT_AS_REAL integers stay integers.
     */
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        char shown[sizeof(jerr.text)];

        /* jansson quotes the offending bytes, which may be anything */
        safe_echo(shown, sizeof(shown), jerr.text);
        set_detail(detail, cap, "invalid JSON: %s", shown);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        set_detail(detail, cap, "body must be a JSON object");
        return NULL;
    }
    return root;
}

/* Refuses any key not in 'allowed' (NULL-terminated). */
static int known_keys_only(json_t *obj, const char *const *allowed, char *detail, size_t cap)
{
    for (void *it = json_object_iter(obj); it != NULL; it = json_object_iter_next(obj, it)) {
        const char *key = json_object_iter_key(it);
        int known = 0;

        for (const char *const *a = allowed; *a != NULL && !known; a++)
            known = strcmp(key, *a) == 0;
        if (!known) {
            char shown[48];

            safe_echo(shown, sizeof(shown), key);
            set_detail(detail, cap, "unknown field \"%s\"", shown);
            return -1;
        }
    }
    return 0;
}

/*
 * Reads obj[key] as an integer in [min, max].  *present says whether the key
 * was there (NULL when the field is required).  Only JSON integers count:
 * jansson keeps 1.0 and 1e3 as reals, and strings, booleans and null are
 * other types.
 */
static int get_int(json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                   int *present, char *detail, size_t cap)
{
    json_t *v = json_object_get(obj, key);
    json_int_t i;

    if (v == NULL) {
        if (present != NULL) {
            *present = 0;
            return 0;
        }
        set_detail(detail, cap, "%s is required", key);
        return -1;
    }
    if (present != NULL)
        *present = 1;
    if (!json_is_integer(v))
        goto bad;
    i = json_integer_value(v);
    if (i < min || i > max)
        goto bad;
    *out = (int64_t)i;
    return 0;
bad:
    if (max == INT64_MAX)
        set_detail(detail, cap, "%s must be an integer >= %lld", key, (long long)min);
    else
        set_detail(detail, cap, "%s must be an integer between %lld and %lld", key, (long long)min,
                   (long long)max);
    return -1;
}

/* Reads obj[key], required, as text of 1..max bytes (see text_ok). */
static int get_text(json_t *obj, const char *key, size_t max, const char **out, size_t *out_len,
                    char *detail, size_t cap)
{
    json_t *v = json_object_get(obj, key);
    const char *s;
    size_t n;

    if (v == NULL) {
        set_detail(detail, cap, "%s is required", key);
        return -1;
    }
    if (!json_is_string(v)) {
        set_detail(detail, cap, "%s must be a string", key);
        return -1;
    }
    s = json_string_value(v);
    n = json_string_length(v);
    if (n < 1 || n > max) {
        set_detail(detail, cap, "%s must be 1 to %zu bytes long", key, max);
        return -1;
    }
    if (!text_ok((const unsigned char *)s, n)) {
        set_detail(detail, cap, "%s must be valid UTF-8 without control characters", key);
        return -1;
    }
    *out = s;
    *out_len = n;
    return 0;
}

/* Reads obj[key], optional, as an RFC 3339 string or null. */
static int get_time(json_t *obj, const char *key, int *has, int64_t *ms, char *detail, size_t cap)
{
    json_t *v = json_object_get(obj, key);

    *has = 0;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v) || validate_rfc3339_ms(json_string_value(v), ms) != 0) {
        set_detail(detail, cap,
                   "%s must be null or an RFC 3339 timestamp such as 2030-01-01T10:00:00Z", key);
        return -1;
    }
    *has = 1;
    return 0;
}

static const char *skip_json_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* A member '"<name>" : <integer>' at *p, the integer plain (no sign, no
 * leading zero) and of at most 18 digits.  Returns 0 = qty, 1 = user_id, or
 * -1 for anything else. */
static int plain_member(const char **pp, const char *end, int64_t *out)
{
    static const char *const names[] = {"\"qty\"", "\"user_id\""};
    const char *p = *pp;
    int which = -1;
    for (int i = 0; i < 2 && which < 0; i++) {
        size_t n = strlen(names[i]);
        if ((size_t)(end - p) >= n && memcmp(p, names[i], n) == 0) {
            which = i;
            p += n;
        }
    }
    if (which < 0)
        return -1;
    p = skip_json_ws(p, end);
    if (p == end || *p != ':')
        return -1;
    p = skip_json_ws(p + 1, end);
    size_t digits = 0;
    int64_t v = 0;
    for (; p + digits < end && p[digits] >= '0' && p[digits] <= '9'; digits++) {
        if (digits == 18)
            return -1;
        v = v * 10 + (p[digits] - '0');
    }
    if (digits == 0 || (digits > 1 && p[0] == '0'))
        return -1;
    *pp = p + digits;
    *out = v;
    return which;
}

/*
 * The bodies clients send, {"qty": N} and {"qty": N, "user_id": M} in either
 * order with JSON whitespace, accepted without building a JSON object.
 * Returns 0 when body is one of them with both values in range (json_loadb
 * and the checks below would accept it the same); -1 for anything else,
 * which the full path reads and answers, with its detail.
 */
static int order_body_plain(const char *body, size_t len, int64_t max_qty, int64_t *user_id,
                            int64_t *qty)
{
    const char *p = body, *end = body + len;
    int64_t v[2] = {0, 0};
    int seen[2] = {0, 0};
    if (!body)
        return -1;
    p = skip_json_ws(p, end);
    if (p == end || *p != '{')
        return -1;
    for (int i = 0; i < 2; i++) {
        int64_t x;
        p = skip_json_ws(p + 1, end);
        int which = plain_member(&p, end, &x);
        if (which < 0 || seen[which])
            return -1;
        seen[which] = 1;
        v[which] = x;
        p = skip_json_ws(p, end);
        if (p == end || (*p != ',' && *p != '}') || (*p == ',' && i == 1))
            return -1;
        if (*p == '}')
            break;
    }
    if (p == end || *p != '}' || skip_json_ws(p + 1, end) != end)
        return -1;
    if (!seen[0] || v[0] < 1 || v[0] > max_qty || (seen[1] && v[1] < 1))
        return -1;
    *qty = v[0];
    *user_id = seen[1] ? v[1] : 0;
    return 0;
}

int validate_order_body(const char *body, size_t len, int64_t max_qty, int64_t *user_id,
                        int64_t *qty, char *detail, size_t cap)
{
    static const char *const allowed[] = {"user_id", "qty", NULL};
    int64_t uid = 0, q;
    int has_uid;
    json_t *root;
    int rc = -1;

    if (max_qty < 1) {
        set_detail(detail, cap, "server misconfigured: no qty is allowed");
        return -1;
    }
    if (order_body_plain(body, len, max_qty, user_id, qty) == 0)
        return 0; /* every order of a sale: no JSON object built */
    root = load_object(body, len, detail, cap);
    if (root == NULL)
        return -1;
    if (known_keys_only(root, allowed, detail, cap) != 0 ||
        get_int(root, "user_id", 1, INT64_MAX, &uid, &has_uid, detail, cap) != 0 ||
        get_int(root, "qty", 1, max_qty, &q, NULL, detail, cap) != 0)
        goto out;
    *user_id = uid;
    *qty = q;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int validate_id_segment(const char *s, size_t len, int64_t *out)
{
    uint64_t v = 0;

    /* 19 digits hold INT64_MAX (9223372036854775807) and nothing longer fits. */
    if (s == NULL || len == 0 || len > 19 || s[0] == '0')
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        /* cannot wrap: at most 19 digits, and 10^19 - 1 < 2^64 */
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return -1;
    *out = (int64_t)v;
    return 0;
}

int validate_idempotency_key(const char *s, size_t max_len, char *detail, size_t cap)
{
    size_t n;

    if (s == NULL) {
        set_detail(detail, cap, "Idempotency-Key is required");
        return -1;
    }
    /* Bounded scan: a huge header must not cost more than max_len + 1 bytes. */
    n = strnlen(s, max_len + 1);
    if (n == 0 || n > max_len) {
        set_detail(detail, cap, "Idempotency-Key must be 1 to %zu characters", max_len);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c < 0x21 || c > 0x7e) {
            set_detail(detail, cap,
                       "Idempotency-Key may only contain printable ASCII without spaces");
            return -1;
        }
    }
    return 0;
}

/* RFC 9110 tchar. */
static int is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

int validate_json_content_type(const char *header)
{
    static const char media[] = "application/json";
    const char *p;

    if (header == NULL)
        return -1;
    p = skip_ows(header);
    if (strncasecmp(p, media, sizeof(media) - 1) != 0)
        return -1;
    p += sizeof(media) - 1;
    /* parameters = *( OWS ";" OWS [ parameter ] ), RFC 9110 section 5.6.6 */
    for (;;) {
        const char *name;
        size_t name_len;
        char value[16];
        size_t vlen = 0;
        int too_long = 0;

        p = skip_ows(p);
        if (*p == '\0')
            return 0;
        if (*p != ';')
            return -1; /* also "application/jsonx" and "application/json x" */
        p = skip_ows(p + 1);
        if (*p == '\0' || *p == ';')
            continue;
        name = p;
        while (is_tchar((unsigned char)*p))
            p++;
        name_len = (size_t)(p - name);
        if (name_len == 0 || *p != '=')
            return -1;
        p++;
        if (*p == '"') {
            for (p++; *p != '"'; p++) {
                unsigned char c = (unsigned char)*p;

                if (c == '\\') /* quoted-pair: take the next byte as it is */
                    c = (unsigned char)*++p;
                /* HTAB, SP, VCHAR, obs-text; this also stops at the NUL */
                if ((c < 0x20 && c != '\t') || c == 0x7f)
                    return -1;
                if (vlen + 1 < sizeof(value))
                    value[vlen++] = (char)c;
                else
                    too_long = 1;
            }
            p++;
        } else {
            if (!is_tchar((unsigned char)*p))
                return -1;
            for (; is_tchar((unsigned char)*p); p++) {
                if (vlen + 1 < sizeof(value))
                    value[vlen++] = *p;
                else
                    too_long = 1;
            }
        }
        value[vlen] = '\0';
        if (name_len == 7 && strncasecmp(name, "charset", 7) == 0 &&
            (too_long || strcasecmp(value, "utf-8") != 0))
            return -1;
    }
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Exactly n ASCII digits at *p; advances *p.  Stops at the NUL, never past it. */
static int take_digits(const char **p, int n, int *out)
{
    int v = 0;

    for (int i = 0; i < n; i++) {
        char c = (*p)[i];

        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

static int take_char(const char **p, const char *choices)
{
    if (**p == '\0' || strchr(choices, **p) == NULL)
        return -1;
    (*p)++;
    return 0;
}

int validate_rfc3339_ms(const char *s, int64_t *out_ms)
{
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int year, mon, day, hour, min, sec, ms = 0, off_h = 0, off_m = 0, sign = 0;
    const char *p = s;
    int64_t secs;
    int dim;

    if (s == NULL)
        return -1;
    if (take_digits(&p, 4, &year) || take_char(&p, "-") || take_digits(&p, 2, &mon) ||
        take_char(&p, "-") || take_digits(&p, 2, &day) || take_char(&p, "Tt") ||
        take_digits(&p, 2, &hour) || take_char(&p, ":") || take_digits(&p, 2, &min) ||
        take_char(&p, ":") || take_digits(&p, 2, &sec))
        return -1;
    if (*p == '.') {
        int ndigits = 0;

        for (p++; *p >= '0' && *p <= '9'; p++, ndigits++)
            if (ndigits < 3)
                ms = ms * 10 + (*p - '0');
        if (ndigits < 1 || ndigits > 9)
            return -1;
        for (int i = ndigits; i < 3; i++)
            ms *= 10;
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        /* "-00:00" means "offset unknown" in RFC 3339; the instant is still UTC. */
        sign = *p == '-' ? -1 : 1;
        p++;
        if (take_digits(&p, 2, &off_h) || take_char(&p, ":") || take_digits(&p, 2, &off_m))
            return -1;
        if (off_h > 23 || off_m > 59)
            return -1;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;
    if (mon < 1 || mon > 12 || hour > 23 || min > 59 || sec > 59)
        return -1;
    dim = mdays[mon - 1];
    if (mon == 2 && year % 4 == 0 && (year % 100 != 0 || year % 400 == 0))
        dim = 29;
    if (day < 1 || day > dim)
        return -1;
    secs = days_from_civil(year, mon, day) * 86400 + hour * 3600 + min * 60 + sec;
    secs -= (int64_t)sign * (off_h * 3600 + off_m * 60);
    /* The API shows times in UTC, and RFC 3339 has four-digit years: an
     * offset must not move the instant out of 0000..9999. */
    if (secs < days_from_civil(0, 1, 1) * 86400 || secs >= days_from_civil(10000, 1, 1) * 86400)
        return -1;
    *out_ms = secs * 1000 + ms;
    return 0;
}

int validate_sku_body(const char *body, size_t len, struct validate_sku *out, char *detail,
                      size_t cap)
{
    static const char *const allowed[] = {"id",
                                          "name",
                                          "stock",
                                          "per_user_limit",
                                          "sale_starts_at",
                                          "sale_ends_at",
                                          "payment_window_s",
                                          "buckets",
                                          NULL};
    struct validate_sku v;
    int has_window, has_buckets;
    const char *name;
    size_t name_len;
    json_t *root;
    int rc = -1;

    memset(&v, 0, sizeof(v));
    root = load_object(body, len, detail, cap);
    if (root == NULL)
        return -1;
    if (known_keys_only(root, allowed, detail, cap) != 0 ||
        get_int(root, "id", 1, INT64_MAX, &v.id, &v.has_id, detail, cap) != 0 ||
        get_text(root, "name", VALIDATE_SKU_NAME_MAX, &name, &name_len, detail, cap) != 0 ||
        get_int(root, "stock", 0, VALIDATE_STOCK_MAX, &v.stock, NULL, detail, cap) != 0 ||
        get_int(root, "per_user_limit", 1, VALIDATE_PER_USER_LIMIT_MAX, &v.per_user_limit, NULL,
                detail, cap) != 0 ||
        get_time(root, "sale_starts_at", &v.has_starts, &v.starts_ms, detail, cap) != 0 ||
        get_time(root, "sale_ends_at", &v.has_ends, &v.ends_ms, detail, cap) != 0 ||
        get_int(root, "payment_window_s", 0, VALIDATE_WINDOW_MAX, &v.payment_window_s, &has_window,
                detail, cap) != 0 ||
        get_int(root, "buckets", 1, VALIDATE_BUCKETS_MAX, &v.buckets, &has_buckets, detail, cap) !=
            0)
        goto out;
    if (!has_buckets)
        v.buckets = 1;
    if (v.has_starts && v.has_ends && v.ends_ms <= v.starts_ms) {
        set_detail(detail, cap, "sale_ends_at must be after sale_starts_at");
        goto out;
    }
    memcpy(v.name, name, name_len);
    v.name[name_len] = '\0';
    *out = v;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int validate_window_body(const char *body, size_t len, int64_t *window_s, char *detail, size_t cap)
{
    static const char *const allowed[] = {"payment_window_s", NULL};
    json_t *root = load_object(body, len, detail, cap);
    if (root == NULL)
        return -1;
    int rc = known_keys_only(root, allowed, detail, cap) != 0 ||
                     get_int(root, "payment_window_s", 0, VALIDATE_WINDOW_MAX, window_s, NULL,
                             detail, cap) != 0
                 ? -1
                 : 0;
    json_decref(root);
    return rc;
}

int validate_payment_body(const char *body, size_t len, char *ref, char *detail, size_t cap)
{
    static const char *const allowed[] = {"payment_ref", NULL};
    const char *text;
    size_t n;
    json_t *root = load_object(body, len, detail, cap);
    int rc = -1;

    if (root == NULL)
        return -1;
    if (known_keys_only(root, allowed, detail, cap) != 0 ||
        get_text(root, "payment_ref", VALIDATE_PAYMENT_REF_MAX, &text, &n, detail, cap) != 0)
        goto out;
    /* It is logged and compared as it is: printable ASCII, no space. */
    for (size_t i = 0; i < n; i++)
        if (text[i] <= ' ' || text[i] > '~') {
            set_detail(detail, cap, "payment_ref must be printable ASCII without spaces");
            goto out;
        }
    memcpy(ref, text, n);
    ref[n] = '\0';
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int validate_adjust_body(const char *body, size_t len, int64_t *delta, char *reason,
                         size_t reason_cap, char *detail, size_t cap)
{
    static const char *const allowed[] = {"delta", "reason", NULL};
    const char *text;
    size_t text_len;
    int64_t d;
    json_t *root;
    int rc = -1;

    root = load_object(body, len, detail, cap);
    if (root == NULL)
        return -1;
    if (known_keys_only(root, allowed, detail, cap) != 0 ||
        get_int(root, "delta", -VALIDATE_DELTA_MAX, VALIDATE_DELTA_MAX, &d, NULL, detail, cap) !=
            0 ||
        get_text(root, "reason", VALIDATE_REASON_MAX, &text, &text_len, detail, cap) != 0)
        goto out;
    if (d == 0) {
        set_detail(detail, cap, "delta must not be 0");
        goto out;
    }
    if (reason == NULL || text_len + 1 > reason_cap) {
        set_detail(detail, cap, "reason is too long for this server");
        goto out;
    }
    memcpy(reason, text, text_len);
    reason[text_len] = '\0';
    *delta = d;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int validate_bearer_token(const char *authorization_header, const char **token, size_t *len)
{
    const char *t;

    if (authorization_header == NULL)
        return -1;
    /* The scheme is public and case-insensitive (RFC 9110 section 11.1). */
    if (strncasecmp(authorization_header, "Bearer ", 7) != 0)
        return -1;
    t = authorization_header + 7;
    while (*t == ' ')
        t++;
    if (*t == '\0')
        return -1;
    *token = t;
    *len = strlen(t);
    return 0;
}

int validate_bearer(const char *authorization_header, const char *expected_token)
{
    const char *token;
    size_t n, m;
    volatile unsigned char diff = 0;

    if (expected_token == NULL || expected_token[0] == '\0' ||
        validate_bearer_token(authorization_header, &token, &m) != 0)
        return 0;
    n = strlen(expected_token);
    /*
     * Walk the whole expected token whatever happens; bytes past the end of
     * the presented one compare against 0, which never equals a token byte.
     * The time depends only on the two lengths, never on where they differ.
     * 'diff' is volatile so the compiler cannot turn this into an early exit.
     */
    diff |= (unsigned char)(m != n);
    for (size_t i = 0; i < n; i++) {
        unsigned char a = (unsigned char)expected_token[i];
        unsigned char b = i < m ? (unsigned char)token[i] : 0;

        diff |= (unsigned char)(a ^ b);
    }
    return diff == 0;
}

int validate_page_query(const char *query, int64_t default_limit, int64_t max_limit, int64_t *after,
                        int64_t *limit, char *detail, size_t cap)
{
    int seen_after = 0, seen_limit = 0;
    *after = 0;
    *limit = default_limit;
    for (const char *p = query; p && *p;) {
        size_t len = strcspn(p, "&");
        const char *eq = memchr(p, '=', len);
        size_t nlen = eq ? (size_t)(eq - p) : len;
        const char *v = eq ? eq + 1 : p + len;
        size_t vlen = eq ? len - nlen - 1 : 0;
        int is_after = nlen == 5 && memcmp(p, "after", 5) == 0;
        int is_limit = nlen == 5 && memcmp(p, "limit", 5) == 0;
        int64_t n = 0;
        if (!is_after && !is_limit) {
            snprintf(detail, cap, "unknown query parameter \"%.*s\": only after and limit",
                     (int)(nlen > 40 ? 40 : nlen), p);
            return -1;
        }
        if ((is_after && seen_after) || (is_limit && seen_limit)) {
            snprintf(detail, cap, "%s is given twice", is_after ? "after" : "limit");
            return -1;
        }
        /* after=0 is the start; every other value is an id */
        int zero = is_after && vlen == 1 && v[0] == '0';
        int bad = !zero && validate_id_segment(v, vlen, &n) != 0;
        if (is_after && bad) {
            snprintf(detail, cap, "after must be an integer between 0 and 2^63-1");
            return -1;
        }
        if (is_limit && (bad || n > max_limit)) {
            snprintf(detail, cap, "limit must be an integer between 1 and %" PRId64, max_limit);
            return -1;
        }
        if (is_after)
            *after = n, seen_after = 1;
        else
            *limit = n, seen_limit = 1;
        p += len + (p[len] == '&');
    }
    return 0;
}
