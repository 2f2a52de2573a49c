/* Pure tests: the config table, the Redis URL parser and the key layout. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/cfg.h"
#include "core/embedded.h"
#include "core/keys.h"
#include "order/order.h"
#include "store/pgwait.h"
#include "store/redis_conn.h"

START_TEST(test_defaults_match_the_local_stack)
{
    struct cfg c;
    cfg_defaults(&c);
    ck_assert_str_eq(c.http_addr, "127.0.0.1:8080");
    ck_assert_str_eq(c.redis_url, "redis://127.0.0.1:6380/0");
    ck_assert_ptr_nonnull(strstr(c.pg_dsn, "port=5433"));
    ck_assert_str_eq(c.admin_token, "");        /* no built-in token */
    ck_assert_str_eq(c.buyer_token_secret, ""); /* nor secret: serve refuses to start */
    ck_assert_int_gt(c.lock_ttl_ms, c.lock_commit_margin_ms);
    /* A program that never sets pgwait's default still gets the setting's. */
    ck_assert_int_eq(c.pg_client_timeout_ms, PGWAIT_FALLBACK_TIMEOUT_MS);
    char err[160];
    ck_assert_msg(cfg_check(&c, err, sizeof err) == 0, "%s", err);
    cfg_free(&c);
}
END_TEST

