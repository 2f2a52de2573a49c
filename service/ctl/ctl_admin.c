#include "ctl/ctl_admin.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl_args.h"
#include "ctl/ctl_table.h"

void ctl_admin_usage(FILE *out)
{
    fprintf(out,
            "\nAdmin API groups (sku, order, sale, health) talk to seckilld's admin listener:\n"
            "  --url URL          http://HOST:PORT, repeated or a comma list (health shows one\n"
            "                     row each; the others use the first); else SECKILL_URL; else\n"
            "                     http:// and the daemon's metrics_addr (default\n"
            "                     127.0.0.1:9464), where the admin API lives since it left the\n"
            "                     public listener (8080 answers 404 for /admin/ unless\n"
            "                     admin_on_public=1)\n"
            "  --json             print the API's JSON (the same field names) instead of a table\n"
            "  --timeout-ms N     each request's whole exchange (default %d)\n"
            "  --token-file PATH  the admin token's file; else SECKILL_ADMIN_TOKEN or\n"
            "                     SECKILL_ADMIN_TOKEN_FILE (a token is never a flag's value)\n",
            CTL_TIMEOUT_MS_DEFAULT);
}

/* Adds the URLs of a comma list.  Returns 0 or CTL_EXIT_USAGE. */
static int add_urls(struct ctl *ctl, const char *list, const char *from)
{
    char *copy = strdup(list), *save = NULL;
    int rc = 0;
    if (!copy)
        abort();
    for (char *u = strtok_r(copy, ",", &save); u && rc == 0; u = strtok_r(NULL, ",", &save)) {
        char err[200];
        if (ctl->nurls == CTL_URLS_MAX) {
            rc = ctl_usage_error("at most %d URLs", CTL_URLS_MAX);
        } else if (ctl_url_parse(u, &ctl->urls[ctl->nurls], err, sizeof err) != 0) {
            rc = ctl_usage_error("%s: %s", from, err);
        } else {
            struct ctl_url p = ctl->urls[ctl->nurls];
            char text[sizeof ctl->url_text[0]];
            snprintf(text, sizeof text, "http://%s%s%s:%d", p.v6 ? "[" : "", p.host,
                     p.v6 ? "]" : "", p.port);
            memcpy(ctl->url_text[ctl->nurls++], text, sizeof text);
        }
    }
    free(copy);
    if (rc == 0 && ctl->nurls == 0)
        rc = ctl_usage_error("%s names no URL", from);
    return rc;
}

/* The default URL: the daemon's internal listener, a wildcard address
 * reached over loopback. */
static int default_url(struct ctl *ctl)
{
    const char *env = getenv("SECKILL_URL");
    if (env && *env)
        return add_urls(ctl, env, "SECKILL_URL");
    const char *addr = ctl->cfg.metrics_addr;
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return ctl_usage_error("metrics_addr \"%s\" has no port: give --url", addr);
    size_t hl = (size_t)(colon - addr);
    char url[CTL_HTTP_HOST_MAX + 32];
    if ((hl == 7 && memcmp(addr, "0.0.0.0", 7) == 0) || hl == 0)
        snprintf(url, sizeof url, "http://127.0.0.1%s", colon);
    else if (hl == 4 && memcmp(addr, "[::]", 4) == 0)
        snprintf(url, sizeof url, "http://[::1]%s", colon);
    else
        snprintf(url, sizeof url, "http://%s", addr);
    return add_urls(ctl, url, "metrics_addr");
}

