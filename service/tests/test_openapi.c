/*
 * docs/openapi.json is the HTTP API, and stays so.
 *
 * The document must be a valid OpenAPI 3 document (scripts/openapi/validate.js,
 * the pinned swagger-parser), and say exactly what the route table says:
 * the same operations (method, path, operationId), the same statuses per
 * operation, and per status the same error codes.  The answers given outside
 * any operation are listed too, by status and error code: before routing
 * (x-protocol-answers) and for a path that is no route (x-unrouted-answers).
 * The server checks each answer it gives against the route table at run
 * time, and the test harness fails any test that provoked an undeclared one
 * (harness.c), so the three agree: code, table, document.
 */
#include <check.h>
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "http/routes.h"

static json_t *doc;

static void load_doc(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/openapi.json", th_env("SECKILL_TEST_ROOT"));
    json_error_t e;
    doc = json_load_file(path, 0, &e);
    ck_assert_msg(doc, "%s:%d: %s", path, e.line, e.text);
}

static void free_doc(void)
{
    json_decref(doc);
    doc = NULL;
}

/* Follows "#/a/b" references within the document; returns o itself otherwise. */
static json_t *deref(json_t *o)
{
    for (int hops = 0; hops < 16; hops++) {
        const char *ref = json_string_value(json_object_get(o, "$ref"));
        if (!ref)
            return o;
        ck_assert_msg(strncmp(ref, "#/", 2) == 0, "external $ref %s", ref);
        json_t *at = doc;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", ref + 2);
        for (char *save = NULL, *tok = strtok_r(buf, "/", &save); tok;
             tok = strtok_r(NULL, "/", &save))
            at = json_object_get(at, tok);
        ck_assert_msg(at, "dangling $ref %s", ref);
        o = at;
    }
    ck_abort_msg("$ref chain too long");
    return NULL;
}

/* Adds every code of properties.error.enum reachable from schema s (through
 * $ref, allOf, oneOf, anyOf) to codes (a JSON object used as a set). */
static void collect_codes(json_t *s, json_t *codes)
{
    s = deref(s);
    if (!json_is_object(s))
        return;
    json_t *en =
        json_object_get(json_object_get(json_object_get(s, "properties"), "error"), "enum");
    size_t i;
    json_t *v;
    json_array_foreach(en, i, v) json_object_set(codes, json_string_value(v), json_true());
    static const char *const combos[] = {"allOf", "oneOf", "anyOf"};
    for (size_t c = 0; c < 3; c++)
        json_array_foreach(json_object_get(s, combos[c]), i, v) collect_codes(v, codes);
}

static json_t *doc_operation(const struct routes_route *t)
{
    char method[8];
    size_t n = 0;
    for (; t->method[n] && n + 1 < sizeof method; n++)
        method[n] = (char)tolower((unsigned char)t->method[n]);
    method[n] = '\0';
    return json_object_get(json_object_get(json_object_get(doc, "paths"), t->path), method);
}

/* The codes a response of the document can carry, as a sorted, comma-joined string. */
static void doc_codes(json_t *response, char *out, size_t cap)
{
    json_t *codes = json_object();
    const char *media;
    json_t *m;
    json_object_foreach(json_object_get(deref(response), "content"), media, m)
        collect_codes(json_object_get(m, "schema"), codes);
    out[0] = '\0';
    /* jansson keeps insertion order; sort by taking the smallest unused each round */
    for (size_t done = 0, total = json_object_size(codes); done < total; done++) {
        const char *best = NULL, *k;
        json_t *v;
        json_object_foreach(codes, k, v) if (json_is_true(v) && (!best || strcmp(k, best) < 0))
            best = k;
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", done ? "," : "", best);
        json_object_set(codes, best, json_false());
    }
    json_decref(codes);
}

