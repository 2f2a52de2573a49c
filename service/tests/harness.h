/*
 * harness: what the integration tests share.  The test Redis and PostgreSQL
 * are started by scripts/run-tests.sh on free loopback ports and named by
 * SECKILL_TEST_* variables; a missing variable fails the test, never skips it.
 * Tests that need the daemon start the real binary (SECKILL_TEST_DAEMON) on a
 * free port and talk HTTP to it.
 */
#ifndef SECKILL_TEST_HARNESS_H
#define SECKILL_TEST_HARNESS_H

#include <check.h>
#include <hiredis.h>
#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/cfg.h"
#include "core/keys.h"
#include "order/order_writer.h"

#define TH_ADMIN_TOKEN "test-admin-token-0123456789abcdef"
/* The daemons' buyer_token_secret (SECKILL_BUYER_TOKEN_SECRET). */
#define TH_BUYER_SECRET "test-buyer-token-secret-0123456789abcdef"
#define TH_BUYER_AUTH_MAX 512

/* Returns the value of a required environment variable or aborts the test. */
const char *th_env(const char *name);

/* A config pointing at the test stack, with short writer intervals. */
void th_cfg(struct cfg *c);

/* A loopback TCP port free at the time of the call. */
int th_free_port(void);

/* Sleeps ms milliseconds (EINTR resumes the rest). */
void th_sleep_ms(long ms);

/* Runs every test of s; the exit status of a test binary's main(). */
int th_run(Suite *s);

/* Empties Redis and every table, so each test starts from nothing. */
void th_reset(void);

/* New connection as the service's ACL user (what seckilld may do); caller redisFree. */
redisContext *th_redis(void);
/* New connection as the stack's admin ACL user (FLUSHALL, SCRIPT FLUSH, CLIENT
 * KILL: what a test does to Redis, never the service); caller redisFree. */
redisContext *th_redis_admin(void);
/* New connection as the service's role seckill_app (what seckilld may do);
 * caller PQfinish. */
PGconn *th_pg(void);
/* New connection as the stack's superuser (TRUNCATE, pg_terminate_backend,
 * tampered rows: what a test does to the database, never the service);
 * caller PQfinish. */
PGconn *th_pg_admin(void);
/* (Re)creates the scratch table 'name' with 'columns' as the superuser and
 * grants the service's role its rows (SELECT, INSERT, UPDATE, DELETE): tests
 * of the transaction machinery need a table of their own, and the service's
 * role may not create one.  th_scratch_table_drop drops it again. */
void th_scratch_table(const char *name, const char *columns);
void th_scratch_table_drop(const char *name);

/* Keeps the test Redis busy (a script spinning on TIME: nobody else is
 * served meanwhile) for about ms milliseconds; returns when it is over.
 * DEBUG SLEEP would do, but Redis 7 disables DEBUG by default. */
void th_redis_busy_ms(int ms);

/* Runs a query and returns its single integer value (aborts the test otherwise). */
long long th_pg_int(PGconn *c, const char *sql);
/* The server process behind c, asked of the server: through pgbouncer
 * PQbackendPID() is pgbouncer's own number, not a PostgreSQL backend's. */
int th_pg_backend_pid(PGconn *c);
/* GET of an integer key; -1 if absent. */
long long th_redis_int(redisContext *r, const char *key);
/* th_redis_int of SKU sku's key 'kind' (keys.h), on a connection of its own. */
long long th_sku_int(int64_t sku, enum keys_kind kind);
/* XLEN of SKU sku's order stream, on a connection of its own. */
long long th_stream_len(int64_t sku);

/* Reads up to max of the SKU's new stream entries as consumer 'consumer' of
 * the writers' group (they become pending for it, as if that writer had
 * taken them) into e.  Returns how many. */
size_t th_read_entries(int64_t sku, const char *consumer, struct writer_entry *e, size_t max);

struct th_daemon {
    pid_t pid;
    int port;         /* the public listener (http_addr): the buyer API */
    int metrics_port; /* the internal one (metrics_addr): /metrics, /healthz, admin */
};

/* Starts seckilld serve on two free ports (public and internal) with the test
 * config plus extra "NAME=value" environment entries (NULL-terminated, may be
 * NULL); waits until both listen.  Aborts the test on failure. */
void th_daemon_start(struct th_daemon *d, const char *const *extra_env);
/* Runs seckilld serve like th_daemon_start, expecting it to refuse to
 * start: returns its exit status (bounded wait; aborts the test when it is
 * still running, after killing it). */
int th_daemon_start_fails(const char *const *extra_env);
/* Asserts that every answer the daemon gave was one its route declares
 * (seckill_http_undeclared_answers_total is 0: http/routes.c), then SIGTERM,
 * bounded wait; asserts a clean exit (status 0), SIGKILL and failure otherwise. */
int th_daemon_stop(struct th_daemon *d);

struct th_response {
    int status;
    char headers[4096]; /* the header block, status line excluded, lines ending in \r\n */
    char body[32768];   /* /metrics fits */
};

/* One blocking HTTP/1.1 request on a fresh connection.  'headers' is extra
 * header lines, each ending in \r\n (may be NULL); 'body' may be NULL.
 * Returns 0, or -1 on a connection error.  As an operator's tools do, a
 * request for /metrics or the admin area given a daemon's public port goes
 * to that daemon's internal port (th_http_exact does not). */
int th_http(int port, const char *method, const char *path, const char *headers, const char *body,
            struct th_response *out);
/* The same on exactly 'port', whatever the path. */
int th_http_exact(int port, const char *method, const char *path, const char *headers,
                  const char *body, struct th_response *out);
/* The internal port of the daemon started on public port 'port' (port
 * itself when no daemon of this process has it). */
int th_internal_port(int port);
/* The value of one /metrics sample of the daemon on port, e.g.
 * seckill_rate_limited_total{scope="addr"} (the test fails without it). */
long long th_metric(int port, const char *sample);

/* Admin request with the test bearer token and a JSON content type. */
int th_admin(int port, const char *method, const char *path, const char *body,
             struct th_response *out);

/* A buyer token for 'user', valid for an hour, signed with TH_BUYER_SECRET,
 * into out (cap >= TH_BUYER_AUTH_MAX).  Returns out. */
char *th_buyer_token(int64_t user, char *out, size_t cap);
/* The same as the header line "Authorization: Bearer <token>\r\n". */
char *th_buyer_auth(int64_t user, char *out, size_t cap);

/* POST /api/v1/skus/{sku}/orders as buyer 'user' (their token; the body
 * names them too), with an Idempotency-Key unless idem is NULL.  Returns the
 * status; a connection error fails the test. */
int th_order(int port, int64_t sku, int64_t user, int64_t qty, const char *idem,
             struct th_response *out);

/* Creates a SKU through the admin API; asserts 201. */
void th_create_sku(int port, int64_t id, int64_t stock, int limit);

/* Without a daemon: creates (and loads) a SKU through sku_create with config
 * c, with a payment window of window_s seconds (0: none); asserts success. */
void th_sku_create_direct(const struct cfg *c, int64_t id, int64_t stock, int limit,
                          int64_t window_s);
/* Without a daemon: reserves qty units for user through reserve.lua, as the
 * HTTP path does; asserts it was taken and returns the order id. */
int64_t th_reserve(const struct cfg *c, int64_t sku, int64_t user, int64_t qty);

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
