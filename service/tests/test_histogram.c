/* metrics histograms: pure unit tests of buckets, sums and their text (no services). */
#include "core/metrics.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of one exact series in a scrape, or -1. */
static double series(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return atof(p + n + 1);
    return -1;
}

static char *render(void)
{
    size_t len;
    char *t = metrics_render(&len);
    ck_assert_uint_eq(strlen(t), len);
    return t;
}

#define H "seckill_redis_command_duration_seconds"

START_TEST(test_bounds_are_inclusive_and_shown_in_seconds)
{
    struct metrics_hist *h = metrics_hist_get(MF_REDIS_COMMAND, "command=\"edges\"");
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_eq(metrics_hist_get(MF_REDIS_COMMAND, "command=\"edges\""), h);
    metrics_hist_observe(h, 50);       /* le 50 us */
    metrics_hist_observe(h, 51);       /* le 100 us */
    metrics_hist_observe(h, -3);       /* a clock step back counts as 0 */
    metrics_hist_observe(h, 10000000); /* le 10 s */
    metrics_hist_observe(h, 10000001); /* +Inf only */
    metrics_hist_observe(NULL, 1);     /* no series: nothing */
    char *t = render();
    ck_assert_double_eq(series(t, H "_bucket{command=\"edges\",le=\"0.00005\"}"), 2);
    ck_assert_double_eq(series(t, H "_bucket{command=\"edges\",le=\"0.0001\"}"), 3);
    ck_assert_double_eq(series(t, H "_bucket{command=\"edges\",le=\"0.25\"}"), 3);
    ck_assert_double_eq(series(t, H "_bucket{command=\"edges\",le=\"2.5\"}"), 3);
    ck_assert_double_eq(series(t, H "_bucket{command=\"edges\",le=\"10\"}"), 4);
    ck_assert_double_eq(series(t, H "_bucket{command=\"edges\",le=\"+Inf\"}"), 5);
    ck_assert_double_eq(series(t, H "_count{command=\"edges\"}"), 5);
    ck_assert_double_eq_tol(series(t, H "_sum{command=\"edges\"}"), 20.000102, 1e-9);
    ck_assert_ptr_nonnull(strstr(t, "# TYPE " H " histogram\n"));
    free(t);
}
END_TEST

START_TEST(test_writer_histograms_exist_before_any_batch_and_count_entries)
{
    char *t = render();
    ck_assert_double_eq(series(t, "seckill_writer_batch_orders_count"), 0);
    ck_assert_double_eq(series(t, "seckill_writer_batch_duration_seconds_count"), 0);
    free(t);
    metrics_writer_batch(0, 7); /* started at the clock's origin: a long batch */
    t = render();
    ck_assert_double_eq(series(t, "seckill_writer_batch_orders_bucket{le=\"5\"}"), 0);
    ck_assert_double_eq(series(t, "seckill_writer_batch_orders_bucket{le=\"10\"}"), 1);
    ck_assert_double_eq(series(t, "seckill_writer_batch_orders_sum"), 7);
    ck_assert_double_eq(series(t, "seckill_writer_batch_duration_seconds_count"), 1);
    free(t);
}
END_TEST

#define THREADS 4
#define SAMPLES 100000

static void *observe_many(void *arg)
{
    for (int i = 0; i < SAMPLES; i++)
        metrics_hist_observe(arg, i % 2000);
    return NULL;
}

START_TEST(test_concurrent_samples_are_all_counted)
{
    struct metrics_hist *h = metrics_hist_get(MF_REDIS_COMMAND, "command=\"threads\"");
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, observe_many, h), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    char *t = render();
    ck_assert_double_eq(series(t, H "_count{command=\"threads\"}"), THREADS * SAMPLES);
    /* each thread: 50 rounds of 0..1999 us */
    ck_assert_double_eq_tol(series(t, H "_sum{command=\"threads\"}"),
                            THREADS * 50 * (1999.0 * 2000 / 2) / 1e6, 1e-6);
    free(t);
}
END_TEST

START_TEST(test_per_sku_gauges_follow_the_histograms_when_read)
{
    struct metrics_sku s[2] = {
        {.sku = 7,
         .stock_db = 10,
         .has_available = 1,
         .stock_available = 4,
         .has_stream = 1,
         .stream_length = 6,
         .stream_lag = 5},
        {.sku = 8, .stock_db = 3}, /* not in Redis: only the database's stock */
    };
    size_t len;
    char *t = metrics_render_skus(s, 2, NULL, 0, &len);
    ck_assert_double_eq(series(t, "seckill_sku_inflight_units{sku=\"7\"}"), 6);
    ck_assert_double_eq(series(t, "seckill_sku_stream_lag{sku=\"7\"}"), 5);
    ck_assert_double_eq(series(t, "seckill_sku_stock_db{sku=\"8\"}"), 3);
    ck_assert_double_eq(series(t, "seckill_sku_stock_available{sku=\"8\"}"), -1);
    ck_assert_double_eq(series(t, "seckill_sku_inflight_units{sku=\"8\"}"), -1);
    free(t);
    t = render();
    ck_assert_ptr_null(strstr(t, "seckill_sku_stock_db"));
    free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("histogram");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_bounds_are_inclusive_and_shown_in_seconds);
    tcase_add_test(tc, test_writer_histograms_exist_before_any_batch_and_count_entries);
    tcase_add_test(tc, test_concurrent_samples_are_all_counted);
    tcase_add_test(tc, test_per_sku_gauges_follow_the_histograms_when_read);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
