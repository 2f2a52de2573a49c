/*
 * seckill-loadtest against the real daemon: a small flash sale and a race of
 * admin deltas pass its invariant check; a tampered database or Redis fails
 * it (the checker can fail); bad flags are refused; and its latency histogram
 * keeps its error bound.  No assertion here depends on speed.
 */
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/buyer_token.h"
#include "core/keys.h"
#include "harness.h"
#include "lt_buyers.h"
#include "lt_hist.h"

#define RUN_TIMEOUT_MS 120000 /* one loadtest process, however slow the machine */
#define POLL_MS 50
#define MAX_ARGS 48
#define EXIT_OK 0
#define EXIT_VIOLATION 1
#define EXIT_USAGE 2
#define EXIT_ERROR 3 /* could not run or check */

/* ---- the latency histogram (pure) --------------------------------------- */

START_TEST(test_hist_small_values_are_exact)
{
    struct lt_hist h;
    ck_assert_int_eq(lt_hist_init(&h, 7, 1000000), 0);
    for (uint64_t v = 0; v < 128; v++) {
        ck_assert_uint_eq(lt_hist_bucket_high(&h, lt_hist_index(&h, v)), v);
        lt_hist_record(&h, v);
    }
    ck_assert_uint_eq(h.count, 128);
    ck_assert_uint_eq(lt_hist_percentile(&h, 0), 0);
    ck_assert_uint_eq(lt_hist_percentile(&h, 50), 63);
    ck_assert_uint_eq(lt_hist_percentile(&h, 100), 127);
    lt_hist_free(&h);
}
END_TEST

START_TEST(test_hist_relative_error_is_bounded)
{
    struct lt_hist h;
    ck_assert_int_eq(lt_hist_init(&h, 7, UINT64_C(1) << 40), 0);
    /* every value maps to a bucket whose top is >= it and within 2^-7 of it */
    for (uint64_t v = 1; v < (UINT64_C(1) << 40); v = v * 3 + 1) {
        for (uint64_t d = 0; d < 3; d++) {
            uint64_t x = v + d;
            uint64_t hi = lt_hist_bucket_high(&h, lt_hist_index(&h, x));
            ck_assert_msg(hi >= x && (double)(hi - x) <= (double)x / 128.0,
                          "value %llu in a bucket topped at %llu", (unsigned long long)x,
                          (unsigned long long)hi);
        }
    }
    /* buckets are monotonic and contiguous */
    for (size_t i = 1; i < h.nbuckets; i++)
        ck_assert(lt_hist_bucket_high(&h, i) > lt_hist_bucket_high(&h, i - 1));
    lt_hist_free(&h);
}
END_TEST

START_TEST(test_hist_percentiles_of_a_uniform_run)
{
    struct lt_hist h;
    ck_assert_int_eq(lt_hist_init(&h, 7, 10000000), 0);
    for (uint64_t v = 1; v <= 100000; v++)
        lt_hist_record(&h, v);
    static const double ps[] = {50, 90, 99, 99.9};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        double want = ps[i] * 1000.0, got = (double)lt_hist_percentile(&h, ps[i]);
        ck_assert_msg(got >= want && got <= want * (1 + 1.0 / 128),
                      "p%g = %.0f, expected %.0f within 0.8 %%", ps[i], got, want);
    }
    ck_assert_uint_eq(lt_hist_percentile(&h, 100), 100000);
    ck_assert_uint_eq(h.min, 1);
    ck_assert(lt_hist_mean(&h) > 50000.4 && lt_hist_mean(&h) < 50000.6);
    lt_hist_free(&h);
}
END_TEST

START_TEST(test_hist_merge_clamp_and_empty)
{
    struct lt_hist a, b, other;
    ck_assert_int_eq(lt_hist_init(&a, 4, 1000), 0);
    ck_assert_int_eq(lt_hist_init(&b, 4, 1000), 0);
    ck_assert_int_eq(lt_hist_init(&other, 5, 1000), 0);
    ck_assert_uint_eq(lt_hist_percentile(&a, 99), 0); /* empty */
    ck_assert(lt_hist_mean(&a) == 0.0);
    lt_hist_record(&a, 10);
    lt_hist_record(&b, 5);
    lt_hist_record(&b, 5000); /* above the maximum: clamped, counted */
    ck_assert_uint_eq(b.clamped, 1);
    ck_assert_uint_eq(b.max, 1000);
    ck_assert_int_eq(lt_hist_merge(&a, &b), 0);
    ck_assert_uint_eq(a.count, 3);
    ck_assert_uint_eq(a.min, 5);
    ck_assert_uint_eq(a.max, 1000);
    ck_assert_uint_eq(lt_hist_percentile(&a, 100), 1000);
    ck_assert_int_eq(lt_hist_merge(&a, &other), -1); /* different layouts */
    struct lt_hist bad;
    ck_assert_int_eq(lt_hist_init(&bad, 0, 1000), -1); /* sub_bits out of range */
    ck_assert(bad.counts == NULL);
    lt_hist_free(&a);
    lt_hist_free(&b);
    lt_hist_free(&other);
}
END_TEST

