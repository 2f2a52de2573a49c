/*
 * The two listeners of the daemon, asked of the real binary against the real
 * Redis and PostgreSQL of the test stack: the public one serves the buyer
 * API and /healthz only; the internal one (metrics_addr) serves /metrics,
 * /healthz and the admin API; a scrape storm on it neither keeps health and
 * admin requests from being answered nor reads the stores more often than
 * metrics_refresh_ms allows.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"

#define CT_JSON "Content-Type: application/json\r\n"
#define SKU_BODY "{\"id\":1,\"name\":\"one\",\"stock\":5,\"per_user_limit\":1}"
#define AUTH "Authorization: Bearer " TH_ADMIN_TOKEN "\r\n"

/* The storm: scrapers, each scraping on fresh connections for STORM_MS. */
#define STORM_SCRAPERS 24
#define STORM_MS 3000
#define STORM_SKUS 200
#define STORM_REFRESH_MS 250

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void expect_status(const struct th_response *r, int want, const char *what)
{
    ck_assert_msg(r->status == want, "%s: want %d, got %d (%s)", what, want, r->status, r->body);
}

START_TEST(test_public_listener_serves_neither_metrics_nor_admin)
{
    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    struct th_response r;
    ck_assert_int_eq(th_http_exact(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    expect_status(&r, 404, "GET /metrics on the public listener");
    ck_assert_ptr_nonnull(strstr(r.body, "not_found"));
    /* not even a 401: the admin area does not exist there, token or not */
    ck_assert_int_eq(th_http_exact(d.port, "POST", "/admin/v1/skus", AUTH CT_JSON, SKU_BODY, &r),
                     0);
    expect_status(&r, 404, "the admin API with its token on the public listener");
    ck_assert_int_eq(th_http_exact(d.port, "GET", "/admin/v1/skus/1", NULL, NULL, &r), 0);
    expect_status(&r, 404, "the admin API without a token on the public listener");
    ck_assert_int_eq(th_http_exact(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    expect_status(&r, 200, "GET /healthz on the public listener");

    /* the internal listener: metrics, health, admin; no buyer API */
    ck_assert_int_eq(th_http_exact(d.metrics_port, "GET", "/metrics", NULL, NULL, &r), 0);
    expect_status(&r, 200, "GET /metrics on the internal listener");
    ck_assert_ptr_null(strcasestr(r.headers, "Content-Encoding"));
    ck_assert_ptr_nonnull(strstr(r.body, "seckill_metrics_refreshes_total"));
    /* as Prometheus asks: the same text, gzip-compressed once per refresh */
    ck_assert_int_eq(th_http_exact(d.metrics_port, "GET", "/metrics",
                                   "Accept-Encoding: gzip, deflate\r\n", NULL, &r),
                     0);
    expect_status(&r, 200, "GET /metrics accepting gzip");
    ck_assert_ptr_nonnull(strcasestr(r.headers, "Content-Encoding: gzip\r\n"));
    ck_assert_msg((unsigned char)r.body[0] == 0x1f && (unsigned char)r.body[1] == 0x8b,
                  "not a gzip stream");
    ck_assert_int_eq(th_http_exact(d.metrics_port, "GET", "/metrics",
                                   "Accept-Encoding: gzip;q=0, identity\r\n", NULL, &r),
                     0);
    ck_assert_ptr_null(strcasestr(r.headers, "Content-Encoding"));
    ck_assert_int_eq(th_http_exact(d.metrics_port, "GET", "/healthz", NULL, NULL, &r), 0);
    expect_status(&r, 200, "GET /healthz on the internal listener");
    ck_assert_int_eq(
        th_http_exact(d.metrics_port, "POST", "/admin/v1/skus", AUTH CT_JSON, SKU_BODY, &r), 0);
    expect_status(&r, 201, "createSku on the internal listener");
    ck_assert_int_eq(th_http_exact(d.metrics_port, "GET", "/admin/v1/skus/1", NULL, NULL, &r), 0);
    expect_status(&r, 401, "the admin API without a token on the internal listener");
    ck_assert_int_eq(th_http_exact(d.metrics_port, "GET", "/api/v1/skus/1", NULL, NULL, &r), 0);
    expect_status(&r, 404, "the buyer API on the internal listener");
    ck_assert_int_eq(th_http_exact(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &r), 0);
    expect_status(&r, 200, "the buyer API on the public listener");
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_admin_on_public_puts_the_admin_api_back_but_not_metrics)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_ADMIN_ON_PUBLIC=1", NULL};
    th_daemon_start(&d, env);
    struct th_response r;
    ck_assert_int_eq(th_http_exact(d.port, "POST", "/admin/v1/skus", AUTH CT_JSON, SKU_BODY, &r),
                     0);
    expect_status(&r, 201, "createSku on the public listener with admin_on_public");
    ck_assert_int_eq(th_http_exact(d.port, "GET", "/admin/v1/skus/1", NULL, NULL, &r), 0);
    expect_status(&r, 401, "the admin API without a token, admin_on_public");
    ck_assert_int_eq(th_http_exact(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    expect_status(&r, 404, "GET /metrics on the public listener with admin_on_public");
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_refuses_to_start_without_a_metrics_addr)
{
    /* an empty one: no place for /metrics and the admin API */
    const char *env[] = {"SECKILL_METRICS_ADDR=", NULL};
    int st = th_daemon_start_fails(env);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "empty metrics_addr: status %d", st);
}
END_TEST

struct scraper {
    pthread_t tid;
    int port;
    long long until_ms;
    int scrapes, not_200;
};

static void *scrape_storm(void *arg)
{
    struct scraper *s = arg;
    while (mono_ms() < s->until_ms) {
        struct th_response *r = malloc(sizeof *r);
        if (!r)
            abort();
        if (th_http_exact(s->port, "GET", "/metrics", NULL, NULL, r) != 0 || r->status != 200)
            s->not_200++;
        s->scrapes++;
        free(r);
    }
    return NULL;
}

START_TEST(test_scrape_storm_leaves_health_and_admin_answered_and_reads_rarely)
{
    th_reset();
    struct th_daemon d;
    char refresh[64];
    snprintf(refresh, sizeof refresh, "SECKILL_METRICS_REFRESH_MS=%d", STORM_REFRESH_MS);
    const char *env[] = {refresh, NULL};
    th_daemon_start(&d, env);
    /* A per-SKU block worth caching: each read is a query and 3 commands per SKU. */
    for (int i = 1; i <= STORM_SKUS; i++)
        th_create_sku(d.port, i, 100, 1);

    long long t0 = mono_ms();
    long long before = th_metric(d.port, "seckill_metrics_refreshes_total");
    static struct scraper sc[STORM_SCRAPERS];
    for (int i = 0; i < STORM_SCRAPERS; i++) {
        sc[i] = (struct scraper){.port = d.metrics_port, .until_ms = mono_ms() + STORM_MS};
        ck_assert_int_eq(pthread_create(&sc[i].tid, NULL, scrape_storm, &sc[i]), 0);
    }
    /* Meanwhile the load balancer's checks on both listeners and an operator's
     * admin reads: every one answered 200. */
    int checks = 0, admins = 0;
    while (mono_ms() < sc[0].until_ms) {
        struct th_response r;
        ck_assert_int_eq(th_http_exact(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
        expect_status(&r, 200, "public /healthz during the storm");
        ck_assert_int_eq(th_http_exact(d.metrics_port, "GET", "/healthz", NULL, NULL, &r), 0);
        expect_status(&r, 200, "internal /healthz during the storm");
        checks += 2;
        char path[64];
        snprintf(path, sizeof path, "/admin/v1/skus/%d", 1 + admins % STORM_SKUS);
        ck_assert_int_eq(th_admin(d.port, "GET", path, NULL, &r), 0);
        expect_status(&r, 200, "getSkuAdmin during the storm");
        admins++;
    }
    int scrapes = 0, bad = 0;
    for (int i = 0; i < STORM_SCRAPERS; i++) {
        pthread_join(sc[i].tid, NULL);
        scrapes += sc[i].scrapes;
        bad += sc[i].not_200;
    }
    long long after = th_metric(d.port, "seckill_metrics_refreshes_total");
    long long elapsed = mono_ms() - t0;
    long long reads = after - before, bound = elapsed / STORM_REFRESH_MS + 1;
    printf("storm: %d scrapes (%d not 200), %d health checks, %d admin reads; %lld reads of the "
           "stores in %lld ms (bound %lld)\n",
           scrapes, bad, checks, admins, reads, elapsed, bound);
    ck_assert_msg(bad == 0, "%d of %d scrapes were not answered 200", bad, scrapes);
    ck_assert_msg(scrapes > STORM_SCRAPERS, "the storm did not scrape (%d)", scrapes);
    ck_assert_msg(reads >= 1, "no read of the stores in %lld ms of scrapes", elapsed);
    ck_assert_msg(reads <= bound,
                  "%lld reads of the per-SKU gauges in %lld ms: more than one per "
                  "metrics_refresh_ms (%d ms) allows (%lld)",
                  reads, elapsed, STORM_REFRESH_MS, bound);
    th_daemon_stop(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("internal_listener");
    TCase *tc = tcase_create("listeners");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_public_listener_serves_neither_metrics_nor_admin);
    tcase_add_test(tc, test_admin_on_public_puts_the_admin_api_back_but_not_metrics);
    tcase_add_test(tc, test_refuses_to_start_without_a_metrics_addr);
    tcase_add_test(tc, test_scrape_storm_leaves_health_and_admin_answered_and_reads_rarely);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
