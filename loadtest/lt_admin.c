#include "lt_admin.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct call {
    struct event_base *base;
    struct lt_http_answer *out;
    int done;
};

static void on_done(struct evhttp_request *req, void *arg)
{
    struct call *c = arg;
    c->done = 1;
    event_base_loopbreak(c->base); /* the kept-alive connection would hold the loop */
    c->out->status = req ? evhttp_request_get_response_code(req) : 0;
    if (!req)
        return;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n >= sizeof c->out->body)
        n = sizeof c->out->body - 1;
    evbuffer_copyout(in, c->out->body, n);
    c->out->body[n] = '\0';
}

int lt_admin_request(const struct lt_opts *o, const char *method, const char *path,
                     const char *body, struct lt_http_answer *out)
{
    memset(out, 0, sizeof *out);
    struct event_base *base = event_base_new();
    struct evhttp_connection *conn =
        base ? evhttp_connection_base_new(base, NULL, o->admin.host, (ev_uint16_t)o->admin.port)
             : NULL;
    struct call c = {base, out, 0};
    struct evhttp_request *req = conn ? evhttp_request_new(on_done, &c) : NULL;
    if (!req) {
        if (conn)
            evhttp_connection_free(conn);
        if (base)
            event_base_free(base);
        return -1;
    }
    struct timeval to = {o->timeout_ms / 1000, (o->timeout_ms % 1000) * 1000};
    evhttp_connection_set_timeout_tv(conn, &to);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", o->admin.host);
    if (o->token[0]) {
        char auth[LT_TOKEN_MAX + 16];
        snprintf(auth, sizeof auth, "Bearer %s", o->token);
        evhttp_add_header(h, "Authorization", auth);
    }
    if (body) {
        evhttp_add_header(h, "Content-Type", "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
    }
    enum evhttp_cmd_type cmd = strcmp(method, "POST") == 0 ? EVHTTP_REQ_POST : EVHTTP_REQ_GET;
    if (evhttp_make_request(conn, req, cmd, path) == 0)
        event_base_dispatch(base); /* ends: the answer, or the connection timeout */
    evhttp_connection_free(conn);
    event_base_free(base);
    return c.done && out->status ? 0 : -1;
}

/* Reads the "bucket_skus" of answer j (what: "creating the SKU", "reading
 * the SKU") into ids[0..n-1]: n distinct positive ids, none the parent's
 * (a create names them, a view names objects with an "id").  Returns 0, or
 * -1 with a message in err. */
static int read_buckets(json_t *j, const char *what, int64_t parent, int n, int64_t *ids, char *err,
                        size_t errlen)
{
    json_t *a = json_object_get(j, "bucket_skus");
    if (!json_is_array(a) || json_array_size(a) != (size_t)n) {
        snprintf(err, errlen,
                 "%s: the answer names no %d bucket_skus (does the service support buckets, "
                 "and has the SKU %d?)",
                 what, n, n);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        json_t *v = json_array_get(a, (size_t)k);
        if (json_is_object(v))
            v = json_object_get(v, "id");
        ids[k] = json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
        int dup = ids[k] == parent;
        for (int i = 0; i < k; i++)
            dup |= ids[i] == ids[k];
        if (ids[k] <= 0 || dup) {
            snprintf(err, errlen, "%s: bucket_skus[%d] is not a SKU id of its own", what, k);
            return -1;
        }
    }
    return 0;
}

int lt_admin_create_sku(const struct lt_opts *o, int64_t *sku, int64_t *buckets, char *err,
                        size_t errlen)
{
    json_t *b = json_pack("{s:s, s:I, s:I}", "name", "seckill-loadtest", "stock",
                          (json_int_t)o->stock, "per_user_limit", (json_int_t)o->limit);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (o->sku)
        json_object_set_new(b, "id", json_integer(o->sku));
    /* Sent only when asked for: a service without the lifecycle refuses an
     * unknown field, and 0 is its default anyway. */
    if (o->payment_window_s > 0)
        json_object_set_new(b, "payment_window_s", json_integer(o->payment_window_s));
    if (o->buckets > 1) /* the same: sent only when asked for */
        json_object_set_new(b, "buckets", json_integer(o->buckets));
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    struct lt_http_answer a;
    int rc = text ? lt_admin_request(o, "POST", "/admin/v1/skus", text, &a) : -1;
    free(text);
    if (rc != 0) {
        snprintf(err, errlen, "creating the SKU: no answer from %s within %d ms", o->admin.url,
                 o->timeout_ms);
        return -1;
    }
    if (a.status != 201) {
        snprintf(err, errlen, "creating the SKU: HTTP %d %.300s", a.status, a.body);
        return -1;
    }
    json_t *j = json_loads(a.body, 0, NULL);
    json_t *id = j ? json_object_get(j, "id") : NULL;
    *sku = json_is_integer(id) ? (int64_t)json_integer_value(id) : 0;
    rc = 0;
    if (*sku <= 0) {
        snprintf(err, errlen, "creating the SKU: no id in the answer %.300s", a.body);
        rc = -1;
    } else if (o->buckets > 1) {
        rc = read_buckets(j, "creating the SKU", *sku, o->buckets, buckets, err, errlen);
    }
    json_decref(j);
    return rc;
}

int lt_admin_sku_buckets(const struct lt_opts *o, int64_t sku, int64_t *buckets, char *err,
                         size_t errlen)
{
    char path[64];
    snprintf(path, sizeof path, "/admin/v1/skus/%" PRId64, sku);
    struct lt_http_answer a;
    if (lt_admin_request(o, "GET", path, NULL, &a) != 0) {
        snprintf(err, errlen, "reading the SKU: no answer from %s within %d ms", o->admin.url,
                 o->timeout_ms);
        return -1;
    }
    if (a.status != 200) {
        snprintf(err, errlen, "reading the SKU: HTTP %d %.300s", a.status, a.body);
        return -1;
    }
    json_t *j = json_loads(a.body, 0, NULL);
    int rc = read_buckets(j, "reading the SKU", sku, o->buckets, buckets, err, errlen);
    json_decref(j);
    return rc;
}
