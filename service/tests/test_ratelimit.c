/* ratelimit: pure unit tests with an injected clock, no services needed. */
#include "core/ratelimit.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>

#define SEC RATELIMIT_US_PER_S
#define T0 (INT64_C(1000) * SEC) /* any monotonic instant */

START_TEST(test_a_full_bucket_gives_its_burst_then_refuses)
{
    struct ratelimit *rl = ratelimit_new(SEC, 3, 64, 1); /* 1 per second, burst 3 */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ratelimit_take(rl, "10.0.0.1", T0), 0);
    /* empty: the next token comes one interval after the first was taken */
    ck_assert_int_eq(ratelimit_take(rl, "10.0.0.1", T0), SEC);
    ck_assert_int_eq(ratelimit_take(rl, "10.0.0.1", T0 + SEC / 4), SEC * 3 / 4);
    /* a refusal took nothing: the wait keeps shrinking with time alone */
    ck_assert_int_eq(ratelimit_wait(rl, "10.0.0.1", T0 + SEC / 2), SEC / 2);
    /* another key has its own bucket */
    ck_assert_int_eq(ratelimit_take(rl, "10.0.0.2", T0), 0);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_refill_is_one_token_per_interval_up_to_the_burst)
{
    struct ratelimit *rl = ratelimit_new(SEC / 10, 5, 64, 2); /* 10 per second, burst 5 */
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0);
    ck_assert_int_gt(ratelimit_take(rl, "a", T0), 0);
    /* 0.25 s later: two tokens (0.1 s each), not three */
    ck_assert_int_eq(ratelimit_take(rl, "a", T0 + SEC / 4), 0);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0 + SEC / 4), 0);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0 + SEC / 4), SEC / 20);
    /* an hour idle refills to the burst, never beyond it */
    int64_t later = T0 + 3600 * SEC;
    ck_assert_int_eq(ratelimit_wait(rl, "a", later), 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ratelimit_take(rl, "a", later), 0);
    ck_assert_int_eq(ratelimit_take(rl, "a", later), SEC / 10);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_wait_takes_nothing_and_remembers_nothing)
{
    struct ratelimit *rl = ratelimit_new(SEC, 1, 8, 3);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(ratelimit_wait(rl, "never-taken", T0), 0);
    ck_assert_uint_eq(ratelimit_size(rl), 0);
    ck_assert_int_eq(ratelimit_take(rl, "never-taken", T0), 0);
    ck_assert_uint_eq(ratelimit_size(rl), 1);
    ck_assert_int_eq(ratelimit_wait(rl, "never-taken", T0), SEC);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_a_lowered_burst_cuts_what_a_bucket_holds)
{
    struct ratelimit *rl = ratelimit_new(SEC, 10, 64, 7); /* 1 per second, burst 10 */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0); /* "a" holds 7 */
    ratelimit_set_rate(rl, SEC, 2, T0);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0), SEC);
    /* a bucket never used is full: the new burst, not the old one */
    ck_assert_int_eq(ratelimit_take(rl, "b", T0), 0);
    ck_assert_int_eq(ratelimit_take(rl, "b", T0), 0);
    ck_assert_int_gt(ratelimit_take(rl, "b", T0), 0);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_a_raised_burst_is_earned_at_the_rate_not_handed_out)
{
    struct ratelimit *rl = ratelimit_new(SEC, 1, 64, 8);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0); /* empty */
    ratelimit_set_rate(rl, SEC, 100, T0);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0), SEC);
    for (int i = 0; i < 3; i++) /* three seconds later: three tokens */
        ck_assert_int_eq(ratelimit_take(rl, "a", T0 + 3 * SEC), 0);
    ck_assert_int_gt(ratelimit_take(rl, "a", T0 + 3 * SEC), 0);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_a_new_rate_refills_an_empty_bucket_at_that_rate)
{
    struct ratelimit *rl = ratelimit_new(SEC, 2, 64, 9);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0 + SEC / 2), 0); /* holds half a token */
    ratelimit_set_rate(rl, SEC / 10, 2, T0 + SEC / 2);
    /* half a token at a tenth of a second each: a twentieth to wait */
    ck_assert_int_eq(ratelimit_take(rl, "a", T0 + SEC / 2), SEC / 20);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0 + SEC / 2 + SEC / 20), 0);
    /* and slower again: the bucket is empty, one token is a whole second */
    ratelimit_set_rate(rl, SEC, 2, T0 + SEC / 2 + SEC / 20);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0 + SEC / 2 + SEC / 20), SEC);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_a_limit_turned_off_limits_nothing_and_on_again_starts_full)
{
    struct ratelimit *rl = ratelimit_new(SEC, 1, 64, 10);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0);
    ck_assert_int_gt(ratelimit_take(rl, "a", T0), 0);
    ratelimit_set_rate(rl, 0, 0, T0);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0);
    ck_assert_uint_eq(ratelimit_size(rl), 0);
    ratelimit_set_rate(rl, SEC, 3, T0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ratelimit_take(rl, "a", T0), 0);
    ck_assert_int_eq(ratelimit_take(rl, "a", T0), SEC);
    ratelimit_set_rate(NULL, SEC, 3, T0); /* no table: nothing */
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_memory_is_bounded_by_the_table)
{
    struct ratelimit *rl = ratelimit_new(SEC, 2, 100, 4);
    size_t cap = ratelimit_capacity(rl);
    ck_assert_uint_ge(cap, 100);
    ck_assert_uint_lt(cap, 100 + RATELIMIT_WAYS);
    char key[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof key, "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        ck_assert_int_eq(ratelimit_take(rl, key, T0), 0); /* a new key always has its burst */
    }
    ck_assert_uint_le(ratelimit_size(rl), cap);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_a_full_bucket_is_forgotten_before_a_used_one)
{
    /* One set only: eight slots. */
    struct ratelimit *rl = ratelimit_new(SEC, 2, RATELIMIT_WAYS, 5);
    ck_assert_uint_eq(ratelimit_capacity(rl), RATELIMIT_WAYS);
    /* "hot" is emptied; seven others take one token each a little later */
    ck_assert_int_eq(ratelimit_take(rl, "hot", T0 + 10 * SEC), 0);
    ck_assert_int_eq(ratelimit_take(rl, "hot", T0 + 10 * SEC), 0);
    char key[16];
    for (int i = 0; i < RATELIMIT_WAYS - 1; i++) {
        snprintf(key, sizeof key, "k%d", i);
        ck_assert_int_eq(ratelimit_take(rl, key, T0), 0);
    }
    /* At T0 + 10 s the seven are full again and "hot" is not: newcomers
     * replace full buckets, so "hot" stays empty. */
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof key, "new%d", i);
        ck_assert_int_eq(ratelimit_take(rl, key, T0 + 10 * SEC), 0);
    }
    ck_assert_int_gt(ratelimit_take(rl, "hot", T0 + 10 * SEC), 0);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_when_none_is_full_the_closest_to_full_is_forgotten)
{
    struct ratelimit *rl = ratelimit_new(SEC, 1, RATELIMIT_WAYS, 6);
    char key[16];
    /* slot i is full again at T0 + (i + 1) s */
    for (int i = 0; i < RATELIMIT_WAYS; i++) {
        snprintf(key, sizeof key, "k%d", i);
        ck_assert_int_eq(ratelimit_take(rl, key, T0 + i * SEC), 0);
    }
    int64_t now = T0 + SEC / 2; /* none is full; k0 is the closest to full */
    ck_assert_int_eq(ratelimit_take(rl, "newcomer", now), 0);
    ck_assert_int_gt(ratelimit_take(rl, "k7", now), 0); /* the farthest: remembered */
    ck_assert_int_eq(ratelimit_take(rl, "k0", now), 0); /* forgotten: full again */
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_no_limit_is_a_null_table)
{
    ck_assert_ptr_null(ratelimit_new(0, 10, 64, 7));
    ck_assert_ptr_null(ratelimit_new(SEC, 0, 64, 7));
    ck_assert_int_eq(ratelimit_take(NULL, "x", T0), 0);
    ck_assert_int_eq(ratelimit_wait(NULL, "x", T0), 0);
    ck_assert_uint_eq(ratelimit_capacity(NULL), 0);
    ratelimit_free(NULL);
}
END_TEST

