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
    order_parse_state("pending:42", &d);
    ck_assert_int_eq(d.status, ORDER_PENDING);
    order_parse_state("pending", &d); /* written before states named their buyer */
    ck_assert_int_eq(d.status, ORDER_PENDING);
    order_parse_state("pendingx", &d);
    ck_assert_int_ne(d.status, ORDER_PENDING);
    /* the buyer a pending order belongs to, for GET /api/v1/orders/{id} */
    ck_assert_int_eq(order_pending_owner("pending:42"), 42);
    ck_assert_int_eq(order_pending_owner("pending"), 0);
    ck_assert_int_eq(order_pending_owner("pending:"), 0);
    ck_assert_int_eq(order_pending_owner("pending:042"), 0);
    ck_assert_int_eq(order_pending_owner("pending:42x"), 0);
    ck_assert_int_eq(order_pending_owner("returned:limit_exceeded"), 0);
    ck_assert_int_eq(order_pending_owner(NULL), 0);
    /* today's form names the stream entry too */
    order_parse_state("pending:42:1700000000000-3", &d);
    ck_assert_int_eq(d.status, ORDER_PENDING);
    ck_assert_int_eq(order_pending_owner("pending:42:1700000000000-3"), 42);
    ck_assert_int_eq(order_pending_owner("pending:42x:1-1"), 0);
    char entry[ORDER_ENTRY_MAX];
    ck_assert_int_eq(order_pending_entry("pending:42:1700000000000-3", entry, sizeof entry), 0);
    ck_assert_str_eq(entry, "1700000000000-3");
    ck_assert_int_eq(order_pending_entry("pending:42", entry, sizeof entry), 0);
    ck_assert_str_eq(entry, "");
    ck_assert_int_eq(order_pending_entry("pending:42:", entry, sizeof entry), -1);
    ck_assert_int_eq(order_pending_entry("pending:42:1-x", entry, sizeof entry), -1);
    ck_assert_int_eq(order_pending_entry("returned:sold_out", entry, sizeof entry), -1);
    order_parse_state("returned:limit_exceeded", &d);
    ck_assert_int_eq(d.status, ORDER_REJECTED);
    ck_assert_str_eq(d.reason, "limit_exceeded");
    order_parse_state("reapplied:7", &d);
    ck_assert_int_eq(d.status, ORDER_CONFIRMED);
    order_parse_state(NULL, &d); /* acknowledged: the database is its record */
    ck_assert_int_eq(d.status, ORDER_CONFIRMED);
    ck_assert_int_eq(order_rejection_result(ORDER_REASON_NO_STOCK), ORDER_SOLD_OUT);
    ck_assert_int_eq(order_rejection_result(ORDER_REASON_LIMIT), ORDER_LIMIT_EXCEEDED);
    ck_assert_int_eq(order_rejection_result(ORDER_REASON_ID_CONFLICT), ORDER_REJECTED);
}
END_TEST

/* A reserve.lua reply built by hand: an array of strings (NULL ends it). */
struct fake_reply {
    redisReply top, items[4];
    redisReply *ptrs[4];
};

static const redisReply *fake(struct fake_reply *f, const char *const *words)
{
    memset(f, 0, sizeof *f);
    f->top.type = REDIS_REPLY_ARRAY;
    f->top.element = f->ptrs;
    for (size_t i = 0; words[i] && i < 4; i++) {
        f->items[i].type = REDIS_REPLY_STRING;
        f->items[i].str = (char *)words[i];
        f->items[i].len = strlen(words[i]);
        f->ptrs[i] = &f->items[i];
        f->top.elements = i + 1;
    }
    return &f->top;
}

START_TEST(test_every_reserve_verdict_maps_to_one_outcome)
{
    static const struct {
        const char *words[4];
        enum order_result result;
        int replayed;
    } cases[] = {
        {{"ok", "1073741825", "9", "1-0"}, ORDER_PENDING, 0},
        {{"dup", "1073741825", "pending", "1-0"}, ORDER_PENDING, 1},
        {{"dup", "1073741825", NULL}, ORDER_CONFIRMED, 1}, /* acknowledged: no journal state */
        {{"dup", "1073741825", "returned:insufficient_stock", "1-0"}, ORDER_REJECTED, 1},
        {{"dup_refused", "sold_out", NULL}, ORDER_SOLD_OUT, 1},
        {{"dup_refused", "limit_exceeded", NULL}, ORDER_LIMIT_EXCEEDED, 1},
        {{"dup_refused", "exhausted", NULL}, ORDER_UNAVAILABLE, 0}, /* never remembered */
        {{"idem_mismatch", NULL}, ORDER_IDEM_MISMATCH, 0},
        {{"not_loaded", NULL}, ORDER_SKU_NOT_LOADED, 0},
        {{"expired", NULL}, ORDER_DEADLINE_PASSED, 0},
        {{"sale_not_active", NULL}, ORDER_SALE_NOT_ACTIVE, 0},
        {{"limit_exceeded", "3", NULL}, ORDER_LIMIT_EXCEEDED, 0},
        {{"sold_out", "0", NULL}, ORDER_SOLD_OUT, 0},
        {{"exhausted", NULL}, ORDER_IDS_EXHAUSTED, 0},
        {{"ok", "not-a-number", "9", "1-0"}, ORDER_UNAVAILABLE, 0},
        {{"something_new", NULL}, ORDER_UNAVAILABLE, 0},
        {{"rate_limited", "250", NULL}, ORDER_UNAVAILABLE, 0},         /* the wait is an integer */
        {{"dup_refused", "rate_limited", NULL}, ORDER_UNAVAILABLE, 0}, /* never remembered */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fake_reply f;
        struct order_reply out;
        order_parse_reply(fake(&f, cases[i].words), &out);
        ck_assert_msg(out.result == cases[i].result, "case %zu (%s): %s, want %s", i,
                      cases[i].words[0], order_result_name(out.result),
                      order_result_name(cases[i].result));
        ck_assert_int_eq(out.replayed, cases[i].replayed);
        if (out.result == ORDER_PENDING)
            ck_assert_str_eq(out.d.entry, "1-0");
    }
    redisReply err = {.type = REDIS_REPLY_ERROR, .str = (char *)"ERR boom", .len = 8};
    struct order_reply out;
    order_parse_reply(&err, &out);
    ck_assert_int_eq(out.result, ORDER_UNAVAILABLE); /* an error reply: nothing was taken */
    order_parse_reply(NULL, &out);
    ck_assert_int_eq(out.result, ORDER_UNAVAILABLE);
    /* Redis past maxmemory refused the script's first write: nothing taken */
    static const char oom[] = "OOM command not allowed when used memory > 'maxmemory'. script: "
                              "abc, on @user_script:1.";
    redisReply full = {.type = REDIS_REPLY_ERROR, .str = (char *)oom, .len = sizeof oom - 1};
    order_parse_reply(&full, &out);
    ck_assert_str_eq(order_result_name(out.result), "store_full");
    ck_assert_int_eq(order_reserve_reply_at(&full, 3, 2) == &full, 1); /* every order's */
}
END_TEST