/* The error codes route t declares for 'status', sorted and comma-joined. */
static void table_codes(const struct routes_route *t, int status, char *out, size_t cap)
{
    out[0] = '\0';
    const char *last = "";
    for (;;) {
        const char *best = NULL;
        for (const struct http_answer *a = t->answers; a->status; a++)
            if (a->status == status && a->error && strcmp(a->error, last) > 0 &&
                (!best || strcmp(a->error, best) < 0))
                best = a->error;
        if (!best)
            return;
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "," : "", best);
        last = best;
    }
}

START_TEST(test_document_is_valid_openapi)
{
    char cmd[8192];
    const char *root = th_env("SECKILL_TEST_ROOT");
    snprintf(cmd, sizeof cmd, "node '%s/scripts/openapi/validate.js' '%s/docs/openapi.json'", root,
             root);
    int st = system(cmd);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the OpenAPI document does not validate (%s; scripts/deps.sh installs the "
                  "validator)",
                  cmd);
}
END_TEST

START_TEST(test_every_route_is_documented_with_its_operation_id)
{
    for (size_t i = 0; i < routes_count; i++) {
        const struct routes_route *t = &routes_table[i];
        json_t *op = doc_operation(t);
        ck_assert_msg(op, "%s is not in docs/openapi.json", t->label);
        ck_assert_msg(
            json_is_string(json_object_get(op, "operationId")) &&
                strcmp(json_string_value(json_object_get(op, "operationId")), t->operation) == 0,
            "%s: operationId is not %s", t->label, t->operation);
        /* The one scheme the document requires is the one the route checks. */
        json_t *sec = json_object_get(op, "security");
        const char *want = t->admin ? "admin" : t->buyer ? "buyer" : NULL;
        if (!want)
            ck_assert_msg(json_array_size(sec) == 0, "%s: security is set in the document",
                          t->label);
        else if (!t->payment)
            ck_assert_msg(
                json_array_size(sec) == 1 && json_object_size(json_array_get(sec, 0)) == 1 &&
                    json_object_get(json_array_get(sec, 0), want),
                "%s: the document's security is not exactly the %s scheme", t->label, want);
        else /* the admin token or the payment token, either */
            ck_assert_msg(json_array_size(sec) == 2 &&
                              json_object_size(json_array_get(sec, 0)) == 1 &&
                              json_object_get(json_array_get(sec, 0), "admin") &&
                              json_object_size(json_array_get(sec, 1)) == 1 &&
                              json_object_get(json_array_get(sec, 1), "payment"),
                          "%s: the document's security is not admin or payment", t->label);
    }
}
END_TEST

/* The listeners (enum routes_listener bits) a path's servers name: the
 * document's own servers when the path has none.  The public listener is
 * the server on port 8080 (http_addr's default), the internal one 9464. */
static unsigned doc_listeners(const char *path)
{
    json_t *servers =
        json_object_get(json_object_get(json_object_get(doc, "paths"), path), "servers");
    if (!servers)
        servers = json_object_get(doc, "servers");
    unsigned bits = 0;
    size_t i;
    json_t *sv;
    json_array_foreach(servers, i, sv)
    {
        const char *url = json_string_value(json_object_get(sv, "url"));
        if (url && strstr(url, ":8080"))
            bits |= ROUTES_PUBLIC;
        else if (url && strstr(url, ":9464"))
            bits |= ROUTES_INTERNAL;
    }
    return bits;
}

START_TEST(test_every_route_lists_the_listeners_that_serve_it)
{
    for (size_t i = 0; i < routes_count; i++) {
        const struct routes_route *t = &routes_table[i];
        ck_assert_msg(doc_listeners(t->path) == t->listeners,
                      "%s: the document's servers name listeners %u, the route table %u", t->label,
                      doc_listeners(t->path), t->listeners);
    }
}
END_TEST