int ctl_admin_take_flags(struct ctl *ctl, int *argc, char **argv)
{
    int out = 1, rc = 0;
    ctl->timeout_ms = CTL_TIMEOUT_MS_DEFAULT;
    for (int i = 1; i < *argc && rc == 0; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < *argc ? argv[i + 1] : NULL;
        char err[400];
        if (strcmp(f, "--json") == 0) {
            ctl->json = 1;
        } else if (strcmp(f, "--url") == 0 || strcmp(f, "--token-file") == 0 ||
                   strcmp(f, "--timeout-ms") == 0) {
            if (!v) {
                rc = ctl_usage_error("%s needs a value", f);
                break;
            }
            i++;
            if (f[2] == 'u') {
                rc = add_urls(ctl, v, "--url");
            } else if (f[2] == 't' && f[3] == 'o') {
                if (cfg_set(&ctl->cfg, "admin_token_file", v, err, sizeof err) != 0)
                    rc = ctl_usage_error("--token-file: %s", err);
            } else if (ctl_arg_i64(v, CTL_UNSIGNED, &ctl->timeout_ms) != 0 || ctl->timeout_ms < 1 ||
                       ctl->timeout_ms > CTL_TIMEOUT_MS_MAX) {
                rc = ctl_usage_error("--timeout-ms must be between 1 and %d, not \"%s\"",
                                     CTL_TIMEOUT_MS_MAX, v);
            }
        } else if (strcmp(f, "--token") == 0 || strcmp(f, "--admin-token") == 0 ||
                   strncmp(f, "--token=", 8) == 0 || strncmp(f, "--admin-token=", 14) == 0) {
            /* the value may be a real token: it is not repeated here */
            rc = ctl_usage_error("%.*s is refused: a token in argv is readable by any local user "
                                 "(ps); set SECKILL_ADMIN_TOKEN, or SECKILL_ADMIN_TOKEN_FILE or "
                                 "--token-file PATH",
                                 (int)strcspn(f, "="), f);
            if (strchr(f, '=') == NULL && v)
                i++;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        ctl->admin_flags = 1;
    }
    if (rc == 0 && ctl->nurls == 0)
        rc = default_url(ctl);
    if (rc != 0)
        return rc;
    *argc = out;
    argv[out] = NULL;
    return 0;
}

int ctl_admin_args(const char *cmd, int argc, char **argv, int npos, const char **pos,
                   struct ctl_flag *flags)
{
    int got = 0;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0) {
            if (got == npos)
                return ctl_usage_error("%s: unexpected argument \"%s\"", cmd, argv[i]);
            pos[got++] = argv[i];
            continue;
        }
        struct ctl_flag *f = flags;
        while (f && f->name && strcmp(f->name, argv[i]) != 0)
            f++;
        if (!f || !f->name) /* its name only: "--admin_token=..." may hold a token */
            return ctl_usage_error("%s: unknown flag \"%.*s\"", cmd, (int)strcspn(argv[i], "="),
                                   argv[i]);
        if (i + 1 >= argc)
            return ctl_usage_error("%s: %s needs a value", cmd, argv[i]);
        if (*f->value)
            return ctl_usage_error("%s: %s is given twice", cmd, argv[i]);
        *f->value = argv[++i];
    }
    if (got < npos)
        return ctl_usage_error("%s needs %d argument%s (see seckillctl --help)", cmd, npos,
                               npos > 1 ? "s" : "");
    return 0;
}

int ctl_admin_id(const char *what, const char *text, int64_t *id)
{
    if (ctl_arg_i64(text, CTL_UNSIGNED, id) != 0 || *id < 1)
        return ctl_usage_error("%s must be an integer between 1 and 2^63-1, not \"%s\"", what,
                               text);
    return 0;
}

int ctl_admin_exit_of(int status, const char *error)
{
    if (status >= 200 && status < 300)
        return CTL_EXIT_OK;
    if (status == 401)
        return CTL_EXIT_AUTH;
    /* "not_found" is a path the listener does not serve, not a missing object */
    if (status == 404 && error && strncmp(error, "unknown_", 8) == 0)
        return CTL_EXIT_NOT_FOUND;
    if (status >= 400 && status < 500 && status != 404)
        return CTL_EXIT_REFUSED;
    return CTL_EXIT_ERROR;
}

/* Says why an answer was not a success, on stderr. */
static void explain(const struct ctl *ctl, int at, const char *method, const char *path, int status,
                    const json_t *body)
{
    const char *error = json_string_value(json_object_get(body, "error"));
    const char *detail = json_string_value(json_object_get(body, "detail"));
    ctl_say("%s %s%s: %d %s%s%s", method, ctl->url_text[at], path, status,
            error ? error : "(no error code)", detail ? ": " : "", detail ? detail : "");
    if (status == 404 && error && strcmp(error, "not_found") == 0 &&
        strncmp(path, "/admin/", 7) == 0)
        ctl_say("%s serves no admin API: is it the public listener (http_addr)? The admin API "
                "is on the internal one, metrics_addr (default 127.0.0.1:9464), unless "
                "admin_on_public=1",
                ctl->url_text[at]);
    else if (status == 401)
        ctl_say("the service refused the admin token: SECKILL_ADMIN_TOKEN, "
                "SECKILL_ADMIN_TOKEN_FILE or --token-file must hold its admin_token");
}

