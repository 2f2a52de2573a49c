#include "core/keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/fmt.h"

void keys_sku(char *out, int64_t sku, enum keys_kind kind)
{
    static const char *const suffix[KEY_COUNT] = {
        [KEY_META] = "meta",
        [KEY_STOCK] = "stock",
        [KEY_SEQ] = "seq",
        [KEY_BOUGHT] = "bought",
        [KEY_JOURNAL] = "journal",
        [KEY_STREAM] = "orders",
        [KEY_ADJUST] = "adjustments",
        [KEY_SKU_LOCK] = "lock:sku",
        [KEY_WRITER_LOCK] = "lock:writer",
        [KEY_DEAD] = "dead",
        [KEY_DEBTS] = "debts",
        [KEY_RELEASED] = "released",
    };
    snprintf(out, KEYS_MAX, "seckill:{sku:%" PRId64 "}:%s", sku, suffix[kind]);
}

void keys_idem(char *out, int64_t sku, int64_t user, const char *idem)
{
    snprintf(out, KEYS_MAX, "seckill:{sku:%" PRId64 "}:idem:%" PRId64 ":%s", sku, user, idem);
}

void keys_buyer_rate(char *out, int64_t sku, int64_t user)
{
    snprintf(out, KEYS_MAX, "seckill:{sku:%" PRId64 "}:rate:%" PRId64, sku, user);
}

/* Appends n bytes of s to a key of *len bytes, within KEYS_MAX with its NUL
 * (cut short there, as snprintf would). */
static void key_put(char *out, size_t *len, const char *s, size_t n)
{
    if (n > KEYS_MAX - 1 - *len)
        n = KEYS_MAX - 1 - *len;
    memcpy(out + *len, s, n);
    *len += n;
    out[*len] = '\0';
}

/* Writes "seckill:{sku:<sku>}:" into prefix (48 bytes); returns its length. */
static size_t sku_prefix(char *prefix, int64_t sku)
{
    size_t pn;
    memcpy(prefix, "seckill:{sku:", 13);
    pn = 13 + fmt_i64(prefix + 13, sku);
    memcpy(prefix + pn, "}:", 2);
    return pn + 2;
}

/* The hot path of every batch: the SKU's prefix once, then memcpy, not six
 * snprintf (the names are those of keys_sku). */
void keys_reserve(char keys[KEYS_RESERVE_N][KEYS_MAX], int64_t sku)
{
    static const char *const suffix[KEYS_RESERVE_N] = {"meta",   "stock",   "seq",
                                                       "bought", "journal", "orders"};
    char prefix[48];
    size_t pn = sku_prefix(prefix, sku);
    for (size_t i = 0; i < KEYS_RESERVE_N; i++) {
        size_t n = 0;
        key_put(keys[i], &n, prefix, pn);
        key_put(keys[i], &n, suffix[i], strlen(suffix[i]));
    }
}

/* ... and of every order (the names of keys_idem and keys_buyer_rate). */
void keys_reserve_order(char *idem_key, char *rate_key, int64_t sku, int64_t user, const char *idem)
{
    char prefix[48], num[FMT_I64_MAX];
    size_t pn = sku_prefix(prefix, sku), un = fmt_i64(num, user), n = 0;
    key_put(idem_key, &n, prefix, pn);
    key_put(idem_key, &n, "idem:", 5);
    key_put(idem_key, &n, num, un);
    key_put(idem_key, &n, ":", 1);
    key_put(idem_key, &n, idem, strlen(idem));
    n = 0;
    key_put(rate_key, &n, prefix, pn);
    key_put(rate_key, &n, "rate:", 5);
    key_put(rate_key, &n, num, un);
}
