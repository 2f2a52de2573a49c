/*
 * keys: the Redis key names of a SKU and the order id layout.
 *
 * Every key of SKU 42 starts with "seckill:{sku:42}:" so that they share one
 * hash tag, and a script touching several of them stays valid on Redis Cluster.
 */
#ifndef SECKILL_KEYS_H
#define SECKILL_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define KEYS_MAX 320                /* longest key we build, idempotency key included */
#define KEYS_WRITER_GROUP "writers" /* consumer group of every order stream */
/* Writers publish every committed decision here; every instance listens, so
 * a buyer waiting on one instance learns what another instance's writer
 * committed.  Not a key: PUBLISH reaches every node of a cluster. */
#define KEYS_DECISIONS_CHANNEL "seckill:decisions"

enum keys_kind {
    KEY_META,
    KEY_STOCK,
    KEY_SEQ,
    KEY_BOUGHT,
    KEY_JOURNAL,
    KEY_STREAM,
    KEY_ADJUST,
    KEY_SKU_LOCK,
    KEY_WRITER_LOCK, /* the SKU's order writers take turns under it, one batch each */
    KEY_DEAD,        /* stream of entries no writer could write */
    KEY_DEBTS,       /* orders a rebuild's pending load must take (orders_reapply.lua) or
                      * give back (order_release.lua) */
    KEY_RELEASED,    /* confirmed orders whose units came back (order_release.lua) */
    KEY_COUNT
};

/* Writes the name of key 'kind' of SKU 'sku' into out (KEYS_MAX bytes). */
void keys_sku(char *out, int64_t sku, enum keys_kind kind);
/* The idempotency key's Redis name, scoped to the user so that one buyer can
 * never collide with (or probe) another's keys; 'idem' was validated
 * (printable ASCII, at most KEYS_IDEM_MAX bytes). */
#define KEYS_IDEM_MAX 200
void keys_idem(char *out, int64_t sku, int64_t user, const char *idem);
/* The SKU's bought hash maps each buyer's user id to the units they hold;
 * reserve.lua keeps there too, under "r:<user>", the buyer's order bucket as
 * their latest order taken left it (one write for both).  Readers of units
 * skip every field that is not a user id (sku_state.lua too). */
static inline int keys_bought_is_user(const char *field)
{
    return *field >= '0' && *field <= '9';
}
/* A buyer's order bucket on one SKU after an attempt that took no order
 * (reserve.lua; expires once full again). */
void keys_buyer_rate(char *out, int64_t sku, int64_t user);
/* The keys every order of a reserve.lua call shares, in its order (meta,
 * stock, seq, bought, journal, stream). */
#define KEYS_RESERVE_N 6
void keys_reserve(char keys[KEYS_RESERVE_N][KEYS_MAX], int64_t sku);
/* The two keys of one order of a reserve.lua call: its idempotency key ('idem'
 * may be "") and its buyer's order bucket (keys_idem, keys_buyer_rate). */
void keys_reserve_order(char *idem_key, char *rate_key, int64_t sku, int64_t user,
                        const char *idem);

#endif
