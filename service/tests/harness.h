/*
 * harness: what the integration tests share.  The test Redis and PostgreSQL
 * are started by scripts/run-tests.sh on free loopback ports and named by
 * SECKILL_TEST_* variables; a missing variable fails the test, never skips it.
 * Tests that need the daemon start the real binary (SECKILL_TEST_DAEMON) on a
 * free port and talk HTTP to it.
 */
#ifndef SECKILL_TEST_HARNESS_H
#define SECKILL_TEST_HARNESS_H

#include <hiredis.h>
#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/cfg.h"

#define TH_ADMIN_TOKEN "test-admin-token-0123456789abcdef"

/* Returns the value of a required environment variable or aborts the test. */
const char *th_env(const char *name);

/* A config pointing at the test stack, with short writer intervals. */
void th_cfg(struct cfg *c);

/* Empties Redis and every table, so each test starts from nothing. */
void th_reset(void);

redisContext *th_redis(void); /* new connection; caller redisFree */
PGconn *th_pg(void);          /* new connection; caller PQfinish */

/* Keeps the test Redis busy (a script spinning on TIME: nobody else is
 * served meanwhile) for about ms milliseconds; returns when it is over.
 * DEBUG SLEEP would do, but Redis 7 disables DEBUG by default. */
void th_redis_busy_ms(int ms);

/* Runs a query and returns its single integer value (aborts the test otherwise). */
long long th_pg_int(PGconn *c, const char *sql);
/* GET of an integer key; -1 if absent. */
long long th_redis_int(redisContext *r, const char *key);

struct th_daemon {
    pid_t pid;
    int port;
};

/* Starts seckilld serve on a free port with the test config plus extra
 * "NAME=value" environment entries (NULL-terminated, may be NULL); waits until
 * it listens.  Aborts the test on failure. */
void th_daemon_start(struct th_daemon *d, const char *const *extra_env);
/* Asserts that every answer the daemon gave was one its route declares
 * (seckill_http_undeclared_answers_total is 0: http/routes.c), then SIGTERM,
 * bounded wait; asserts a clean exit (status 0), SIGKILL and failure otherwise. */
int th_daemon_stop(struct th_daemon *d);

struct th_response {
    int status;
    char headers[4096]; /* the header lines, "Name: value\r\n" each (truncated) */
    char body[32768];   /* /metrics fits */
};

/* One blocking HTTP/1.1 request on a fresh connection.  'headers' is extra
 * header lines, each ending in \r\n (may be NULL); 'body' may be NULL.
 * Returns 0, or -1 on a connection error. */
int th_http(int port, const char *method, const char *path, const char *headers, const char *body,
            struct th_response *out);

/* Admin request with the test bearer token and a JSON content type. */
int th_admin(int port, const char *method, const char *path, const char *body,
             struct th_response *out);

/* Creates a SKU through the admin API; asserts 201. */
void th_create_sku(int port, int64_t id, int64_t stock, int limit);

/* Waits (bounded) until the SKU's order stream is empty: every reservation decided. */
void th_wait_drained(int64_t sku, int timeout_ms);

/* Asserts I1 (stock >= 0 and consistent with ledger and orders), I2 (Redis
 * available == skus.stock at quiescence) and I3 (no user above the limit). */
void th_assert_invariants(int64_t sku);

/* Integer value of "key" in a JSON body, or 'dflt'. */
long long th_json_int(const char *body, const char *key, long long dflt);
/* String value of "key" copied into out ("" if absent). */
void th_json_str(const char *body, const char *key, char *out, size_t cap);

#endif