/* ---- the load generator against the daemon ------------------------------- */

/* build/seckill-loadtest next to the daemon under test. */
static void loadtest_path(char *out, size_t cap)
{
    const char *d = th_env("SECKILL_TEST_DAEMON");
    const char *slash = strrchr(d, '/');
    ck_assert(slash != NULL);
    snprintf(out, cap, "%.*s/seckill-loadtest", (int)(slash - d), d);
    ck_assert_msg(access(out, X_OK) == 0, "%s is missing: build it first (make all)", out);
}

/* Prints a run's output when it ended otherwise than expected. */
static void show_log(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        fputs(line, stderr);
    if (f)
        fclose(f);
}

/* Runs seckill-loadtest with 'args' (NULL-terminated), its output in a log
 * that is shown when the exit status is not 'expect'; returns the status. */
static int run_loadtest(const char *const *args, int expect)
{
    char bin[PATH_MAX], log[PATH_MAX];
    loadtest_path(bin, sizeof bin);
    snprintf(log, sizeof log, "/tmp/seckill-lt-%d.log", (int)getpid());
    const char *argv[MAX_ARGS];
    size_t n = 0;
    argv[n++] = bin;
    for (size_t i = 0; args[i]; i++) {
        ck_assert(n + 1 < MAX_ARGS);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        FILE *out = freopen(log, "w", stdout);
        if (!out || dup2(fileno(out), STDERR_FILENO) < 0)
            _exit(126);
        /* the daemons' secrets and stores by environment (flags would show
         * them in ps, and seckill-loadtest refuses them), unless a test set its own */
        setenv("SECKILL_BUYER_TOKEN_SECRET", TH_BUYER_SECRET, 0);
        setenv("SECKILL_ADMIN_TOKEN", TH_ADMIN_TOKEN, 0);
        setenv("SECKILL_PG_DSN", th_env("SECKILL_TEST_PG_DSN"), 0);
        setenv("SECKILL_REDIS_URL", th_env("SECKILL_TEST_REDIS_URL"), 0);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    for (int waited = 0;; waited += POLL_MS) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        ck_assert(w == 0);
        if (waited >= RUN_TIMEOUT_MS) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            ck_abort_msg("seckill-loadtest did not finish within %d ms", RUN_TIMEOUT_MS);
        }
        th_sleep_ms(POLL_MS);
    }
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc != expect)
        show_log(log);
    unlink(log);
    ck_assert_msg(WIFEXITED(st), "seckill-loadtest died by signal %d", WTERMSIG(st));
    return rc;
}

struct paths {
    char url[64], admin_url[64], json[PATH_MAX], answers[PATH_MAX], sku[24];
};

static void paths_init(struct paths *p, int port, const char *name)
{
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%d", port);
    snprintf(p->admin_url, sizeof p->admin_url, "http://127.0.0.1:%d", th_internal_port(port));
    snprintf(p->json, sizeof p->json, "/tmp/seckill-lt-%d-%s.json", (int)getpid(), name);
    snprintf(p->answers, sizeof p->answers, "/tmp/seckill-lt-%d-%s.answers", (int)getpid(), name);
    p->sku[0] = '\0';
}

/* Fresh stores, a daemon with 'env' (NULL: the harness's settings), and
 * paths named 'name' for its run. */
static void live_start(struct th_daemon *d, const char *const *env, struct paths *p,
                       const char *name)
{
    th_reset();
    th_daemon_start(d, env);
    paths_init(p, d->port, name);
}

static void paths_free(const struct paths *p)
{
    unlink(p->json);
    unlink(p->answers);
}

static json_t *load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    ck_assert_msg(j != NULL, "cannot read %s: %s", path, e.text);
    return j;
}

/* Check 'key' of a JSON summary. */
static json_t *check_of(json_t *j, const char *key)
{
    json_t *checks = json_object_get(json_object_get(j, "invariants"), "checks");
    size_t i;
    json_t *c;
    json_array_foreach(checks, i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "key")), key) == 0)
            return c;
    }
    ck_abort_msg("no check %s in the summary", key);
    return NULL;
}

/* The state ("PASS", "FAIL", "skip") of check 'key' in a JSON summary. */
static const char *check_state(json_t *j, const char *key)
{
    return json_string_value(json_object_get(check_of(j, key), "state"));
}

/* Its detail. */
static const char *check_detail(json_t *j, const char *key)
{
    return json_string_value(json_object_get(check_of(j, key), "detail"));
}

static long long json_path_int(json_t *j, const char *a, const char *b)
{
    json_t *v = json_object_get(json_object_get(j, a), b);
    ck_assert_msg(json_is_integer(v), "%s.%s is not an integer", a, b);
    return json_integer_value(v);
}

/* Every check ran and passed (those of the order's life may skip: a sale
 * without a lifecycle phase has no pay or cancel answers to compare). */
