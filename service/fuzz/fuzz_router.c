/*
 * Fuzz target: the path router, routes_match(), over the real route table.
 * Input: "METHOD PATH" (up to the first space the method, any bytes; without
 * a space the method is GET and the whole input the path).
 *
 * Properties, checked against a plain matcher written here: a found route's
 * template matches the path and its method takes the request's, and no
 * earlier route does both; its parameter is the path's bytes in the
 * template's "{…}" place, inside the path, 1..ROUTES_SEGMENT_BYTES-1 bytes
 * without a '/'; a 405 names the first route of the path and no route takes
 * the method; a 404 means no template matches; an admin route is never
 * matched outside the admin area, so it never escapes the token check.
 */
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "fuzz/fuzz.h"
#include "http/routes.h"

/*
 * Whether path matches template t, walked side by side: each template
 * segment against the path's next non-empty one, "{…}" against any of
 * 1..ROUTES_SEGMENT_BYTES-1 bytes, literal segments byte for byte, and nothing
 * of the path left over.  *param and *param_len get the "{…}" segment's bytes.
 */
static int plain_match(const char *t, const char *path, const char **param, size_t *param_len)
{
    const char *p = path;

    *param = NULL;
    *param_len = 0;
    for (;;) {
        p += strspn(p, "/");
        if (*t == '\0')
            return *p == '\0';
        t++; /* templates are "/seg/seg..." */
        size_t tlen = strcspn(t, "/"), plen = strcspn(p, "/");
        if (plen == 0 || plen >= ROUTES_SEGMENT_BYTES)
            return 0;
        if (*t == '{')
            *param = p, *param_len = plen;
        else if (tlen != plen || memcmp(t, p, plen) != 0)
            return 0;
        t += tlen;
        p += plen;
    }
}

static int method_takes(const char *route_method, const char *method)
{
    return strcmp(route_method, method) == 0 ||
           (strcmp(route_method, "GET") == 0 && strcmp(method, "HEAD") == 0);
}

static void check(const char *method, const char *path)
{
    struct routes_match m;
    enum routes_verdict v = routes_match(method, path, &m);
    const struct routes_route *first_path = NULL, *first_both = NULL;
    const char *param = NULL;
    size_t param_len = 0;

    for (size_t i = 0; i < routes_count; i++) {
        const char *pa;
        size_t pl;
        if (!plain_match(routes_table[i].path, path, &pa, &pl))
            continue;
        if (first_path == NULL)
            first_path = &routes_table[i];
        if (first_both == NULL && method_takes(routes_table[i].method, method))
            first_both = &routes_table[i], param = pa, param_len = pl;
    }
    switch (v) {
    case ROUTES_FOUND:
        FUZZ_CHECK(m.route == first_both);
        FUZZ_CHECK(m.param == param && m.param_len == param_len);
        FUZZ_CHECK((m.param != NULL) == (strchr(m.route->path, '{') != NULL));
        if (m.param != NULL) {
            FUZZ_CHECK(m.param >= path && m.param + m.param_len <= path + strlen(path));
            FUZZ_CHECK(m.param_len >= 1 && m.param_len < ROUTES_SEGMENT_BYTES);
            FUZZ_CHECK(memchr(m.param, '/', m.param_len) == NULL);
            int64_t id;
            if (validate_id_segment(m.param, m.param_len, &id) == 0)
                FUZZ_CHECK(id >= 1);
        }
        break;
    case ROUTES_WRONG_METHOD:
        FUZZ_CHECK(first_both == NULL && first_path != NULL && m.route == first_path);
        FUZZ_CHECK(m.param == NULL);
        break;
    case ROUTES_NO_ROUTE:
        FUZZ_CHECK(first_path == NULL && m.route == NULL && m.param == NULL);
        break;
    default:
        FUZZ_CHECK(!"a verdict routes.h names");
    }
    if (m.route != NULL)
        FUZZ_CHECK(m.route->admin == m.admin_area);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *space = memchr(data, ' ', size);
    char *method = fuzz_cstr(data, space ? (size_t)(space - data) : 0);
    char *path =
        space ? fuzz_cstr(space + 1, size - (size_t)(space - data) - 1) : fuzz_cstr(data, size);

    check(space ? method : "GET", path);
    free(method);
    free(path);
    return 0;
}
