#include "core/keys.h"

#include <inttypes.h>
#include <stdio.h>

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

void keys_reserve(char keys[KEYS_RESERVE_N][KEYS_MAX], int64_t sku, int64_t user, const char *idem)
{
    static const enum keys_kind order[] = {KEY_META,   KEY_STOCK,   KEY_SEQ,
                                           KEY_BOUGHT, KEY_JOURNAL, KEY_STREAM};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        keys_sku(keys[i], sku, order[i]);
    keys_idem(keys[6], sku, user, idem);
    keys_buyer_rate(keys[7], sku, user);
}