static void assert_all_passed(json_t *j)
{
    ck_assert(json_is_true(json_object_get(json_object_get(j, "invariants"), "ok")));
    json_t *checks = json_object_get(json_object_get(j, "invariants"), "checks");
    ck_assert_int_gt(json_array_size(checks), 10);
    size_t i;
    json_t *c;
    json_array_foreach(checks, i, c)
    {
        const char *key = json_string_value(json_object_get(c, "key"));
        const char *state = json_string_value(json_object_get(c, "state"));
        if (strncmp(key, "lc_", 3) == 0 && strcmp(state, "skip") == 0)
            continue;
        ck_assert_msg(strcmp(json_string_value(json_object_get(c, "state")), "PASS") == 0,
                      "check %s: %s (%s)", json_string_value(json_object_get(c, "key")),
                      json_string_value(json_object_get(c, "state")),
                      json_string_value(json_object_get(c, "detail")));
    }
}

/* A small flash sale through the loadtest; returns its JSON summary. */
static json_t *small_sale(struct paths *p, const char *stock, const char *limit,
                          const char *const *extra)
{
    const char *args[MAX_ARGS] = {
        "--url",         p->url,  "--admin-url",   p->admin_url, "--users",         "2000",
        "--concurrency", "50",    "--stock",       stock,        "--limit",         limit,
        "--seed",        "7",     "--progress-ms", "0",          "--drain-timeout", "60",
        "--json",        p->json, "--answers",     p->answers};
    size_t n = 0;
    while (args[n])
        n++;
    for (size_t i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    ck_assert_int_eq(run_loadtest(args, EXIT_OK), EXIT_OK);
    json_t *j = load_json(p->json);
    snprintf(p->sku, sizeof p->sku, "%lld",
             (long long)json_integer_value(json_object_get(j, "sku")));
    return j;
}

/* Runs seckill-loadtest with 'flags' (words split at spaces) and what every
 * sale here shares (p's service, no progress line, a minute to drain, the
 * summary in p's JSON file): it exits 0 with every check passed.  Returns
 * the summary. */
static json_t *passing_sale(struct paths *p, const char *flags)
{
    const char *all[MAX_ARGS] = {"--url",         p->url, "--admin-url",     p->admin_url,
                                 "--progress-ms", "0",    "--drain-timeout", "60",
                                 "--json",        p->json};
    size_t n = 10;
    char *words = strdup(flags), *save = NULL;
    ck_assert(words != NULL);
    for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        ck_assert(n + 1 < MAX_ARGS);
        all[n++] = w;
    }
    all[n] = NULL;
    ck_assert_int_eq(run_loadtest(all, EXIT_OK), EXIT_OK);
    free(words);
    json_t *j = load_json(p->json);
    assert_all_passed(j);
    return j;
}

/* --check-only of the SKU of p (with its answers file and 'flag', or NULL);
 * returns the exit status ('expect' only decides whether its output is shown)
 * and the summary in *out. */
static int check_only_with(struct paths *p, const char *flag, int expect, json_t **out)
{
    const char *args[] = {
        "--check-only", "--sku",  p->sku,  "--answers", p->answers, "--drain-timeout",
        "60",           "--json", p->json, flag,        NULL};
    int rc = run_loadtest(args, expect);
    *out = load_json(p->json);
    return rc;
}

static int check_only(struct paths *p, int expect, json_t **out)
{
    return check_only_with(p, NULL, expect, out);
}