START_TEST(test_long_keys_share_their_prefix_bucket)
{
    struct ratelimit *rl = ratelimit_new(SEC, 1, 64, 8);
    char a[RATELIMIT_KEY_MAX + 8], b[RATELIMIT_KEY_MAX + 8];
    snprintf(a, sizeof a, "%0*d1", RATELIMIT_KEY_MAX, 0);
    snprintf(b, sizeof b, "%0*d2", RATELIMIT_KEY_MAX, 0);
    ck_assert_int_eq(ratelimit_take(rl, a, T0), 0);
    ck_assert_int_gt(ratelimit_take(rl, b, T0), 0);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_retry_after_is_whole_seconds_rounded_up_at_least_one)
{
    ck_assert_int_eq(ratelimit_retry_after_s(0), 1);
    ck_assert_int_eq(ratelimit_retry_after_s(1), 1);
    ck_assert_int_eq(ratelimit_retry_after_s(SEC), 1);
    ck_assert_int_eq(ratelimit_retry_after_s(SEC + 1), 2);
    ck_assert_int_eq(ratelimit_retry_after_s(60 * SEC), 60);
}
END_TEST

/* Threads hammering one key never get more than the burst between them. */
struct hammer {
    struct ratelimit *rl;
    int taken;
};

static void *hammer_run(void *arg)
{
    struct hammer *h = arg;
    for (int i = 0; i < 10000; i++)
        h->taken += ratelimit_take(h->rl, "shared", T0) == 0;
    return NULL;
}

