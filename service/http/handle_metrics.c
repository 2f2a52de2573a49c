#include "http/handle_metrics.h"

#include <stdlib.h>

#include "core/metrics.h"

#define CONTENT_TYPE "text/plain; version=0.0.4"

static struct metrics_cache *cache;

void handle_metrics_init(struct metrics_cache *mc)
{
    cache = mc;
}

/* The answer, on the request's loop, with the text of the last refresh. */
static void answer(const char *text, size_t len, void *arg)
{
    struct http_req *r = arg;
    if (text) {
        http_reply_raw(r, 200, CONTENT_TYPE, text, len);
    } else { /* stopping: the process's own numbers */
        char *own = metrics_render(&len);
        http_reply_raw(r, 200, CONTENT_TYPE, own, len);
        free(own);
    }
    free(r);
}

void handle_metrics_get(struct http_req *r, int64_t id)
{
    (void)id;
    struct http_req *copy = malloc(sizeof *copy);
    if (!copy)
        abort();
    *copy = *r;
    if (metrics_cache_get(cache, http_loop_base(r->loop), answer, copy) != 0)
        answer(NULL, 0, copy); /* no cache, or it stops */
}