/* Tampers with the database as the superuser: nothing the service may do. */
static void pg_exec(const char *sql)
{
    PGconn *c = th_pg_admin();
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

/* The tampering tests need 202s: the promise a fault may take back. */
static const char *const reserved_mode[] = {"SECKILL_ORDER_ACK=reserved", NULL};
/* The lifecycle tests' 1 s payment windows end within the test. */
static const char *const fast_sweep[] = {"SECKILL_EXPIRY_SWEEP_INTERVAL_MS=100", NULL};

START_TEST(test_small_flash_sale_proves_its_invariants)
{
    struct th_daemon d;
    struct paths p;
    live_start(&d, NULL, &p, "sale"); /* durable: 201s */
    const char *extra[] = {"--retry-share", "0.1", NULL};
    json_t *j = small_sale(&p, "100", "1", extra);
    assert_all_passed(j);
    /* 201 in durable mode, 202 in reserved mode: 100 new orders either way */
    json_t *run = json_object_get(j, "run");
    ck_assert_int_eq(json_path_int(run, "answers", "confirmed") +
                         json_path_int(run, "answers", "accepted"),
                     100);
    json_t *facts = json_object_get(json_object_get(j, "invariants"), "facts");
    ck_assert_int_eq(json_integer_value(json_object_get(facts, "run_units_sold")), 100);
    ck_assert_int_eq(json_integer_value(json_object_get(facts, "db_stock")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(facts, "redis_stock")), 0);
    ck_assert_int_gt(json_path_int(j, "run", "retries"), 0);
    json_decref(j);
    th_assert_invariants(atoll(p.sku)); /* the harness agrees */
    paths_free(&p);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_a_rate_limited_sale_counts_its_429s_and_still_proves_its_invariants)
{
    /* every buyer of the load test speaks from 127.0.0.1: one address's bucket */
    const char *env[] = {"SECKILL_RATE_ADDR_PER_S=1", "SECKILL_RATE_ADDR_BURST=50", NULL};
    struct th_daemon d;
    struct paths p;
    live_start(&d, env, &p, "limited");
    json_t *j = small_sale(&p, "100", "1", NULL);
    assert_all_passed(j); /* a 429 took nothing, and the checker knows it */
    json_t *run = json_object_get(j, "run");
    ck_assert_int_gt(json_path_int(run, "answers", "rate_limited"), 0);
    ck_assert_int_eq(json_path_int(run, "answers", "other"), 0);
    json_decref(j);
    th_assert_invariants(atoll(p.sku));
    paths_free(&p);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_admin_deltas_racing_buyers_neither_lose_nor_invent_a_unit)
{
    struct th_daemon d;
    struct paths p;
    live_start(&d, NULL, &p, "deltas");
    const char *extra[] = {"--requests",
                           "4000",
                           "--qty",
                           "1:70,2:20,3:10",
                           "--retry-share",
                           "0.1",
                           "--admin-deltas",
                           "200",
                           "--admin-every-ms",
                           "2",
                           "--admin-max-delta",
                           "10",
                           NULL};
    json_t *j = small_sale(&p, "300", "3", extra);
    assert_all_passed(j);
    json_t *admin = json_object_get(json_object_get(j, "promises"), "admin");
    long long ok = json_integer_value(json_object_get(admin, "ok"));
    long long refused = json_integer_value(json_object_get(admin, "refused"));
    ck_assert_int_gt(ok + refused, 0);
    json_t *facts = json_object_get(json_object_get(j, "invariants"), "facts");
    ck_assert_int_eq(json_integer_value(json_object_get(facts, "admin_ledger_sum")),
                     json_integer_value(json_object_get(admin, "applied_sum")));
    json_decref(j);
    paths_free(&p);
    th_daemon_stop(&d);
}
END_TEST

/* A sale whose buyers pay, cancel or walk away (a 1 s window): every check
 * passes, the lifecycle's included; then a unit returned twice, and a paid
 * order that also gave its units back, are each found. */
START_TEST(test_a_lifecycle_sale_returns_every_unit_once)
{
    struct th_daemon d;
    struct paths p;
    live_start(&d, fast_sweep, &p, "life");
    const char *extra[] = {"--payment-window", "1",   "--pay-share", "0.4",
                           "--cancel-share",   "0.3", NULL};
    json_t *j = small_sale(&p, "100", "1", extra);
    assert_all_passed(j);
    ck_assert_str_eq(check_state(j, "lc_answers"), "PASS");
    ck_assert_str_eq(check_state(j, "lc_returns"), "PASS");
    json_decref(j);
    th_daemon_stop(&d); /* nothing else writes from here on */
    th_assert_invariants(atoll(p.sku));

    /* a return row that gives one unit more than its order took */
    char sql[512];
    snprintf(sql, sizeof sql,
             "UPDATE stock_ledger SET delta = delta + 1 WHERE id = (SELECT min(id) FROM "
             "stock_ledger WHERE sku_id = %s AND kind = 'return')",
             p.sku);
    pg_exec(sql);
    ck_assert_int_eq(check_only(&p, EXIT_VIOLATION, &j), EXIT_VIOLATION);
    ck_assert_str_eq(check_state(j, "lc_returns"), "FAIL");
    json_decref(j);
    snprintf(sql, sizeof sql,
             "UPDATE stock_ledger SET delta = delta - 1 WHERE id = (SELECT min(id) FROM "
             "stock_ledger WHERE sku_id = %s AND kind = 'return')",
             p.sku);
    pg_exec(sql);
    ck_assert_int_eq(check_only(&p, EXIT_OK, &j), EXIT_OK);
    json_decref(j);

    /* an expired order that says it was paid, its return row still there */
    snprintf(sql, sizeof sql,
             "UPDATE orders SET status = 'paid', expired_at = NULL, paid_at = now(), "
             "payment_ref = 'forged', return_epoch = NULL, return_settled = NULL WHERE id = "
             "(SELECT min(id) FROM orders WHERE sku_id = %s AND status = 'expired')",
             p.sku);
    pg_exec(sql);
    ck_assert_int_eq(check_only(&p, EXIT_VIOLATION, &j), EXIT_VIOLATION);
    ck_assert_str_eq(check_state(j, "lc_returns"), "FAIL");
    json_decref(j);
    paths_free(&p);
}
END_TEST

START_TEST(test_checker_fails_on_tampered_stock_lost_and_invented_orders)
{
    struct th_daemon d;
    struct paths p;
    live_start(&d, reserved_mode, &p, "tamper");
    json_t *j = small_sale(&p, "100", "1", NULL);
    json_decref(j);
    th_daemon_stop(&d); /* nothing else writes from here on */
    char key[KEYS_MAX], sql[512];
    keys_sku(key, atoll(p.sku), KEY_STOCK);

    ck_assert_int_eq(check_only(&p, EXIT_OK, &j), EXIT_OK); /* untouched: passes */
    assert_all_passed(j);
    json_decref(j);

    /* Redis invents two units: I2 */
    redisContext *r = th_redis();
    freeReplyObject(redisCommand(r, "INCRBY %s 2", key));
    ck_assert_int_eq(check_only(&p, EXIT_VIOLATION, &j), EXIT_VIOLATION);
    ck_assert_str_eq(check_state(j, "i2_stock"), "FAIL");
    json_decref(j);
    freeReplyObject(redisCommand(r, "DECRBY %s 2", key));
    redisFree(r);

    /* the database invents a unit: I1 */
    snprintf(sql, sizeof sql, "UPDATE skus SET stock = stock + 1 WHERE id = %s", p.sku);
    pg_exec(sql);
    ck_assert_int_eq(check_only(&p, EXIT_VIOLATION, &j), EXIT_VIOLATION);
    ck_assert_str_eq(check_state(j, "i1_ledger"), "FAIL");
    ck_assert_str_eq(check_state(j, "i1_run"), "FAIL");
    ck_assert_str_eq(check_state(j, "i2_stock"), "FAIL");
    json_decref(j);
    snprintf(sql, sizeof sql, "UPDATE skus SET stock = stock - 1 WHERE id = %s", p.sku);
    pg_exec(sql);

    /* an order that got a 202 is lost: I4 */
    snprintf(sql, sizeof sql,
             "WITH o AS (SELECT min(id) AS id FROM orders WHERE sku_id = %s),"
             " l AS (DELETE FROM stock_ledger WHERE order_id = (SELECT id FROM o))"
             " DELETE FROM orders WHERE id = (SELECT id FROM o)",
             p.sku);
    pg_exec(sql);
    ck_assert_int_eq(check_only(&p, EXIT_VIOLATION, &j), EXIT_VIOLATION);
    ck_assert_str_eq(check_state(j, "i4_answered"), "FAIL");
    ck_assert_str_eq(check_state(j, "sold"), "FAIL");
    json_decref(j);

    /* an order nobody was promised appears: I4 */
    snprintf(sql, sizeof sql,
             "INSERT INTO orders (id, sku_id, user_id, qty, status, reserved_at)"
             " SELECT max(id) + 1, %s, 999999, 1, 'confirmed', now() FROM orders",
             p.sku);
    pg_exec(sql);
    ck_assert_int_eq(check_only(&p, EXIT_VIOLATION, &j), EXIT_VIOLATION);
    ck_assert_str_eq(check_state(j, "i4_rows"), "FAIL");
    ck_assert_str_eq(check_state(j, "i4_ledger"), "FAIL");
    json_decref(j);
    paths_free(&p);
}
END_TEST

/* --skus: one run buys three SKUs from three client addresses; every SKU is
 * checked, the summary adds them up, and --check-only of the range fails
 * when one of them is tampered with. */
START_TEST(test_a_multi_sku_sale_checks_every_sku)
{
    struct th_daemon d;
    struct paths p;
    live_start(&d, NULL, &p, "skus");
    json_t *j = passing_sale(&p, "--skus 3 --stock 40 --limit 1 --users 300 --concurrency 30 "
                                 "--source-addrs 3 --sku-pick round-robin --seed 11");
    long long first = json_integer_value(json_object_get(j, "sku"));
    long long last = json_integer_value(json_object_get(j, "sku_last"));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "skus")), 3);
    ck_assert_int_eq(last, first + 2); /* one after the other on a quiet service */
    ck_assert_int_eq(json_path_int(j, "config", "source_addrs"), 3);
    json_t *facts = json_object_get(json_object_get(j, "invariants"), "facts");
    ck_assert_int_eq(json_integer_value(json_object_get(facts, "run_units_sold")), 120);
    ck_assert_int_eq(json_integer_value(json_object_get(facts, "initial_stock")), 120);
    ck_assert_int_eq(json_integer_value(json_object_get(facts, "db_stock")), 0);
    json_t *run = json_object_get(j, "run");
    ck_assert_int_eq(json_path_int(run, "answers", "confirmed"), 120);
    json_decref(j);
    for (long long s = first; s <= last; s++)
        th_assert_invariants(s); /* the harness agrees, SKU by SKU */
    th_daemon_stop(&d);          /* nothing else writes from here on */

    char sku[24];
    snprintf(sku, sizeof sku, "%lld", first);
    const char *check[] = {"--check-only",    "--sku", sku,      "--skus", "3",
                           "--drain-timeout", "60",    "--json", p.json,   NULL};
    ck_assert_int_eq(run_loadtest(check, EXIT_OK), EXIT_OK);
    j = load_json(p.json);
    ck_assert(json_is_true(json_object_get(json_object_get(j, "invariants"), "ok")));
    json_decref(j);

    /* Redis invents a unit of the middle SKU: the range's check fails on it */
    char key[KEYS_MAX];
    keys_sku(key, first + 1, KEY_STOCK);
    redisContext *r = th_redis();
    freeReplyObject(redisCommand(r, "INCRBY %s 1", key));
    ck_assert_int_eq(run_loadtest(check, EXIT_VIOLATION), EXIT_VIOLATION);
    j = load_json(p.json);
    ck_assert_str_eq(check_state(j, "i2_stock"), "FAIL");
    char want[48];
    snprintf(want, sizeof want, "SKU %lld:", first + 1);
    ck_assert_msg(strncmp(check_detail(j, "i2_stock"), want, strlen(want)) == 0,
                  "the failing check does not name SKU %lld", first + 1);
    json_decref(j);
    freeReplyObject(redisCommand(r, "DECRBY %s 1", key));
    redisFree(r);
    paths_free(&p);
}
END_TEST