START_TEST(test_flags_override_env_and_bad_values_are_refused)
{
    struct cfg c;
    char err[160];
    cfg_defaults(&c);
    setenv("SECKILL_LOCK_TTL_MS", "4000", 1);
    char *argv[] = {"seckilld", "--lock-ttl-ms=8000", "--http_threads", "3", "serve", NULL};
    int first = 0;
    ck_assert_int_eq(cfg_load(&c, 5, argv, &first, err, sizeof err), 0);
    ck_assert_int_eq(c.lock_ttl_ms, 8000);
    ck_assert_int_eq(c.http_threads, 3);
    ck_assert_int_eq(first, 4);
    ck_assert_int_eq(cfg_set(&c, "lock_ttl_ms", "10x", err, sizeof err), -1);
    ck_assert_int_eq(cfg_set(&c, "lock_ttl_ms", "0", err, sizeof err), -1);
    ck_assert_int_eq(cfg_set(&c, "no_such_setting", "1", err, sizeof err), -1);
    ck_assert_int_eq(c.lock_ttl_ms, 8000); /* a refused value changes nothing */
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), 0);
    ck_assert_int_eq(cfg_set(&c, "lock_commit_margin_ms", "8000", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1); /* margin >= lease */
    ck_assert_int_eq(cfg_set(&c, "lock_commit_margin_ms", "500", err, sizeof err), 0);
    ck_assert_int_eq(cfg_set(&c, "pg_statement_timeout_ms", "9000", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1); /* statement outlasts lease */
    ck_assert_int_eq(cfg_set(&c, "pg_statement_timeout_ms", "5000", err, sizeof err), 0);
    ck_assert_int_eq(cfg_set(&c, "pg_client_timeout_ms", "5000", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1); /* gives up before the server would */
    ck_assert_int_eq(cfg_set(&c, "pg_client_timeout_ms", "8000", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1); /* waits as long as the lease */
    ck_assert_int_eq(cfg_set(&c, "pg_client_timeout_ms", "6000", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), 0);
    ck_assert_int_eq(cfg_set(&c, "redis_timeout_ms", "3000", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1); /* renewals slower than a third */
    unsetenv("SECKILL_LOCK_TTL_MS");
    cfg_free(&c);
}
END_TEST

START_TEST(test_buyer_token_secret_shorter_than_32_bytes_is_refused)
{
    struct cfg c;
    char err[160];
    cfg_defaults(&c);
    ck_assert_int_eq(
        cfg_set(&c, "buyer_token_secret", "0123456789abcdef0123456789abcde", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1); /* 31 bytes */
    ck_assert_ptr_nonnull(strstr(err, "buyer_token_secret"));
    ck_assert_int_eq(
        cfg_set(&c, "buyer_token_secret", "0123456789abcdef0123456789abcdef", err, sizeof err), 0);
    ck_assert_msg(cfg_check(&c, err, sizeof err) == 0, "%s", err); /* 32 bytes */
    cfg_free(&c);
}
END_TEST

START_TEST(test_redis_url_forms)
{
    struct redis_target t;
    char err[160];
    ck_assert_int_eq(redis_parse_url("redis://127.0.0.1:6380/2", &t, err, sizeof err), 0);
    ck_assert_str_eq(t.host, "127.0.0.1");
    ck_assert_int_eq(t.port, 6380);
    ck_assert_int_eq(t.db, 2);
    ck_assert_int_eq(redis_parse_url("redis://:s3cret@localhost", &t, err, sizeof err), 0);
    ck_assert_str_eq(t.password, "s3cret");
    ck_assert_int_eq(t.port, 6379);
    ck_assert_int_eq(redis_parse_url("http://x", &t, err, sizeof err), -1);
    ck_assert_int_eq(redis_parse_url("redis://h:99999", &t, err, sizeof err), -1);
    ck_assert_int_eq(redis_parse_url("redis://h:1/x", &t, err, sizeof err), -1);
    ck_assert_int_eq(redis_parse_url("redis://", &t, err, sizeof err), -1);
}
END_TEST

START_TEST(test_every_key_of_a_sku_shares_its_hash_tag)
{
    char k[KEYS_MAX], r[KEYS_RESERVE_N][KEYS_MAX];
    keys_reserve(r, 42, 7, "abc");
    for (int i = 0; i < KEYS_RESERVE_N; i++)
        ck_assert_ptr_nonnull(strstr(r[i], "{sku:42}"));
    keys_order_lock(k, 42, 7);
    ck_assert_ptr_nonnull(strstr(k, "{sku:42}"));
    keys_sku(k, 42, KEY_SKU_LOCK);
    ck_assert_ptr_nonnull(strstr(k, "{sku:42}"));
    /* every kind has its own, named key */
    char all[KEY_COUNT][KEYS_MAX];
    for (int kind = 0; kind < KEY_COUNT; kind++) {
        keys_sku(all[kind], 42, (enum keys_kind)kind);
        ck_assert_msg(strncmp(all[kind], "seckill:{sku:42}:", 17) == 0 && all[kind][17] &&
                          !strstr(all[kind], "(null)"),
                      "kind %d: \"%s\"", kind, all[kind]);
        for (int other = 0; other < kind; other++)
            ck_assert_str_ne(all[kind], all[other]);
    }
}
END_TEST

START_TEST(test_order_id_names_its_epoch)
{
    int64_t id = (int64_t)5 * (1 << ORDER_SEQ_BITS) + 17;
    ck_assert_int_eq(order_id_epoch(id), 5);
    /* the largest epoch and sequence stay below 2^53, exact in Lua and JSON */
    int64_t max = ((int64_t)ORDER_EPOCH_MAX << ORDER_SEQ_BITS) + ((1 << ORDER_SEQ_BITS) - 1);
    ck_assert_int_eq(max, ORDER_ID_MAX);
    ck_assert(max < ((int64_t)1 << 53));
}
END_TEST

START_TEST(test_scripts_and_queries_are_embedded)
{
    embedded_init();
    ck_assert_int_eq(strlen(script_reserve.sha), 40);
    ck_assert_ptr_nonnull(strstr(sql_text("sku_take_stock"), "stock >= $2"));
    ck_assert_uint_ge(embedded_migration_count(), 1);
    ck_assert_str_eq(embedded_migration_name(0), "0001_init");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, test_defaults_match_the_local_stack);
    tcase_add_test(tc, test_flags_override_env_and_bad_values_are_refused);
    tcase_add_test(tc, test_buyer_token_secret_shorter_than_32_bytes_is_refused);
    tcase_add_test(tc, test_redis_url_forms);
    tcase_add_test(tc, test_every_key_of_a_sku_shares_its_hash_tag);
    tcase_add_test(tc, test_order_id_names_its_epoch);
    tcase_add_test(tc, test_scripts_and_queries_are_embedded);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
