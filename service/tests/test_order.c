/* The order module's pure parts: decision messages and what a decision is for. */
#include <check.h>
#include <string.h>

#include "order/order.h"

START_TEST(test_decisions_round_trip_through_a_message)
{
    struct order_decision in[3] = {
        {.order_id = 1073741825, .entry = "1732371234567-0", .status = ORDER_CONFIRMED},
        {.order_id = 1073741826,
         .entry = "1732371234567-1",
         .status = ORDER_REJECTED,
         .reason = ORDER_REASON_NO_STOCK},
        {.order_id = 9007199254740991LL,
         .entry = "",
         .status = ORDER_REJECTED,
         .reason = ORDER_REASON_ID_CONFLICT},
    };
    char msg[512];
    size_t len = 0;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(order_decision_append(msg, sizeof msg, &len, &in[i]), 0);
    const char *p = msg;
    struct order_decision d;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(order_decision_next(&p, &d), 1);
        ck_assert_int_eq(d.order_id, in[i].order_id);
        ck_assert_str_eq(d.entry, in[i].entry);
        ck_assert_int_eq(d.status, in[i].status);
        ck_assert_str_eq(d.reason, in[i].reason);
    }
    ck_assert_int_eq(order_decision_next(&p, &d), 0);
}
END_TEST

START_TEST(test_message_that_does_not_fit_appends_nothing)
{
    struct order_decision d = {.order_id = 42, .entry = "1-1", .status = ORDER_CONFIRMED};
    char msg[8];
    size_t len = 0;
    ck_assert_int_eq(order_decision_append(msg, sizeof msg, &len, &d), -1);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(msg, "");
}
END_TEST

START_TEST(test_malformed_tokens_are_refused_and_skipped)
{
    const char *bad[] = {"x:c",
                         "0@1-1:c",
                         "12@1-1",
                         "12@1-1:q",
                         "12@1-1:r:",
                         "12@abc:c",
                         "12:r:"
                         "0123456789012345678901234567890123456789012345678901234"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = bad[i];
        struct order_decision d;
        ck_assert_msg(order_decision_next(&p, &d) == -1, "accepted \"%s\"", bad[i]);
        ck_assert_msg(*p == '\0', "did not skip \"%s\"", bad[i]);
    }
    const char *p = "junk 7@1-2:c";
    struct order_decision d;
    ck_assert_int_eq(order_decision_next(&p, &d), -1);
    ck_assert_int_eq(order_decision_next(&p, &d), 1);
    ck_assert_int_eq(d.order_id, 7);
}
END_TEST

/* Redis may issue an order id twice, never a stream entry id: a decision
 * wakes only the waiter of its own reservation. */
START_TEST(test_decision_is_for_its_own_reservation_only)
{
    struct order_decision d = {.order_id = 5, .entry = "100-1", .status = ORDER_CONFIRMED};
    ck_assert(order_decision_is_for(&d, 5, "100-1"));
    ck_assert(!order_decision_is_for(&d, 5, "200-1"));
    ck_assert(!order_decision_is_for(&d, 6, "100-1"));
    ck_assert(order_decision_is_for(&d, 5, "")); /* a waiter that does not know its entry */
}
END_TEST

START_TEST(test_journal_states_map_to_statuses)
{
    struct order_decision d;
    order_parse_state("pending", &d);
    ck_assert_int_eq(d.status, ORDER_PENDING);
    order_parse_state("returned:limit_exceeded", &d);
    ck_assert_int_eq(d.status, ORDER_REJECTED);
    ck_assert_str_eq(d.reason, "limit_exceeded");
    order_parse_state("reapplied:7", &d);
    ck_assert_int_eq(d.status, ORDER_CONFIRMED);
    order_parse_state(NULL, &d); /* acknowledged: the database is its record */
    ck_assert_int_eq(d.status, ORDER_CONFIRMED);
    ck_assert_str_eq(order_rejection_error(ORDER_REASON_NO_STOCK), "sold_out");
    ck_assert_str_eq(order_rejection_error(ORDER_REASON_ID_CONFLICT), "order_rejected");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("order");
    TCase *tc = tcase_create("order");
    tcase_add_test(tc, test_decisions_round_trip_through_a_message);
    tcase_add_test(tc, test_message_that_does_not_fit_appends_nothing);
    tcase_add_test(tc, test_malformed_tokens_are_refused_and_skipped);
    tcase_add_test(tc, test_decision_is_for_its_own_reservation_only);
    tcase_add_test(tc, test_journal_states_map_to_statuses);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