/* --buckets 3: the run creates a SKU over three bucket SKUs and buys it
 * while admin deltas race the buyers, and the buyers then pay, cancel or
 * walk away.  Every row is in the bucket of its buyer (user mod 3), none in
 * the parent; every bucket passes every check, and the admin ledger, whose
 * moves between buckets cancel out, holds the deltas answered 200 when
 * summed over the buckets. */
START_TEST(test_a_bucketed_sale_checks_every_bucket)
{
    struct th_daemon d;
    struct paths p;
    live_start(&d, fast_sweep, &p, "buckets");
    /* 100 units a bucket and more asked for: buckets run dry, units move between them */
    json_t *j = passing_sale(&p, "--buckets 3 --stock 300 --limit 3 --users 2000 --requests 4000 "
                                 "--qty 1:70,2:20,3:10 --concurrency 50 --retry-share 0.1 "
                                 "--admin-deltas 100 --admin-every-ms 2 --admin-max-delta 10 "
                                 "--payment-window 1 --pay-share 0.4 --cancel-share 0.3 --seed 13");
    long long parent = json_integer_value(json_object_get(j, "sku"));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "skus")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "buckets")), 3);
    json_t *ids = json_object_get(j, "bucket_skus");
    ck_assert_int_eq(json_array_size(ids), 3);
    char want[64];
    snprintf(want, sizeof want, "all 3 buckets of SKU %lld together:", parent);
    ck_assert_msg(strncmp(check_detail(j, "i1_admin"), want, strlen(want)) == 0,
                  "i1_admin is not judged on the buckets' sum: %s", check_detail(j, "i1_admin"));
    json_t *admin = json_object_get(json_object_get(j, "promises"), "admin");
    ck_assert_int_gt(json_integer_value(json_object_get(admin, "ok")) +
                         json_integer_value(json_object_get(admin, "refused")),
                     0);
    json_t *facts = json_object_get(json_object_get(j, "invariants"), "facts");
    ck_assert_int_eq(json_integer_value(json_object_get(facts, "initial_stock")), 300);
    if (json_integer_value(json_object_get(admin, "unknown")) == 0)
        ck_assert_int_eq(json_integer_value(json_object_get(facts, "admin_ledger_sum")),
                         json_integer_value(json_object_get(admin, "applied_sum")));
    ck_assert_str_eq(check_state(j, "lc_answers"), "PASS");
    th_daemon_stop(&d); /* nothing else writes from here on */

    /* the routing the checker's split relies on, as the rows show it */
    PGconn *c = th_pg();
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM orders WHERE sku_id = %lld", parent);
    ck_assert_int_eq(th_pg_int(c, sql), 0);
    snprintf(sql, sizeof sql, "SELECT stock FROM skus WHERE id = %lld", parent);
    ck_assert_int_eq(th_pg_int(c, sql), 0);
    for (size_t k = 0; k < 3; k++) {
        long long bucket = json_integer_value(json_array_get(ids, k));
        ck_assert(bucket > 0 && bucket != parent);
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM orders WHERE sku_id = %lld AND user_id %% 3 <> %zu", bucket,
                 k);
        ck_assert_int_eq(th_pg_int(c, sql), 0);
        th_assert_invariants(bucket); /* the harness agrees, bucket by bucket */
    }
    PQfinish(c);
    /* the parent checked alone would pass with nothing looked at: refused */
    char sku[24];
    snprintf(sku, sizeof sku, "%lld", parent);
    const char *alone[] = {"--check-only", "--sku", sku, "--drain-timeout", "60", NULL};
    ck_assert_int_eq(run_loadtest(alone, EXIT_ERROR), EXIT_ERROR);
    json_decref(j);
    paths_free(&p);
}
END_TEST

