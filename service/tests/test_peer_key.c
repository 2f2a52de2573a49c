/*
 * peer_key: one client, one key, for the per-address connection cap and the
 * per-address rate limits alike (an IPv6 /64 is one client, an IPv4 address
 * is itself), and the hash of the per-address table follows its seed.
 * No stack needed: the cap is the real server's, on a loop with no listener.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/cfg.h"
#include "http/peer_key.h"
#include "http/server.h"

/* Keys hashed in the seed test, and the table size they are placed in. */
#define SEED_KEYS 64
#define SEED_BUCKETS 1024

static const char *key_of(const char *addr, char *out)
{
    peer_key_of(addr, out, PEER_KEY_MAX);
    return out;
}

START_TEST(test_ipv6_addresses_of_one_64_share_a_key_and_other_64s_do_not)
{
    char a[PEER_KEY_MAX], b[PEER_KEY_MAX];
    ck_assert_str_eq(key_of("2001:db8:1:2::5", a), key_of("2001:db8:1:2:ffff:ffff:ffff:ffff", b));
    ck_assert_str_eq(key_of("2001:db8:1:2::5", a), "2001:db8:1:2::");
    ck_assert_str_ne(key_of("2001:db8:1:2::5", a), key_of("2001:db8:1:3::5", b));
    /* the longest text an address can take still fits */
    ck_assert_str_eq(key_of("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", a),
                     "ffff:ffff:ffff:ffff::");
}
END_TEST

START_TEST(test_ipv4_addresses_are_counted_exactly)
{
    char a[PEER_KEY_MAX], b[PEER_KEY_MAX];
    ck_assert_str_eq(key_of("10.1.2.3", a), "10.1.2.3");
    ck_assert_str_ne(key_of("10.1.2.3", a), key_of("10.1.2.4", b));
    /* an IPv4 client on a dual-stack socket is its IPv4 address, not a /64 */
    ck_assert_str_eq(key_of("::ffff:10.1.2.3", a), "::ffff:10.1.2.3");
    ck_assert_str_ne(key_of("::ffff:10.1.2.3", a), key_of("::ffff:10.1.2.4", b));
    /* what is no address (a proxy's UNKNOWN) is kept as given */
    ck_assert_str_eq(key_of("", a), "");
}
END_TEST

START_TEST(test_the_address_table_hash_follows_its_seed)
{
    uint64_t s1 = peer_key_seed(), s2 = peer_key_seed();
    ck_assert_msg(s1 != s2, "two seeds drawn in a row are equal: not random");
    int moved = 0;
    for (int i = 0; i < SEED_KEYS; i++) {
        char addr[PEER_KEY_MAX];
        snprintf(addr, sizeof addr, "10.0.%d.%d", i / 256, i % 256);
        /* the same seed: the same place, every time */
        ck_assert_uint_eq(peer_key_hash(s1, addr), peer_key_hash(s1, addr));
        if ((peer_key_hash(s1, addr) % SEED_BUCKETS) != (peer_key_hash(s2, addr) % SEED_BUCKETS))
            moved++;
    }
    /* unseeded, no key would move; by chance about 1 in SEED_BUCKETS stays */
    ck_assert_msg(moved > SEED_KEYS / 2, "only %d of %d keys moved under another seed", moved,
                  SEED_KEYS);
    /* two keys that share a bucket under one seed part under most others */
    char k1[] = "10.0.0.1", k2[PEER_KEY_MAX];
    uint64_t seed = 1;
    int found = 0;
    for (int i = 0; i < 100000 && !found; i++) {
        snprintf(k2, sizeof k2, "10.%d.%d.%d", i / 65536, (i / 256) % 256, i % 256);
        found = strcmp(k1, k2) != 0 &&
                peer_key_hash(seed, k1) % SEED_BUCKETS == peer_key_hash(seed, k2) % SEED_BUCKETS;
    }
    ck_assert(found);
    int apart = 0;
    for (uint64_t other = 2; other < 2 + SEED_KEYS; other++)
        apart += peer_key_hash(other, k1) % SEED_BUCKETS != peer_key_hash(other, k2) % SEED_BUCKETS;
    ck_assert_msg(apart > SEED_KEYS / 2, "a collision under seed 1 held under %d of %d others",
                  SEED_KEYS - apart, SEED_KEYS);
}
END_TEST

static void never_called(struct http_req *r)
{
    (void)r;
}

/* Hands the server one end of a fresh socketpair as a connection from
 * 'peer'; returns what http_server_adopt says (the other end is closed). */
static int connect_as(struct http_server *s, const char *peer)
{
    int sv[2];
    ck_assert(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    close(sv[1]);
    return http_server_adopt(s, sv[0], peer);
}

/* The real per-address cap (server.c), fed connections with the peers a
 * test chooses: loopback has one IPv6 address, a /64 needs more. */
START_TEST(test_the_connection_cap_counts_an_ipv6_64_as_one_client)
{
    struct cfg c;
    cfg_defaults(&c);
    c.http_max_connections_per_addr = 2;
    char err[256];
    struct http_server *s = http_server_bare(&c, never_called, err, sizeof err);
    ck_assert_msg(s, "%s", err);
    ck_assert_int_eq(connect_as(s, "2001:db8:1:2::1"), 0);
    ck_assert_int_eq(connect_as(s, "2001:db8:1:2::2"), 0);
    /* a third address of the same /64: the same client, past its cap */
    ck_assert_int_eq(connect_as(s, "2001:db8:1:2:ffff:ffff:ffff:ffff"), -1);
    /* the next /64 is another client; IPv4 addresses are counted one by one */
    ck_assert_int_eq(connect_as(s, "2001:db8:1:3::1"), 0);
    ck_assert_int_eq(connect_as(s, "10.0.0.1"), 0);
    ck_assert_int_eq(connect_as(s, "10.0.0.1"), 0);
    ck_assert_int_eq(connect_as(s, "10.0.0.1"), -1);
    ck_assert_int_eq(connect_as(s, "10.0.0.2"), 0);
    http_server_stop(s);
    cfg_free(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("peer_key");
    TCase *tc = tcase_create("peer_key");
    tcase_add_test(tc, test_ipv6_addresses_of_one_64_share_a_key_and_other_64s_do_not);
    tcase_add_test(tc, test_ipv4_addresses_are_counted_exactly);
    tcase_add_test(tc, test_the_address_table_hash_follows_its_seed);
    tcase_add_test(tc, test_the_connection_cap_counts_an_ipv6_64_as_one_client);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
