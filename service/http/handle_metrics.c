#include "http/handle_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/metrics.h"

#define CONTENT_TYPE "text/plain; version=0.0.4"

static struct metrics_cache *cache;

void handle_metrics_init(struct metrics_cache *mc)
{
    cache = mc;
}

/* Whether an Accept-Encoding value lists gzip (or x-gzip) with a weight
 * above 0 (RFC 9110 12.5.3: "gzip", "gzip;q=0.5"; "gzip;q=0" refuses it).
 * "*" is not taken: a client that names nothing gets the plain text. */
static int accepts_gzip(const char *ae)
{
    char item[64];
    while (ae && *ae) {
        size_t len = strcspn(ae, ",");
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), ae);
        ae += len + (ae[len] == ',');
        char *p = item + strspn(item, " \t");
        size_t tok = strcspn(p, "; \t");
        if (!((tok == 4 && strncasecmp(p, "gzip", 4) == 0) ||
              (tok == 6 && strncasecmp(p, "x-gzip", 6) == 0)))
            continue;
        const char *q = strcasestr(p + tok, "q=");
        if (!q || strtod(q + 2, NULL) > 0)
            return 1;
    }
    return 0;
}

/* The answer, on the request's loop, from the last refresh: compressed when
 * the scraper accepts gzip (Prometheus does). */
static void answer(const struct metrics_text *t, void *arg)
{
    struct http_req *r = arg;
    if (t && t->gz && accepts_gzip(http_header(r, "Accept-Encoding"))) {
        http_add_header(r, "Content-Encoding", "gzip");
        http_add_header(r, "Vary", "Accept-Encoding");
        http_reply_raw(r, 200, CONTENT_TYPE, (const char *)t->gz, t->gz_len);
    } else if (t) {
        http_add_header(r, "Vary", "Accept-Encoding");
        http_reply_raw(r, 200, CONTENT_TYPE, t->text, t->len);
    } else { /* stopping: the process's own numbers */
        size_t len;
        char *own = metrics_render(&len);
        http_reply_raw(r, 200, CONTENT_TYPE, own, len);
        free(own);
    }
    free(r);
}

void handle_metrics_get(struct http_req *r, int64_t id)
{
    (void)id;
    struct http_req *copy = xmalloc(sizeof *copy);
    *copy = *r;
    if (metrics_cache_get(cache, http_loop_base(r->loop), answer, copy) != 0)
        answer(NULL, copy); /* no cache, or it stops */
}