START_TEST(test_every_documented_operation_is_a_route)
{
    const char *path;
    json_t *ops;
    json_object_foreach(json_object_get(doc, "paths"), path, ops)
    {
        const char *method;
        json_t *op;
        json_object_foreach(ops, method, op)
        {
            if (strcmp(method, "parameters") == 0 || strcmp(method, "summary") == 0 ||
                strcmp(method, "description") == 0 || strcmp(method, "servers") == 0)
                continue;
            int found = 0;
            for (size_t i = 0; i < routes_count && !found; i++)
                found = strcmp(routes_table[i].path, path) == 0 &&
                        strcasecmp(routes_table[i].method, method) == 0;
            ck_assert_msg(found, "%s %s is documented but the server has no such route", method,
                          path);
        }
    }
}
END_TEST

START_TEST(test_every_answer_is_documented_and_every_documented_answer_exists)
{
    for (size_t i = 0; i < routes_count; i++) {
        const struct routes_route *t = &routes_table[i];
        json_t *responses = json_object_get(doc_operation(t), "responses");
        ck_assert_msg(responses, "%s has no responses", t->label);
        /* statuses: table -> document */
        for (const struct http_answer *a = t->answers; a->status; a++) {
            char key[8];
            snprintf(key, sizeof key, "%d", a->status);
            ck_assert_msg(json_object_get(responses, key), "%s answers %d %s, undocumented",
                          t->label, a->status, a->error ? a->error : "");
        }
        /* document -> table, and the codes of each status both ways */
        const char *key;
        json_t *resp;
        json_object_foreach(responses, key, resp)
        {
            int status = atoi(key);
            int declared = 0;
            for (const struct http_answer *a = t->answers; a->status && !declared; a++)
                declared = a->status == status;
            ck_assert_msg(declared, "%s: the document lists %s, the route never answers it",
                          t->label, key);
            char in_doc[512], in_table[512];
            doc_codes(resp, in_doc, sizeof in_doc);
            table_codes(t, status, in_table, sizeof in_table);
            ck_assert_msg(strcmp(in_doc, in_table) == 0,
                          "%s %d: error codes differ: document [%s], route table [%s]", t->label,
                          status, in_doc, in_table);
        }
    }
}
END_TEST

START_TEST(test_the_comparison_notices_a_missing_code)
{
    /* The walk above must see codes at all: a response with codes gives a
     * non-empty list, so a document without enums cannot pass by accident. */
    for (size_t i = 0; i < routes_count; i++)
        if (strcmp(routes_table[i].operation, "placeOrder") == 0) {
            json_t *r = json_object_get(
                json_object_get(doc_operation(&routes_table[i]), "responses"), "409");
            char codes[512];
            doc_codes(r, codes, sizeof codes);
            ck_assert_str_eq(
                codes, "limit_exceeded,order_cancelled,order_rejected,sale_not_active,sold_out");
            return;
        }
    ck_abort_msg("no placeOrder route");
}
END_TEST

/* Compares the document's extension 'ext' (status -> array of error codes)
 * with the answers of 'list', both ways: each answer there, and each status
 * and code there one of the list's.  Returns 0, or -1 with why in 'why'. */
static int answers_match_extension(const char *ext, const struct http_answer *list, char *why,
                                   size_t cap)
{
    json_t *doc_answers = json_object_get(doc, ext);
    if (!json_is_object(doc_answers)) {
        snprintf(why, cap, "docs/openapi.json lacks %s", ext);
        return -1;
    }
    /* list -> document */
    for (const struct http_answer *a = list; a->status; a++) {
        if (!a->error) {
            snprintf(why, cap, "the server answers %d without an error code", a->status);
            return -1;
        }
        char key[8];
        snprintf(key, sizeof key, "%d", a->status);
        json_t *codes = json_object_get(doc_answers, key), *v;
        int found = 0;
        size_t i;
        json_array_foreach(codes, i, v) found |=
            json_is_string(v) && strcmp(json_string_value(v), a->error) == 0;
        if (!found) {
            snprintf(why, cap, "the server answers %d %s, not in %s", a->status, a->error, ext);
            return -1;
        }
    }
    /* document -> list */
    const char *key;
    json_t *codes;
    json_object_foreach(doc_answers, key, codes)
    {
        if (!json_is_array(codes) || json_array_size(codes) == 0) {
            snprintf(why, cap, "%s: %s is not a non-empty array of error codes", ext, key);
            return -1;
        }
        size_t i;
        json_t *v;
        json_array_foreach(codes, i, v)
        {
            int found = 0;
            for (const struct http_answer *a = list; json_is_string(v) && a->status && !found;
                 a++) {
                char status[8]; /* the key exactly: "404", not "0404" or "404x" */
                snprintf(status, sizeof status, "%d", a->status);
                found = a->error && strcmp(key, status) == 0 &&
                        strcmp(json_string_value(v), a->error) == 0;
            }
            if (!found) {
                snprintf(why, cap, "%s lists %s %s, the server never answers it", ext, key,
                         json_is_string(v) ? json_string_value(v) : "(not a string)");
                return -1;
            }
        }
    }
    return 0;
}

