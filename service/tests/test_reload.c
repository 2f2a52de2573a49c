/*
 * Reloading settings without a restart (SIGHUP), asked of the real daemon
 * against the real Redis and PostgreSQL: a rate limit lowered and raised
 * again under load, a bad file refused whole, a change that needs a restart
 * named and not applied, the log level.
 *
 * The daemon reads a config file of the test's (SECKILL_CONFIG); the
 * harness's environment entries for the settings changed here are removed,
 * since the environment beats the file.  A reload is known to be done when
 * seckill_config_reloads_total counts it, so no assertion waits on time;
 * where requests pass a lowered limit, the bound on them grows with the time
 * the test took (one token a second).
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "harness.h"

#define LOAD_THREADS 4
#define WAIT_MS 60000 /* the longest wait for a count, under sanitizers too */
#define POLL_MS 20
#define RELOADS_OK "seckill_config_reloads_total{result=\"ok\"}"
#define RELOADS_REFUSED "seckill_config_reloads_total{result=\"refused\"}"
/* Limits no test's load reaches, and one a second. */
#define ADDR_HIGH "rate_addr_per_s = 1000000\nrate_addr_burst = 10000000\n"
#define ADDR_LOW "rate_addr_per_s = 1\nrate_addr_burst = 1\n"
#define BUYER_HIGH "rate_buyer_orders_per_min = 60000000\nrate_buyer_orders_burst = 1000000\n"
#define BUYER_LOW "rate_buyer_orders_per_min = 60\nrate_buyer_orders_burst = 1\n"

/* ---- a config file, the daemon's log ------------------------------------ */

static char cfg_path[64];

static void write_cfg(const char *text)
{
    FILE *f = fopen(cfg_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static char log_path[64];
static int saved_stderr = -1;

/* The daemon inherits this process's stderr: a file of the test's from here
 * until log_end(). */
static void log_begin(void)
{
    snprintf(log_path, sizeof log_path, "/tmp/seckill-test-reload-log-XXXXXX");
    int fd = mkstemp(log_path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    saved_stderr = dup(2);
    ck_assert_int_ge(saved_stderr, 0);
    ck_assert_int_ge(dup2(fd, 2), 0);
    close(fd);
}

static void log_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    saved_stderr = -1;
}

/* Lines of the daemon's log holding 'text'; the last one into 'last'. */
static int log_lines(const char *text, char *last, size_t cap)
{
    FILE *f = fopen(log_path, "r");
    ck_assert_ptr_nonnull(f);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, text)) {
            n++;
            if (last)
                snprintf(last, cap, "%s", line);
        }
    fclose(f);
    return n;
}

/* Starts the daemon on cfg_path with 'text' in it, the harness's own values
 * of 'unset' (NULL-terminated environment names) removed. */