START_TEST(test_threads_share_one_bucket_exactly)
{
    struct ratelimit *rl = ratelimit_new(SEC, 50, 1024, 9);
    struct hammer h[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (struct hammer){.rl = rl};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hammer_run, &h[i]), 0);
    }
    int taken = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        taken += h[i].taken;
    }
    ck_assert_int_eq(taken, 50);
    ratelimit_free(rl);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ratelimit");
    TCase *tc = tcase_create("ratelimit");
    tcase_add_test(tc, test_a_full_bucket_gives_its_burst_then_refuses);
    tcase_add_test(tc, test_refill_is_one_token_per_interval_up_to_the_burst);
    tcase_add_test(tc, test_wait_takes_nothing_and_remembers_nothing);
    tcase_add_test(tc, test_memory_is_bounded_by_the_table);
    tcase_add_test(tc, test_a_full_bucket_is_forgotten_before_a_used_one);
    tcase_add_test(tc, test_when_none_is_full_the_closest_to_full_is_forgotten);
    tcase_add_test(tc, test_no_limit_is_a_null_table);
    tcase_add_test(tc, test_long_keys_share_their_prefix_bucket);
    tcase_add_test(tc, test_retry_after_is_whole_seconds_rounded_up_at_least_one);
    tcase_add_test(tc, test_threads_share_one_bucket_exactly);
    tcase_add_test(tc, test_a_lowered_burst_cuts_what_a_bucket_holds);
    tcase_add_test(tc, test_a_raised_burst_is_earned_at_the_rate_not_handed_out);
    tcase_add_test(tc, test_a_new_rate_refills_an_empty_bucket_at_that_rate);
    tcase_add_test(tc, test_a_limit_turned_off_limits_nothing_and_on_again_starts_full);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