/* Rewrites the promise letter of order 'id' in an answers file. */
static void set_promise(const char *path, long long id, char promise)
{
    char tmp[PATH_MAX + 8], line[256], head[64];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    snprintf(head, sizeof head, "o %lld ", id);
    FILE *in = fopen(path, "r"), *out = fopen(tmp, "w");
    ck_assert(in && out);
    int found = 0;
    while (fgets(line, sizeof line, in)) {
        size_t n = strlen(line);
        if (strncmp(line, head, strlen(head)) == 0 && n >= 3 && line[n - 3] == ' ') {
            line[n - 2] = promise; /* "o ID USER QTY P\n" */
            found = 1;
        }
        fputs(line, out);
    }
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
    ck_assert_msg(found, "order %lld is not in %s", id, path);
    ck_assert_int_eq(rename(tmp, path), 0);
}

/* Redis losing a reservation before a writer took it, as after a restart
 * without its last writes: the order's row and ledger row never existed and
 * its unit is back in both stores.  A 202 may be lost that way (when the
 * scenario allowed it), a 201 never: its row was committed. */
START_TEST(test_checker_allows_lost_202s_only_when_told_and_never_a_lost_201)
{
    struct th_daemon d;
    struct paths p;
    live_start(&d, reserved_mode, &p, "lost");
    json_t *j = small_sale(&p, "100", "1", NULL);
    json_decref(j);
    th_daemon_stop(&d);
    PGconn *c = th_pg();
    char sql[512], key[KEYS_MAX];
    snprintf(sql, sizeof sql, "SELECT min(id) FROM orders WHERE sku_id = %s", p.sku);
    long long id = th_pg_int(c, sql);
    snprintf(sql, sizeof sql, "SELECT user_id FROM orders WHERE id = %lld", id);
    long long user = th_pg_int(c, sql);
    snprintf(sql, sizeof sql, "SELECT qty FROM orders WHERE id = %lld", id);
    long long qty = th_pg_int(c, sql);
    PQfinish(c);
    snprintf(sql, sizeof sql,
             "WITH l AS (DELETE FROM stock_ledger WHERE order_id = %lld),"
             " o AS (DELETE FROM orders WHERE id = %lld)"
             " UPDATE skus SET stock = stock + %lld WHERE id = %s",
             id, id, qty, p.sku);
    pg_exec(sql);
    redisContext *r = th_redis();
    keys_sku(key, atoll(p.sku), KEY_STOCK);
    freeReplyObject(redisCommand(r, "INCRBY %s %lld", key, qty));
    keys_sku(key, atoll(p.sku), KEY_BOUGHT);
    freeReplyObject(redisCommand(r, "HINCRBY %s %lld %lld", key, user, -qty));
    redisFree(r);

    /* a 202 without its row: a violation unless Redis data loss was injected */
    ck_assert_int_eq(check_only(&p, EXIT_VIOLATION, &j), EXIT_VIOLATION);
    ck_assert_str_eq(check_state(j, "i4_answered"), "FAIL");
    ck_assert_str_eq(check_state(j, "sold"), "FAIL");
    json_decref(j);
    ck_assert_int_eq(check_only_with(&p, "--allow-lost-pending", EXIT_OK, &j), EXIT_OK);
    assert_all_passed(j);
    json_t *answered =
        json_object_get(json_object_get(json_object_get(j, "invariants"), "facts"), "answered");
    ck_assert_int_eq(json_integer_value(json_object_get(answered, "lost_202")), 1);
    json_decref(j);

    /* the same order answered 201: lost whatever fault happened */
    set_promise(p.answers, id, 'c');
    ck_assert_int_eq(check_only_with(&p, "--allow-lost-pending", EXIT_VIOLATION, &j),
                     EXIT_VIOLATION);
    ck_assert_str_eq(check_state(j, "i4_answered"), "FAIL");
    ck_assert_str_eq(check_state(j, "sold"), "FAIL");
    json_decref(j);
    paths_free(&p);
}
END_TEST