static void start(struct th_daemon *d, const char *text, const char *const *unset)
{
    snprintf(cfg_path, sizeof cfg_path, "/tmp/seckill-test-reload-cfg-XXXXXX");
    int fd = mkstemp(cfg_path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_cfg(text);
    static char config_env[96];
    snprintf(config_env, sizeof config_env, "SECKILL_CONFIG=%s", cfg_path);
    const char *env[8] = {config_env};
    size_t n = 1;
    for (size_t i = 0; unset && unset[i] && n + 1 < sizeof env / sizeof env[0]; i++)
        env[n++] = unset[i]; /* glibc's putenv("NAME") removes NAME */
    env[n] = NULL;
    log_begin();
    th_daemon_start(d, env);
}

static void stop(struct th_daemon *d)
{
    ck_assert_int_eq(th_daemon_stop(d), 0);
    log_end();
    unlink(cfg_path); /* may be gone already: a test removes it */
    unlink(log_path);
}

/* Waits until the daemon's counter 'sample' reaches want (bounded). */
static void wait_metric(const struct th_daemon *d, const char *sample, long long want)
{
    for (int waited = 0; waited < WAIT_MS; waited += POLL_MS) {
        if (th_metric(d->port, sample) >= want)
            return;
        th_sleep_ms(POLL_MS);
    }
    ck_abort_msg("%s did not reach %lld", sample, want);
}

/* Rewrites the file with 'text', signals a reload, waits until it counted
 * under 'sample' (the want'th). */
static void reload(const struct th_daemon *d, const char *text, const char *sample, long long want)
{
    if (text)
        write_cfg(text);
    ck_assert_int_eq(kill(d->pid, SIGHUP), 0);
    wait_metric(d, sample, want);
}

/* ---- load from a few client threads, counted per phase ------------------ */

/* The phases of a load: requests sent while a reload is in flight (SWITCH)
 * are not judged, as either limit may have answered them. */
enum phase { P_HIGH, P_SWITCH, P_LOW, P_SWITCH_BACK, P_HIGH_AGAIN, P_COUNT };

struct load {
    int port;
    int64_t sku; /* 0: lookups under the address limit; else orders of this SKU */
    atomic_int phase;
    atomic_int stop;
    atomic_long answered[P_COUNT], limited[P_COUNT];
};

struct load_thread {
    struct load *l;
    int64_t user;
};

static int one_request(const struct load *l, int64_t user)
{
    struct th_response r;
    if (l->sku)
        return th_order(l->port, l->sku, user, 1, NULL, &r);
    char auth[TH_BUYER_AUTH_MAX];
    ck_assert_int_eq(th_http(l->port, "GET", "/api/v1/orders/424242",
                             th_buyer_auth(user, auth, sizeof auth), NULL, &r),
                     0);
    return r.status;
}

static void *load_run(void *arg)
{
    const struct load_thread *t = arg;
    struct load *l = t->l;
    while (!atomic_load(&l->stop)) {
        int p = atomic_load(&l->phase);
        int status = one_request(l, t->user);
        if (atomic_load(&l->phase) != p)
            continue; /* straddled a phase change: either limit may have answered */
        ck_assert_msg(status == 429 || (l->sku ? status == 201 || status == 202 : status == 404),
                      "status %d", status);
        atomic_fetch_add(&l->answered[p], 1);
        if (status == 429)
            atomic_fetch_add(&l->limited[p], 1);
    }
    return NULL;
}

/* Waits until phase p has 'want' judged answers (bounded). */
static void wait_answers(struct load *l, int p, long want)
{
    for (int waited = 0; atomic_load(&l->answered[p]) < want; waited += POLL_MS) {
        ck_assert_msg(waited < WAIT_MS, "phase %d: %ld of %ld answers", p,
                      atomic_load(&l->answered[p]), want);
        th_sleep_ms(POLL_MS);
    }
}

/* Under load from LOAD_THREADS clients (each its own buyer): the limit is
 * high, then the file lowers it and SIGHUP, then raises it again; 429s
 * appear only while it is low, and no more passed it than it allows. */
static void lower_then_raise(const struct th_daemon *d, struct load *l, const char *high,
                             const char *low)
{
    pthread_t tid[LOAD_THREADS];
    struct load_thread t[LOAD_THREADS];
    for (int i = 0; i < LOAD_THREADS; i++) {
        t[i] = (struct load_thread){.l = l, .user = 100 + i};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, load_run, &t[i]), 0);
    }
    wait_answers(l, P_HIGH, 200);
    atomic_store(&l->phase, P_SWITCH);
    reload(d, low, RELOADS_OK, 1);
    int64_t low_from = clock_mono_ms();
    atomic_store(&l->phase, P_LOW);
    wait_answers(l, P_LOW, 100);
    atomic_store(&l->phase, P_SWITCH_BACK);
    int64_t low_s = (clock_mono_ms() - low_from) / 1000 + 1;
    reload(d, high, RELOADS_OK, 2);
    atomic_store(&l->phase, P_HIGH_AGAIN);
    wait_answers(l, P_HIGH_AGAIN, 200);
    atomic_store(&l->stop, 1);
    for (int i = 0; i < LOAD_THREADS; i++)
        pthread_join(tid[i], NULL);

    ck_assert_int_eq(atomic_load(&l->limited[P_HIGH]), 0);
    /* One token a second per bucket (a client address, or each buyer on the
     * SKU): at most the burst and a token per second passed each bucket. */
    long buckets = l->sku ? LOAD_THREADS : 1;
    long passed = atomic_load(&l->answered[P_LOW]) - atomic_load(&l->limited[P_LOW]);
    ck_assert_msg(passed <= buckets * (1 + low_s), "%ld passed the lowered limit in %lld s", passed,
                  (long long)low_s);
    ck_assert_int_gt(atomic_load(&l->limited[P_LOW]), 0);
    ck_assert_int_eq(atomic_load(&l->limited[P_HIGH_AGAIN]), 0);
}

/* ---- the tests ---------------------------------------------------------- */

START_TEST(test_lowering_the_address_limit_under_load_takes_effect_and_raising_it_lifts_it)
{
    struct th_daemon d;
    const char *const unset[] = {"SECKILL_RATE_ADDR_PER_S", NULL};
    start(&d, ADDR_HIGH, unset);
    static struct load l;
    l.port = d.port;
    long long before = th_metric(d.port, "seckill_rate_limited_total{scope=\"addr\"}");
    lower_then_raise(&d, &l, ADDR_HIGH, ADDR_LOW);
    ck_assert_int_gt(th_metric(d.port, "seckill_rate_limited_total{scope=\"addr\"}"), before);
    ck_assert_int_eq(th_metric(d.port, RELOADS_REFUSED), 0);
    ck_assert_int_gt(th_metric(d.port, "seckill_config_last_reload_success_timestamp_seconds"), 0);
    stop(&d);
}
END_TEST

START_TEST(test_lowering_the_buyer_order_rate_mid_sale_takes_effect_and_raising_it_lifts_it)
{
    struct th_daemon d;
    const char *const unset[] = {"SECKILL_RATE_BUYER_ORDERS_PER_MIN", NULL};
    th_reset();
    start(&d, BUYER_HIGH, unset);
    th_create_sku(d.port, 61, 1000000, 1000000);
    static struct load l;
    l.port = d.port;
    l.sku = 61;
    lower_then_raise(&d, &l, BUYER_HIGH, BUYER_LOW);
    ck_assert_int_gt(th_metric(d.port, "seckill_rate_limited_total{scope=\"buyer\"}"), 0);
    stop(&d);
}
END_TEST