START_TEST(test_rate_limited_verdict_carries_its_wait)
{
    struct fake_reply f;
    const char *const words[] = {"rate_limited", NULL};
    const redisReply *r = fake(&f, words);
    redisReply wait = {.type = REDIS_REPLY_INTEGER, .integer = 1250};
    f.ptrs[1] = &wait;
    f.top.elements = 2;
    struct order_reply out;
    order_parse_reply(r, &out);
    ck_assert_int_eq(out.result, ORDER_RATE_LIMITED);
    ck_assert_int_eq(out.retry_after_ms, 1250);
    ck_assert_int_eq(out.replayed, 0);
    ck_assert_str_eq(order_result_name(out.result), "rate_limited");
    f.top.elements = 1; /* a wait is part of the verdict */
    order_parse_reply(r, &out);
    ck_assert_int_eq(out.result, ORDER_UNAVAILABLE);
}
END_TEST

START_TEST(test_buyer_bucket_arguments_follow_the_stream_fields)
{
    struct order_reserve_call c = {0};
    order_reserve_begin(&c, 42, 60, 60, 0);
    order_reserve_add(&c, 7, 1, NULL, 0, 0, 1);
    const char *const *args = order_reserve_argv(&c) + c.nkeys;
    ck_assert_str_eq(args[5 + ORDER_NFIELDS], "0"); /* no limit unless set */
    order_reserve_limit(&c, 120, 3);
    args = order_reserve_argv(&c) + c.nkeys;
    ck_assert_str_eq(args[5 + ORDER_NFIELDS], "500000"); /* one order every 0.5 s */
    ck_assert_str_eq(args[5 + ORDER_NFIELDS + 1], "3");
    order_reserve_limit(&c, 120, 0);
    args = order_reserve_argv(&c) + c.nkeys;
    ck_assert_str_eq(args[5 + ORDER_NFIELDS], "0");
    /* a refusal's lifetime follows the bucket, never longer than an order's key */
    ck_assert_str_eq(args[5 + ORDER_NFIELDS + 2], "60");
    order_reserve_refusal_ttl(&c, 30);
    args = order_reserve_argv(&c) + c.nkeys;
    ck_assert_str_eq(args[5 + ORDER_NFIELDS + 2], "30");
    order_reserve_refusal_ttl(&c, 600);
    args = order_reserve_argv(&c) + c.nkeys;
    ck_assert_str_eq(args[5 + ORDER_NFIELDS + 2], "60");
    /* the order's KEYS (its idempotency key, its bucket) follow the shared six */
    ck_assert_str_eq(c.argv[KEYS_RESERVE_N + 1], "seckill:{sku:42}:rate:7");
    order_reserve_free(&c);
}
END_TEST

START_TEST(test_stream_fields_are_named_once_and_distinct)
{
    for (int i = 0; i < ORDER_NFIELDS; i++) {
        ck_assert_ptr_nonnull(order_fields[i]);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(order_fields[i], order_fields[j]);
    }
    /* reserve.lua gets them after its 5 other shared arguments */
    struct order_reserve_call c = {0};
    order_reserve_begin(&c, 42, 60, 60, 0);
    order_reserve_add(&c, 7, 1, NULL, 0, 0, 1);
    order_reserve_argv(&c);
    for (int i = 0; i < ORDER_NFIELDS; i++)
        ck_assert_str_eq(c.argv[c.nkeys + 5 + i], order_fields[i]);
    order_reserve_free(&c);
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
    tcase_add_test(tc, test_every_reserve_verdict_maps_to_one_outcome);
    tcase_add_test(tc, test_stream_fields_are_named_once_and_distinct);
    tcase_add_test(tc, test_rate_limited_verdict_carries_its_wait);
    tcase_add_test(tc, test_buyer_bucket_arguments_follow_the_stream_fields);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