START_TEST(test_bad_flags_exit_2)
{
    static const char *const bad[][7] = {
        {"--concurrency", "0", NULL},
        {"--url", "http://10.1.2.3:8080", NULL},
        {"--qty", "0-3", NULL},
        {"--retry-share", "1.5", NULL},
        {"--no-such-flag", NULL},
        {"--check-only", NULL}, /* no --sku */
        {"--load-only", NULL},  /* no --answers to judge later */
        {"--skus", "0", NULL},
        {"--skus", "10001", NULL},
        {"--skus", "2", "--admin-deltas", "3", NULL}, /* deltas are about one SKU */
        {"--sku-pick", "sideways", NULL},
        /* --buckets: 2..64, one SKU whose answers this run makes and checks itself */
        {"--buckets", "0", NULL},
        {"--buckets", "65", NULL},
        {"--buckets", "2", "--skus", "2", NULL},
        {"--buckets", "2", "--check-only", "--sku", "5", NULL},
        {"--buckets", "2", "--load-only", "--answers", "/nonexistent/answers", NULL},
        {"--buckets", "2", "--answers", "/nonexistent/answers", NULL},
        {"--buckets", "2", "--no-check", NULL},
        {"--source-addrs", "0", NULL},
        {"--source-addrs", "251", NULL},
        /* the order's life: shares need a payment window, and add up to 1 at most */
        {"--pay-share", "0.5", NULL},
        {"--cancel-share", "0.5", NULL},
        {"--payment-window", "5", "--pay-share", "0.7", "--cancel-share", "0.4", NULL},
        {"--payment-window", "2592001", NULL},
        {"--buyer-secret-file", "/nonexistent/buyer-secret", NULL},
        /* secrets never as flags: ps shows them */
        {"--token", TH_ADMIN_TOKEN, NULL},
        {"--redis-url", "redis://seckill:secret-password@127.0.0.1:6380/0", NULL},
        {"--redis-url", "redis://:secret-password@127.0.0.1:6380/0", NULL},
        {"--redis-url", "redis-sentinel://127.0.0.1:26380,10.1.2.3:26381/seckill", NULL},
        {"--pg-dsn", "host=127.0.0.1 dbname=seckill password=secret-password", NULL},
        {"--pg-dsn", "postgresql://seckill:secret-password@127.0.0.1/seckill", NULL},
        /* every host of a multi-host DSN is loopback */
        {"--pg-dsn", "host=127.0.0.1,10.1.2.3 port=5432,5433 dbname=seckill", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(run_loadtest(bad[i], EXIT_USAGE) == EXIT_USAGE, "%s was accepted", bad[i][0]);
    /* Buyers without a secret to sign their tokens cannot buy. */
    setenv("SECKILL_BUYER_TOKEN_SECRET", "", 1);
    static const char *const no_secret[] = {"--users", "3", NULL};
    ck_assert_int_eq(run_loadtest(no_secret, EXIT_USAGE), EXIT_USAGE);
    setenv("SECKILL_BUYER_TOKEN_SECRET", "too-short-a-secret", 1);
    ck_assert_int_eq(run_loadtest(no_secret, EXIT_USAGE), EXIT_USAGE);
}
END_TEST

/* Each buyer's token names that buyer and verifies under the secret; cached
 * ones are minted once, users beyond the cache are signed on demand. */
START_TEST(test_buyer_tokens_name_their_buyer)
{
    ck_assert_ptr_null(lt_buyers_new("too-short", 1, 10, 60));
    struct lt_buyers *b = lt_buyers_new(TH_BUYER_SECRET, 100, LT_BUYERS_CACHE_MAX + 10, 60);
    ck_assert_ptr_nonnull(b);
    const struct buyer_token_verifier v = {.secret = TH_BUYER_SECRET,
                                           .secret_len = strlen(TH_BUYER_SECRET),
                                           .leeway_s = 0,
                                           .max_bytes = 1024};
    const int64_t users[] = {100, 101, 100 + LT_BUYERS_CACHE_MAX - 1,
                             100 + LT_BUYERS_CACHE_MAX + 5};
    for (size_t i = 0; i < sizeof users / sizeof users[0]; i++) {
        const char *auth = lt_buyers_auth(b, users[i]);
        ck_assert_ptr_nonnull(auth);
        ck_assert_int_eq(strncmp(auth, "Bearer ", 7), 0);
        int64_t got = 0;
        ck_assert_int_eq(
            buyer_token_verify(&v, auth + 7, strlen(auth + 7), (int64_t)time(NULL), &got),
            BUYER_TOKEN_OK);
        ck_assert(got == users[i]);
    }
    ck_assert_ptr_eq(lt_buyers_auth(b, 101), lt_buyers_auth(b, 101)); /* minted once */
    lt_buyers_free(b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("loadtest");
    TCase *pure = tcase_create("histogram");
    tcase_add_test(pure, test_hist_small_values_are_exact);
    tcase_add_test(pure, test_hist_relative_error_is_bounded);
    tcase_add_test(pure, test_hist_percentiles_of_a_uniform_run);
    tcase_add_test(pure, test_hist_merge_clamp_and_empty);
    tcase_add_test(pure, test_buyer_tokens_name_their_buyer);
    suite_add_tcase(s, pure);
    TCase *live = tcase_create("live");
    tcase_set_timeout(live, 300);
    tcase_add_test(live, test_bad_flags_exit_2);
    tcase_add_test(live, test_small_flash_sale_proves_its_invariants);
    tcase_add_test(live, test_a_rate_limited_sale_counts_its_429s_and_still_proves_its_invariants);
    tcase_add_test(live, test_admin_deltas_racing_buyers_neither_lose_nor_invent_a_unit);
    tcase_add_test(live, test_checker_fails_on_tampered_stock_lost_and_invented_orders);
    tcase_add_test(live, test_a_lifecycle_sale_returns_every_unit_once);
    tcase_add_test(live, test_a_multi_sku_sale_checks_every_sku);
    tcase_add_test(live, test_a_bucketed_sale_checks_every_bucket);
    tcase_add_test(live, test_checker_allows_lost_202s_only_when_told_and_never_a_lost_201);
    suite_add_tcase(s, live);
    return s;
}

int main(void)
{
    return th_run(suite());
}