/* The lookups answered 429 among n sent one after another, and the bound on
 * those that passed a one-a-second limit of burst 1 in that time. */
static void assert_still_limited(const struct th_daemon *d, int n)
{
    int64_t from = clock_mono_ms();
    int limited = 0;
    char auth[TH_BUYER_AUTH_MAX];
    for (int i = 0; i < n; i++) {
        struct th_response r;
        ck_assert_int_eq(th_http(d->port, "GET", "/api/v1/orders/424242",
                                 th_buyer_auth(1, auth, sizeof auth), NULL, &r),
                         0);
        limited += r.status == 429;
    }
    int64_t took_s = (clock_mono_ms() - from) / 1000 + 1;
    ck_assert_msg(n - limited <= 1 + took_s, "%d of %d passed in %lld s", n - limited, n,
                  (long long)took_s);
}

START_TEST(test_a_bad_file_is_refused_whole_and_the_running_limit_stays)
{
    struct th_daemon d;
    const char *const unset[] = {"SECKILL_RATE_ADDR_PER_S", NULL};
    start(&d, ADDR_LOW, unset);
    /* Each refused whole: a good line before the bad one is not applied. */
    reload(&d, ADDR_HIGH "no_such_setting = 1\n", RELOADS_REFUSED, 1);
    reload(&d, "rate_addr_per_s = 1000000\nrate_addr_burst = -5\n", RELOADS_REFUSED, 2);
    /* what would run must pass the checks: a wait beyond the deadline */
    reload(&d, ADDR_HIGH "order_ack_wait_ms = 60000\n", RELOADS_REFUSED, 3);
    ck_assert_int_eq(unlink(cfg_path), 0);
    reload(&d, NULL, RELOADS_REFUSED, 4); /* unreadable */
    assert_still_limited(&d, 20);
    ck_assert_int_eq(th_metric(d.port, RELOADS_OK), 0);
    char last[2048];
    ck_assert_int_eq(log_lines("config reload refused", last, sizeof last), 4);
    ck_assert_msg(strstr(last, "ERROR") && strstr(last, "cannot open config file"), "%s", last);
    ck_assert_int_eq(log_lines("config reloaded", NULL, 0), 0);
    /* the file back, good: applied */
    reload(&d, ADDR_HIGH, RELOADS_OK, 1);
    stop(&d);
}
END_TEST

START_TEST(test_a_restart_only_change_is_named_not_applied_and_the_log_level_takes_effect)
{
    struct th_daemon d;
    const char *const unset[] = {"SECKILL_LOG_LEVEL", NULL};
    th_reset();
    start(&d, "log_level = warn\n", unset);
    th_create_sku(d.port, 62, 100, 10);
    /* at warn, the reload's info line is not written */
    reload(&d, "log_level = warn\nsold_out_flag_ms = 20\n", RELOADS_OK, 1);
    ck_assert_int_eq(log_lines("config reloaded", NULL, 0), 0);
    reload(&d, "log_level = info\nsold_out_flag_ms = 20\nmax_body_bytes = 64\n", RELOADS_OK, 2);
    char last[2048];
    ck_assert_int_eq(log_lines("config reloaded", last, sizeof last), 1);
    ck_assert_msg(strstr(last, "INFO config reloaded: changed log_level=warn->info; needs "
                               "restart: max_body_bytes\n"),
                  "%s", last);
    /* max_body_bytes is still 4096: a 100-byte order is taken */
    char auth[TH_BUYER_AUTH_MAX], headers[TH_BUYER_AUTH_MAX + 64];
    snprintf(headers, sizeof headers, "Content-Type: application/json\r\n%s",
             th_buyer_auth(7, auth, sizeof auth));
    char body[128];
    snprintf(body, sizeof body, "{\"qty\":1,%*s\"user_id\":7}", 80, "");
    struct th_response r;
    ck_assert_int_eq(th_http(d.port, "POST", "/api/v1/skus/62/orders", headers, body, &r), 0);
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.body);
    /* back to error: the next reload's line is not written */
    reload(&d, "log_level = error\nmax_body_bytes = 64\n", RELOADS_OK, 3);
    ck_assert_int_eq(log_lines("config reloaded", NULL, 0), 1);
    stop(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reload");
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc,
                   test_lowering_the_address_limit_under_load_takes_effect_and_raising_it_lifts_it);
    tcase_add_test(
        tc, test_lowering_the_buyer_order_rate_mid_sale_takes_effect_and_raising_it_lifts_it);
    tcase_add_test(tc, test_a_bad_file_is_refused_whole_and_the_running_limit_stays);
    tcase_add_test(tc,
                   test_a_restart_only_change_is_named_not_applied_and_the_log_level_takes_effect);
    suite_add_tcase(s, tc);
    return th_run(s);
}
