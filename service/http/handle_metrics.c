#include "http/handle_metrics.h"

#include <stdlib.h>

#include "core/metrics.h"

void handle_metrics_get(struct http_req *r, int64_t id)
{
    (void)id;
    size_t len;
    char *text = metrics_render(&len);
    http_reply_raw(r, 200, "text/plain; version=0.0.4", text, len);
    free(text);
}