int ctl_admin_call(struct ctl *ctl, int at, const char *method, const char *path,
                   const json_t *body, const char *idem, json_t **out)
{
    *out = NULL;
    int admin = strncmp(path, "/admin/", 7) == 0; /* the rest needs no token: /healthz */
    if (admin && !ctl->cfg.admin_token[0]) {
        ctl_say("no admin token: set SECKILL_ADMIN_TOKEN, or SECKILL_ADMIN_TOKEN_FILE=PATH or "
                "--token-file PATH (the file seckilld reads, e.g. var/admin-token)");
        return CTL_EXIT_AUTH;
    }
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct ctl_http_request q = {.method = method,
                                 .path = path,
                                 .token = admin ? ctl->cfg.admin_token : NULL,
                                 .body = text,
                                 .idem = idem,
                                 .timeout_ms = ctl->timeout_ms};
    struct ctl_http_answer a;
    char err[200];
    int rc = ctl_http_do(&ctl->urls[at], &q, &a, err, sizeof err);
    free(text);
    if (rc != 0) {
        ctl_say("cannot reach %s: %s", ctl->url_text[at], err);
        return CTL_EXIT_ERROR;
    }
    json_error_t jerr;
    json_t *o = json_loadb(a.body, a.body_len, 0, &jerr);
    int status = a.status;
    ctl_http_answer_free(&a);
    if (!o && status != 204) {
        ctl_say("%s %s%s: %d with a body that is not JSON (%s)", method, ctl->url_text[at], path,
                status, jerr.text);
        return status >= 200 && status < 300 ? CTL_EXIT_ERROR : ctl_admin_exit_of(status, NULL);
    }
    if (!o)
        o = json_object();
    int code = ctl_admin_exit_of(status, json_string_value(json_object_get(o, "error")));
    if (code == CTL_EXIT_OK) {
        *out = o;
        return code;
    }
    explain(ctl, at, method, path, status, o);
    if (ctl->json) {
        json_dumpf(o, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    }
    json_decref(o);
    return code;
}

void ctl_admin_print_object(const json_t *o)
{
    ctl_table_print_object(o, stdout);
}

int ctl_admin_run(struct ctl *ctl, const char *method, const char *path, const json_t *body,
                  const char *idem)
{
    json_t *out;
    int rc = ctl_admin_call(ctl, 0, method, path, body, idem, &out);
    if (rc == CTL_EXIT_OK)
        ctl_admin_print(ctl, out, ctl_admin_print_object);
    return rc;
}

void ctl_admin_print(const struct ctl *ctl, json_t *o, void (*human)(const json_t *o))
{
    if (ctl->json) {
        json_dumpf(o, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    } else {
        human(o);
    }
    json_decref(o);
}

int ctl_admin_pages(struct ctl *ctl, const char *cmd, const char *base, int argc, char **argv,
                    void (*human)(const json_t *o))
{
    const char *after = NULL, *limit = NULL;
    struct ctl_flag flags[] = {{"--after", &after}, {"--limit", &limit}, {NULL, NULL}};
    int64_t a = 0, l = 0;
    int rc = ctl_admin_args(cmd, argc, argv, 0, NULL, flags);
    if (rc)
        return rc;
    if (after && ctl_arg_i64(after, CTL_UNSIGNED, &a) != 0)
        return ctl_usage_error("--after needs an id (0: from the start), not \"%s\"", after);
    if (limit && (ctl_arg_i64(limit, CTL_UNSIGNED, &l) != 0 || l < 1))
        return ctl_usage_error("--limit needs a positive integer, not \"%s\"", limit);
    /* Without --limit every page, each as large as the service allows. */
    json_t *all = json_array();
    for (;;) {
        char path[128];
        if (limit)
            snprintf(path, sizeof path, "%s?after=%" PRId64 "&limit=%" PRId64, base, a, l);
        else
            snprintf(path, sizeof path, "%s?after=%" PRId64, base, a);
        json_t *page;
        rc = ctl_admin_call(ctl, 0, "GET", path, NULL, NULL, &page);
        if (rc)
            break;
        json_array_extend(all, json_object_get(page, "skus"));
        json_t *next = json_object_get(page, "next_after");
        int more = !limit && json_is_integer(next) && json_integer_value(next) > a;
        if (more) {
            a = json_integer_value(next);
            json_decref(page);
            continue;
        }
        json_object_set(page, "skus", all);
        ctl_admin_print(ctl, page, human);
        break;
    }
    json_decref(all);
    return rc;
}