START_TEST(test_protocol_answers_are_documented_both_ways)
{
    /* What the server answers before any route (http_protocol_answers) is
     * the document's x-protocol-answers: status -> error codes. */
    char why[256];
    ck_assert_msg(
        answers_match_extension("x-protocol-answers", http_protocol_answers, why, sizeof why) == 0,
        "http_protocol_answers: %s", why);
}
END_TEST

START_TEST(test_unrouted_answers_are_documented_both_ways)
{
    /* What the router answers for a path that is no route (404, and the
     * admin area's 401 and 429 before it: routes_unrouted_answers) is the
     * document's x-unrouted-answers: status -> error codes. */
    char why[256];
    ck_assert_msg(answers_match_extension("x-unrouted-answers", routes_unrouted_answers, why,
                                          sizeof why) == 0,
                  "routes_unrouted_answers: %s", why);
}
END_TEST

START_TEST(test_the_extension_comparison_notices_a_difference)
{
    /* A list with an answer fewer, one more, or a code under another status
     * than the document's must not match it. */
    static const struct http_answer fewer[] = {
        {404, "not_found"}, {401, "unauthorized"}, {0, NULL}};
    static const struct http_answer more[] = {{404, "not_found"},
                                              {401, "unauthorized"},
                                              {429, "rate_limited"},
                                              {418, "teapot"},
                                              {0, NULL}};
    static const struct http_answer moved[] = {
        {404, "not_found"}, {403, "unauthorized"}, {429, "rate_limited"}, {0, NULL}};
    static const struct http_answer same[] = {
        {429, "rate_limited"}, {404, "not_found"}, {401, "unauthorized"}, {0, NULL}};
    char why[256];
    ck_assert_int_eq(answers_match_extension("x-unrouted-answers", fewer, why, sizeof why), -1);
    ck_assert_int_eq(answers_match_extension("x-unrouted-answers", more, why, sizeof why), -1);
    ck_assert_int_eq(answers_match_extension("x-unrouted-answers", moved, why, sizeof why), -1);
    ck_assert_int_eq(answers_match_extension("x-no-such-answers", same, why, sizeof why), -1);
    ck_assert_msg(answers_match_extension("x-unrouted-answers", same, why, sizeof why) == 0, "%s",
                  why);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("openapi");
    TCase *tc = tcase_create("openapi");
    tcase_add_checked_fixture(tc, load_doc, free_doc);
    tcase_add_test(tc, test_document_is_valid_openapi);
    tcase_add_test(tc, test_every_route_is_documented_with_its_operation_id);
    tcase_add_test(tc, test_every_route_lists_the_listeners_that_serve_it);
    tcase_add_test(tc, test_every_documented_operation_is_a_route);
    tcase_add_test(tc, test_every_answer_is_documented_and_every_documented_answer_exists);
    tcase_add_test(tc, test_the_comparison_notices_a_missing_code);
    tcase_add_test(tc, test_protocol_answers_are_documented_both_ways);
    tcase_add_test(tc, test_unrouted_answers_are_documented_both_ways);
    tcase_add_test(tc, test_the_extension_comparison_notices_a_difference);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
