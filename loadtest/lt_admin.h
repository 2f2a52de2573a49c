/*
 * lt_admin: the few blocking admin calls of a run's set-up (create the SKU,
 * look at it), each one request on a private event loop with a bounded wait.
 */
#ifndef LT_ADMIN_H
#define LT_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "lt_opts.h"

#define LT_ADMIN_BODY_MAX 4096

struct lt_http_answer {
    int status; /* 0: no answer (connection error or timeout) */
    char body[LT_ADMIN_BODY_MAX];
};

/* One request to o->host:o->port with the admin token (when o->token is set)
 * and, for a body, a JSON content type.  Waits at most o->timeout_ms.
 * Returns 0 when an answer arrived (any status), -1 otherwise. */
int lt_admin_request(const struct lt_opts *o, const char *method, const char *path,
                     const char *body, struct lt_http_answer *out);

/* Creates the run's SKU (id o->sku, or one the service picks when 0) with
 * o->stock, o->limit, (when not 0) o->payment_window_s and (when above 1)
 * o->buckets.  Returns 0 and its id in *sku, with o->buckets > 1 the ids of
 * its bucket SKUs in bucket order in buckets[0..o->buckets-1], or -1 with a
 * message in err (also when the answer names no such buckets: a service
 * without them). */
int lt_admin_create_sku(const struct lt_opts *o, int64_t *sku, int64_t *buckets, char *err,
                        size_t errlen) __attribute__((warn_unused_result));

/* Reads the o->buckets bucket SKUs of the existing SKU sku (its admin view's
 * bucket_skus, in bucket order) into buckets.  Returns 0, or -1 with a
 * message in err (not a parent of that many buckets, or no answer). */
int lt_admin_sku_buckets(const struct lt_opts *o, int64_t sku, int64_t *buckets, char *err,
                         size_t errlen) __attribute__((warn_unused_result));

#endif
