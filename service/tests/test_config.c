/* Pure tests: the config table and its secrets, the Redis URL parser, log
 * escaping and the key layout. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cfg.h"
#include "core/embedded.h"
#include "core/keys.h"
#include "core/log.h"
#include "order/order.h"
#include "store/pgwait.h"
#include "store/redis_conn.h"

/* A secret long enough for every check (admin_token, buyer secrets). */
#define TH_LONG_SECRET "a-secret-of-forty-bytes-0123456789abcdef"

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
    ck_assert_int_eq(c.pg_connect_host_timeout_ms, PGWAIT_FALLBACK_HOST_TIMEOUT_MS);
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

/* A request's deadline that an order's own waits (reservation, commit) could
 * outlast would cut a durable order short after it took stock. */
START_TEST(test_request_deadline_must_leave_an_order_its_own_waits)
{
    struct cfg c;
    char err[200];
    cfg_defaults(&c);
    ck_assert_int_eq(c.request_deadline_ms, 5000);
    ck_assert_int_eq(c.health_timeout_ms, 1000);
    ck_assert_msg(cfg_check(&c, err, sizeof err) == 0, "%s", err);
    /* and room to record a 202 after them (CFG_PENDING_RECORD_MIN_MS) */
    ck_assert_int_eq(cfg_set(&c, "order_ack_wait_ms", "3501", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1); /* 1000 + 3501 + 500 > 5000 */
    ck_assert_msg(strstr(err, "request_deadline_ms") != NULL, "%s", err);
    ck_assert_int_eq(cfg_set(&c, "request_deadline_ms", "5001", err, sizeof err), 0);
    ck_assert_msg(cfg_check(&c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(cfg_set(&c, "request_deadline_ms", "99", err, sizeof err), -1);
    ck_assert_int_eq(cfg_set(&c, "health_timeout_ms", "0", err, sizeof err), -1);
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

START_TEST(test_a_buyer_key_rotation_is_checked_for_equal_or_short_keys)
{
    static const char primary[] = "0123456789abcdef0123456789abcdef";
    static const char next[] = "fedcba9876543210fedcba9876543210";
    const struct {
        const char *kid, *next, *kid_next, *named; /* named: what the refusal names, NULL: ok */
    } cases[] = {
        {"", next, "k2", NULL},                       /* primary without kid: still fine */
        {"k1", next, "k2", NULL},                     /* a rotation */
        {"k1", "", "", NULL},                         /* one key with its kid */
        {"k1", primary, "k2", "differ"},              /* the same secret twice */
        {"k1", next, "k1", "buyer_token_kid_next"},   /* the same kid twice */
        {"", next, "", "buyer_token_kid_next"},       /* no kid for the next key */
        {"k1", "fedcba9876543210", "k2", "32 bytes"}, /* a short next secret */
        {"k1", "", "k2", "without buyer_token_secret_next"},
        {"k 1", "", "", "buyer_token_kid"}, /* a kid a header could not carry */
        {"k1", next, "k\"2", "buyer_token_kid_next"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cfg c;
        char err[256];
        cfg_defaults(&c);
        ck_assert_int_eq(cfg_set(&c, "buyer_token_secret", primary, err, sizeof err), 0);
        ck_assert_int_eq(cfg_set(&c, "buyer_token_kid", cases[i].kid, err, sizeof err), 0);
        ck_assert_int_eq(cfg_set(&c, "buyer_token_secret_next", cases[i].next, err, sizeof err), 0);
        ck_assert_int_eq(cfg_set(&c, "buyer_token_kid_next", cases[i].kid_next, err, sizeof err),
                         0);
        int rc = cfg_check(&c, err, sizeof err);
        if (!cases[i].named) {
            ck_assert_msg(rc == 0, "case %zu: %s", i, err);
        } else {
            ck_assert_msg(rc == -1 && strstr(err, cases[i].named), "case %zu: rc %d, '%s'", i, rc,
                          rc ? err : "");
            ck_assert_msg(!strstr(err, primary) && !strstr(err, next), "a secret in '%s'", err);
        }
        cfg_free(&c);
    }
    /* the next secret is a secret: never a flag */
    struct cfg c;
    char err[256];
    cfg_defaults(&c);
    ck_assert_int_eq(cfg_set_flag(&c, "buyer_token_secret_next", next, err, sizeof err), -1);
    ck_assert_int_eq(c.buyer_token_max_ttl_s, 86400);
    ck_assert_int_eq(cfg_set(&c, "buyer_token_max_ttl_s", "59", err, sizeof err), -1);
    ck_assert_int_eq(cfg_set(&c, "buyer_token_max_ttl_s", "31536001", err, sizeof err), -1);
    ck_assert_int_eq(cfg_set(&c, "buyer_token_max_ttl_s", "3600", err, sizeof err), 0);
    cfg_free(&c);
}
END_TEST

START_TEST(test_redis_url_forms)
{
    struct rlock_url t;
    char err[160];
    ck_assert_int_eq(rlock_url_parse("redis://127.0.0.1:6380/2", &t, err, sizeof err), 0);
    ck_assert_str_eq(t.host, "127.0.0.1");
    ck_assert_int_eq(t.port, 6380);
    ck_assert_int_eq(t.db, 2);
    ck_assert_int_eq(rlock_url_parse("redis://:s3cret@localhost", &t, err, sizeof err), 0);
    ck_assert_str_eq(t.password, "s3cret");
    ck_assert_int_eq(t.port, 6379);
    ck_assert_str_eq(t.user, "");
    /* An ACL user, percent-decoded; the password never shows in a message. */
    ck_assert_int_eq(rlock_url_parse("redis://svc%2Da:p%40ss%3Aw0rd@h:7/3", &t, err, sizeof err),
                     0);
    ck_assert_str_eq(t.user, "svc-a");
    ck_assert_str_eq(t.password, "p@ss:w0rd");
    ck_assert_str_eq(t.host, "h");
    ck_assert_int_eq(t.port, 7);
    ck_assert_int_eq(t.db, 3);
    ck_assert_int_eq(rlock_url_parse("redis://u:s3cret%zz@h", &t, err, sizeof err), -1);
    ck_assert_ptr_null(strstr(err, "s3cret"));
    ck_assert_int_eq(rlock_url_parse("redis://u:s3cret%00@h", &t, err, sizeof err), -1);
    ck_assert_int_eq(rlock_url_parse("redis://s3cret@h", &t, err, sizeof err), -1);
    ck_assert_ptr_null(strstr(err, "s3cret"));
    ck_assert_int_eq(rlock_url_parse("redis://u:@h", &t, err, sizeof err), -1);
    ck_assert_int_eq(rlock_url_parse("rediss://u:s3cret@h:6380", &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "rediss://") && strstr(err, "not supported"), "%s", err);
    ck_assert_int_eq(rlock_url_parse("http://x", &t, err, sizeof err), -1);
    ck_assert_int_eq(rlock_url_parse("redis://h:99999", &t, err, sizeof err), -1);
    ck_assert_int_eq(rlock_url_parse("redis://h:1/x", &t, err, sizeof err), -1);
    ck_assert_int_eq(rlock_url_parse("redis://", &t, err, sizeof err), -1);
    ck_assert_int_eq(rlock_url_parse("redis://h:1/2/3", &t, err, sizeof err), -1);
    /* every refusal without a buffer for its message */
    static const char *const bad[] = {"redis://u:s3cret%zz@h",
                                      "redis://s3cret@h",
                                      "redis://u:@h",
                                      "rediss://h",
                                      "http://x",
                                      "redis://h:1/x",
                                      "redis-cluster://h:1/3",
                                      "redis-cluster://,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(rlock_url_parse(bad[i], &t, NULL, sizeof err) == -1, "%s", bad[i]);
    ck_assert_int_eq(rlock_url_parse("redis-cluster://h:1", &t, err, sizeof err), 0);
    ck_assert_int_eq(rlock_url_resolve(&t, 100, NULL, sizeof err), -1);
}
END_TEST

START_TEST(test_redis_sentinel_url_forms)
{
    struct rlock_url t;
    char err[200];
    ck_assert_int_eq(rlock_url_parse("redis-sentinel://svc:p%40ss@127.0.0.1:26380,127.0.0.2,"
                                     "s3.example:26382/seckill/4",
                                     &t, err, sizeof err),
                     0);
    ck_assert_int_eq(t.nsentinels, 3);
    ck_assert_str_eq(t.sentinel[0].host, "127.0.0.1");
    ck_assert_int_eq(t.sentinel[0].port, 26380);
    ck_assert_str_eq(t.sentinel[1].host, "127.0.0.2");
    ck_assert_int_eq(t.sentinel[1].port, RLOCK_URL_SENTINEL_PORT);
    ck_assert_str_eq(t.sentinel[2].host, "s3.example");
    ck_assert_int_eq(t.sentinel[2].port, 26382);
    ck_assert_str_eq(t.master, "seckill");
    ck_assert_int_eq(t.db, 4);
    ck_assert_str_eq(t.user, "svc");
    ck_assert_str_eq(t.password, "p@ss");
    ck_assert_str_eq(t.host, ""); /* the Sentinels say where the master is */
    ck_assert_int_eq(rlock_url_parse("redis-sentinel://h/m", &t, err, sizeof err), 0);
    ck_assert_int_eq(t.db, 0);
    ck_assert_int_eq(t.nsentinels, 1);
    /* refused: no master name, a bad one, a bad port, too many Sentinels, a bad db */
    static const char *const bad[] = {
        "redis-sentinel://h:26379",
        "redis-sentinel://h:26379/",
        "redis-sentinel://h:26379/a b",
        "redis-sentinel://h:0/m",
        "redis-sentinel://h:26379,/m",
        "redis-sentinel://,h/m",
        "redis-sentinel://a,b,c,d,e,f,g,h,i/m",
        "redis-sentinel://h/m/x",
        "redis-sentinel://u:s3cret@/m",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(rlock_url_parse(bad[i], &t, err, sizeof err) == -1, "%s was accepted",
                      bad[i]);
        ck_assert_ptr_null(strstr(err, "s3cret"));
        /* no buffer for the message: refused all the same */
        ck_assert_int_eq(rlock_url_parse(bad[i], &t, NULL, sizeof err), -1);
    }
    /* a plain URL has nothing to resolve */
    ck_assert_int_eq(rlock_url_parse("redis://h:7", &t, err, sizeof err), 0);
    ck_assert_int_eq(t.nsentinels, 0);
    ck_assert_int_eq(rlock_url_resolve(&t, 100, err, sizeof err), 0);
    ck_assert_str_eq(t.host, "h");
}
END_TEST

#define LONG_TOKEN "0123456789abcdef0123456789abcdef" /* 32 bytes: the shortest accepted */

/* Writes text to a new temporary file; its path goes to path (64 bytes). */
static void temp_file(char *path, const char *text)
{
    snprintf(path, 64, "/tmp/seckill-test-secret-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

START_TEST(test_secret_flags_are_refused_naming_env_and_file)
{
    struct cfg c;
    char err[400];
    int first;
    cfg_defaults(&c);
    char *tok[] = {"seckilld", "--admin-token=" LONG_TOKEN, NULL};
    ck_assert_int_eq(cfg_load(&c, 2, tok, &first, err, sizeof err), -1);
    ck_assert_ptr_null(strstr(err, LONG_TOKEN));
    ck_assert_msg(strstr(err, "SECKILL_ADMIN_TOKEN") && strstr(err, "admin_token_file"), "%s", err);
    ck_assert_str_eq(c.admin_token, "");
    char *tok2[] = {"seckilld", "--admin_token", LONG_TOKEN, NULL};
    ck_assert_int_eq(cfg_load(&c, 3, tok2, &first, err, sizeof err), -1);
    /* A URL or DSN with a password is a secret; without one it is not. */
    char *url[] = {"seckilld", "--redis-url=redis://svc:hunter2hunter2@127.0.0.1:1/0", NULL};
    ck_assert_int_eq(cfg_load(&c, 2, url, &first, err, sizeof err), -1);
    ck_assert_ptr_null(strstr(err, "hunter2"));
    ck_assert_ptr_nonnull(strstr(err, "SECKILL_REDIS_URL"));
    char *dsn[] = {"seckilld", "--pg-dsn", "host=127.0.0.1 password=hunter2hunter2", NULL};
    ck_assert_int_eq(cfg_load(&c, 3, dsn, &first, err, sizeof err), -1);
    ck_assert_ptr_null(strstr(err, "hunter2"));
    char *dsn_uri[] = {"seckilld", "--pg-dsn=postgresql://u:hunter2@127.0.0.1/db", NULL};
    ck_assert_int_eq(cfg_load(&c, 2, dsn_uri, &first, err, sizeof err), -1);
    char *plain[] = {"seckilld", "--redis-url=redis://127.0.0.1:7/1",
                     "--pg-dsn=host=127.0.0.1 user=seckill", NULL};
    ck_assert_msg(cfg_load(&c, 3, plain, &first, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.redis_url, "redis://127.0.0.1:7/1");
    /* seckillctl's own --redis-url goes through the same gate. */
    ck_assert_int_eq(cfg_set_flag(&c, "redis_url", "redis://:pw@h:1", err, sizeof err), -1);
    ck_assert_int_eq(cfg_set_flag(&c, "redis_url", "redis://h:1", err, sizeof err), 0);
    cfg_free(&c);
}
END_TEST

START_TEST(test_secret_file_variant_reads_the_secret)
{
    struct cfg c;
    char err[400], path[64];
    int first;
    cfg_defaults(&c);
    temp_file(path, LONG_TOKEN "\n");
    char flag[128];
    snprintf(flag, sizeof flag, "--admin-token-file=%s", path);
    char *argv[] = {"seckilld", flag, NULL};
    ck_assert_msg(cfg_load(&c, 2, argv, &first, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.admin_token, LONG_TOKEN); /* the newline is not part of it */
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), 0);
    /* The environment's _FILE variant, and a config file line. */
    cfg_free(&c);
    cfg_defaults(&c);
    char *none[] = {"seckilld", NULL};
    setenv("SECKILL_ADMIN_TOKEN_FILE", path, 1);
    ck_assert_msg(cfg_load(&c, 1, none, &first, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.admin_token, LONG_TOKEN);
    setenv("SECKILL_ADMIN_TOKEN", LONG_TOKEN, 1); /* two sources: which one was meant? */
    ck_assert_int_eq(cfg_load(&c, 1, none, &first, err, sizeof err), -1);
    unsetenv("SECKILL_ADMIN_TOKEN");
    unsetenv("SECKILL_ADMIN_TOKEN_FILE");
    ck_assert_int_eq(cfg_set(&c, "redis_url_file", "/nonexistent/seckill", err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/seckill"));
    ck_assert_int_eq(cfg_set(&c, "http_addr_file", path, err, sizeof err), -1); /* not a secret */
    unlink(path);
    temp_file(path, "redis://svc:hunter2@127.0.0.1:9/2\n");
    ck_assert_int_eq(cfg_set(&c, "redis_url_file", path, err, sizeof err), 0);
    ck_assert_str_eq(c.redis_url, "redis://svc:hunter2@127.0.0.1:9/2");
    unlink(path);
    cfg_free(&c);
}
END_TEST

START_TEST(test_short_admin_token_is_refused_empty_disables)
{
    struct cfg c;
    char err[400];
    cfg_defaults(&c);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), 0); /* empty: admin API off */
    ck_assert_int_eq(cfg_set(&c, "admin_token", "0123456789abcdef0123456789abcde", err, sizeof err),
                     0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1); /* 31 bytes */
    ck_assert_ptr_nonnull(strstr(err, "at least 32"));
    ck_assert_ptr_null(strstr(err, "0123456789abcdef"));
    ck_assert_int_eq(cfg_set(&c, "admin_token", LONG_TOKEN, err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), 0);
    cfg_free(&c);
}
END_TEST

/* The payment system's token: as long as the admin token, never the same. */
START_TEST(test_payment_token_is_long_and_not_the_admin_token)
{
    struct cfg c;
    char err[400];
    cfg_defaults(&c);
    ck_assert_int_eq(cfg_set(&c, "admin_token", LONG_TOKEN, err, sizeof err), 0);
    ck_assert_int_eq(cfg_set(&c, "payment_token", "short-payment-token", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "payment_token"));
    ck_assert_ptr_null(strstr(err, "short-payment-token"));
    ck_assert_int_eq(cfg_set(&c, "payment_token", LONG_TOKEN, err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "differ"));
    ck_assert_int_eq(
        cfg_set(&c, "payment_token", "payment-token-0123456789abcdef0123", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), 0);
    cfg_free(&c);
}
END_TEST

/* The internal listener needs an address of its own: on http_addr the two
 * would split its connections at random; empty, the admin API has no home. */
START_TEST(test_metrics_addr_must_be_set_and_differ_from_http_addr)
{
    struct cfg c;
    char err[400];
    cfg_defaults(&c);
    ck_assert_str_eq(c.metrics_addr, "127.0.0.1:9464");
    ck_assert_int_eq(c.metrics_refresh_ms, 2000);
    ck_assert_int_eq(c.admin_on_public, 0);
    ck_assert_int_eq(cfg_set(&c, "metrics_addr", "127.0.0.1:8080", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "metrics_addr"));
    ck_assert_int_eq(cfg_set(&c, "metrics_addr", "", err, sizeof err), 0);
    ck_assert_int_eq(cfg_check(&c, err, sizeof err), -1);
    ck_assert_int_eq(cfg_set(&c, "metrics_addr", "127.0.0.1:9465", err, sizeof err), 0);
    ck_assert_msg(cfg_check(&c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(cfg_set(&c, "admin_on_public", "2", err, sizeof err), -1);
    ck_assert_int_eq(cfg_set(&c, "metrics_max_connections", "0", err, sizeof err), -1);
    ck_assert_int_eq(cfg_set(&c, "health_probe_interval_ms", "5", err, sizeof err), -1);
    cfg_free(&c);
}
END_TEST

/* What `seckilld --help` prints about the settings; caller frees. */
static char *help_text(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    cfg_print_help(f);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

START_TEST(test_help_shows_no_secret)
{
    char *buf = help_text();
    ck_assert_ptr_nonnull(strstr(buf, "admin_token_file"));
    ck_assert_ptr_nonnull(strstr(buf, "redis_url_file"));
    free(buf);
}
END_TEST

/* A config at the defaults with 'n' settings changed by name. */
static void cfg_with(struct cfg *c, const char *const *pairs, size_t n)
{
    char err[200];
    cfg_defaults(c);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(cfg_set(c, pairs[2 * i], pairs[2 * i + 1], err, sizeof err) == 0, "%s", err);
}

START_TEST(test_reload_applies_reloadable_settings_and_names_the_rest)
{
    struct cfg cur, next;
    cfg_defaults(&cur);
    const char *const changes[] = {"rate_addr_per_s",  "7", "log_level",   "debug",
                                   "http_threads",     "4", "admin_token", TH_LONG_SECRET,
                                   "sold_out_flag_ms", "50"}; /* the default: no change */
    cfg_with(&next, changes, 5);
    char summary[512], err[200];
    ck_assert_int_eq(cfg_reload(&cur, &next, summary, sizeof summary, err, sizeof err), 2);
    ck_assert_str_eq(summary, "changed rate_addr_per_s=50->7, log_level=info->debug; needs "
                              "restart: http_threads, admin_token");
    ck_assert_int_eq(cur.rate_addr_per_s, 7);
    ck_assert_str_eq(cur.log_level, "debug");
    ck_assert_int_eq(cur.http_threads, 2); /* named, not applied */
    ck_assert_str_eq(cur.admin_token, "");
    /* once more: applied ones are no change; the restart is still needed */
    ck_assert_int_eq(cfg_reload(&cur, &next, summary, sizeof summary, err, sizeof err), 0);
    ck_assert_str_eq(summary, "changed nothing; needs restart: http_threads, admin_token");
    cfg_free(&next);
    cfg_defaults(&next);
    cfg_free(&cur);
    cfg_defaults(&cur);
    ck_assert_int_eq(cfg_reload(&cur, &next, summary, sizeof summary, err, sizeof err), 0);
    ck_assert_str_eq(summary, "changed nothing");
    cfg_free(&next);
    cfg_free(&cur);
}
END_TEST

START_TEST(test_reload_never_writes_a_secret_value)
{
    struct cfg cur, next;
    const char *const before[] = {"admin_token", TH_LONG_SECRET "-before", "redis_url",
                                  "redis://app:hunter2-old@127.0.0.1:6379"};
    const char *const after[] = {"admin_token", TH_LONG_SECRET "-after", "redis_url",
                                 "redis://app:hunter2-new@127.0.0.1:6379"};
    cfg_with(&cur, before, 2);
    cfg_with(&next, after, 2);
    char summary[512], err[200];
    ck_assert_int_eq(cfg_reload(&cur, &next, summary, sizeof summary, err, sizeof err), 0);
    ck_assert_str_eq(summary, "changed nothing; needs restart: redis_url, admin_token");
    ck_assert_ptr_null(strstr(summary, "hunter2"));
    ck_assert_ptr_null(strstr(summary, TH_LONG_SECRET));
    cfg_free(&next);
    cfg_free(&cur);
}
END_TEST

START_TEST(test_reload_refuses_whole_what_would_not_pass_the_checks_as_it_would_run)
{
    struct cfg cur, next;
    cfg_defaults(&cur);
    /* Alone, next passes (a shorter redis_timeout_ms leaves the deadline
     * room); but redis_timeout_ms needs a restart, so what would run is the
     * running 1000 ms plus the new 4000 ms wait: past request_deadline_ms. */
    const char *const changes[] = {"redis_timeout_ms", "300", "order_ack_wait_ms", "4000",
                                   "rate_addr_per_s",  "7"};
    cfg_with(&next, changes, 3);
    char summary[512] = "", err[200] = "";
    ck_assert_int_eq(cfg_check(&next, err, sizeof err), 0);
    ck_assert_int_eq(cfg_reload(&cur, &next, summary, sizeof summary, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "request_deadline_ms"));
    ck_assert_int_eq(cur.order_ack_wait_ms, 2000); /* nothing applied, not even the rate */
    ck_assert_int_eq(cur.rate_addr_per_s, 50);
    cfg_free(&next);
    cfg_free(&cur);
}
END_TEST

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_reread_keeps_a_flag_above_the_file)
{
    char path[] = "/tmp/seckill-test-config-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_file(path, "rate_addr_per_s = 9\nrate_addr_burst = 11\n");
    char *argv[] = {"seckilld", "--config", path, "--rate-addr-burst=3", "serve", NULL};
    struct cfg next;
    char err[300];
    ck_assert_msg(cfg_reread(&next, 5, argv, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(next.rate_addr_per_s, 9);
    ck_assert_int_eq(next.rate_addr_burst, 3);
    cfg_free(&next);
    write_file(path, "rate_addr_per_s = 10\nrate_addr_burst = 12\n");
    ck_assert_msg(cfg_reread(&next, 5, argv, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(next.rate_addr_per_s, 10); /* the file's new value */
    ck_assert_int_eq(next.rate_addr_burst, 3);  /* the flag still wins */
    cfg_free(&next);
    /* a bad file, a bad level, an unreadable file: refused, nothing held */
    write_file(path, "rate_addr_per_s = 10\nno_such_setting = 1\n");
    ck_assert_int_eq(cfg_reread(&next, 5, argv, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, ":2: unknown setting \"no_such_setting\""));
    write_file(path, "log_level = loud\n");
    ck_assert_int_eq(cfg_reread(&next, 5, argv, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "log_level"));
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(cfg_reread(&next, 5, argv, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot open config file"));
}
END_TEST

START_TEST(test_help_marks_the_reloadable_settings)
{
    char *buf = help_text();
    char *line = strstr(buf, "\n  rate_addr_per_s ");
    ck_assert_ptr_nonnull(line);
    char *end = strchr(line + 1, '\n');
    ck_assert_ptr_nonnull(end);
    *end = '\0';
    ck_assert_ptr_nonnull(strstr(line, "[reloadable"));
    *end = '\n';
    line = strstr(buf, "\n  http_threads ");
    ck_assert_ptr_nonnull(line);
    end = strchr(line + 1, '\n');
    *end = '\0';
    ck_assert_ptr_null(strstr(line, "[reloadable"));
    free(buf);
}
END_TEST

/* The names --help marks reloadable, each as " name " in out. */
static void reloadable_names(char *out, size_t cap)
{
    char *buf = help_text();
    size_t n = 0;
    out[0] = '\0';
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64];
        if (strstr(line, "[reloadable") && sscanf(line, " %63s", name) == 1)
            n += (size_t)snprintf(out + n, cap - n, " %s ", name);
        ck_assert_uint_lt(n, cap);
    }
    free(buf);
}

START_TEST(test_the_docs_list_exactly_the_reloadable_settings)
{
    char names[2048];
    reloadable_names(names, sizeof names);
    const char *root = getenv("SECKILL_TEST_ROOT");
    char path[512];
    snprintf(path, sizeof path, "%s/docs/operations.md", root ? root : ".");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char line[4096], listed[2048] = "";
    size_t n = 0;
    int in = 0, rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "### Reloading settings", 22) == 0)
            in = 1;
        else if (in && strncmp(line, "## ", 3) == 0)
            break;
        if (!in || strncmp(line, "| `", 3) != 0)
            continue;
        rows++;
        /* the first column: `a`, `b`, ... */
        char *end = strstr(line + 1, " |");
        ck_assert_ptr_nonnull(end);
        *end = '\0';
        for (char *p = strchr(line, '`'); p; p = strchr(p, '`')) {
            char *q = strchr(p + 1, '`');
            ck_assert_ptr_nonnull(q);
            *q = '\0';
            char want[80];
            snprintf(want, sizeof want, " %s ", p + 1);
            ck_assert_msg(strstr(names, want), "docs list %s, which is not reloadable", p + 1);
            n += (size_t)snprintf(listed + n, sizeof listed - n, "%s", want);
            p = q + 1;
        }
    }
    fclose(f);
    ck_assert_int_gt(rows, 0);
    for (char *p = strtok(names, " "); p; p = strtok(NULL, " ")) {
        char want[80];
        snprintf(want, sizeof want, " %s ", p);
        ck_assert_msg(strstr(listed, want), "docs/operations.md does not list reloadable %s", p);
    }
}
END_TEST

START_TEST(test_log_escape_keeps_one_record_on_one_line)
{
    char out[64];
    /* PQerrorMessage: several lines and a trailing newline. */
    log_escape(out, sizeof out, "ERROR:  boom\nDETAIL:  x\r\n");
    ck_assert_str_eq(out, "ERROR:  boom\\nDETAIL:  x");
    log_escape(out, sizeof out, "a\tb\x01\x1b[31mc\x7f\xc3\xa9");
    ck_assert_str_eq(out, "a\\tb\\x01\\x1b[31mc\\x7f\xc3\xa9"); /* UTF-8 kept */
    /* Truncation never splits an escape. */
    char small[5];
    ck_assert_uint_eq(log_escape(small, sizeof small, "abc\ndef"), 3);
    ck_assert_str_eq(small, "abc");
}
END_TEST

START_TEST(test_every_key_of_a_sku_shares_its_hash_tag)
{
    char k[KEYS_MAX], r[KEYS_RESERVE_N + 2][KEYS_MAX];
    keys_reserve(r, 42);
    keys_reserve_order(r[6], r[7], 42, 7, "abc");
    for (int i = 0; i < KEYS_RESERVE_N + 2; i++)
        ck_assert_ptr_nonnull(strstr(r[i], "{sku:42}"));
    /* keys_reserve builds by hand the names the other functions print */
    static const enum keys_kind first[] = {KEY_META,   KEY_STOCK,   KEY_SEQ,
                                           KEY_BOUGHT, KEY_JOURNAL, KEY_STREAM};
    for (int i = 0; i < 6; i++) {
        keys_sku(k, 42, first[i]);
        ck_assert_str_eq(r[i], k);
    }
    keys_idem(k, 42, 7, "abc");
    ck_assert_str_eq(r[6], k);
    keys_buyer_rate(k, 42, 7);
    ck_assert_str_eq(r[7], k);
    keys_reserve_order(r[6], r[7], INT64_MAX, INT64_MAX, "");
    keys_idem(k, INT64_MAX, INT64_MAX, "");
    ck_assert_str_eq(r[6], k);
    keys_buyer_rate(k, INT64_MAX, INT64_MAX);
    ck_assert_str_eq(r[7], k);
    keys_sku(k, 42, KEY_WRITER_LOCK);
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
    ck_assert_ptr_nonnull(strstr(sql_text("skus_take_stock"), "s.stock >= t.n"));
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
    tcase_add_test(tc, test_request_deadline_must_leave_an_order_its_own_waits);
    tcase_add_test(tc, test_buyer_token_secret_shorter_than_32_bytes_is_refused);
    tcase_add_test(tc, test_a_buyer_key_rotation_is_checked_for_equal_or_short_keys);
    tcase_add_test(tc, test_redis_url_forms);
    tcase_add_test(tc, test_redis_sentinel_url_forms);
    tcase_add_test(tc, test_secret_flags_are_refused_naming_env_and_file);
    tcase_add_test(tc, test_secret_file_variant_reads_the_secret);
    tcase_add_test(tc, test_short_admin_token_is_refused_empty_disables);
    tcase_add_test(tc, test_payment_token_is_long_and_not_the_admin_token);
    tcase_add_test(tc, test_help_shows_no_secret);
    tcase_add_test(tc, test_reload_applies_reloadable_settings_and_names_the_rest);
    tcase_add_test(tc, test_reload_never_writes_a_secret_value);
    tcase_add_test(tc, test_reload_refuses_whole_what_would_not_pass_the_checks_as_it_would_run);
    tcase_add_test(tc, test_reread_keeps_a_flag_above_the_file);
    tcase_add_test(tc, test_help_marks_the_reloadable_settings);
    tcase_add_test(tc, test_the_docs_list_exactly_the_reloadable_settings);
    tcase_add_test(tc, test_log_escape_keeps_one_record_on_one_line);
    tcase_add_test(tc, test_every_key_of_a_sku_shares_its_hash_tag);
    tcase_add_test(tc, test_order_id_names_its_epoch);
    tcase_add_test(tc, test_scripts_and_queries_are_embedded);
    tcase_add_test(tc, test_metrics_addr_must_be_set_and_differ_from_http_addr);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
