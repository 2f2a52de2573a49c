#include "harness.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/buyer_token.h"
#include "core/embedded.h"
#include "core/keys.h"
#include "order/order.h"
#include "sku/sku.h"
#include "store/pgwait.h"
#include "store/redis_conn.h"

#define TH_REDIS_TIMEOUT_MS 5000

const char *th_env(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        ck_abort_msg("%s is not set: run the tests through `make test` (scripts/run-tests.sh)",
                     name);
    return v;
}

void th_cfg(struct cfg *c)
{
    char err[160];
    cfg_defaults(c);
    ck_assert(cfg_set(c, "redis_url", th_env("SECKILL_TEST_REDIS_URL"), err, sizeof err) == 0);
    ck_assert(cfg_set(c, "pg_dsn", th_env("SECKILL_TEST_PG_DSN"), err, sizeof err) == 0);
    /* Behind pgbouncer (SECKILL_PGBOUNCER=1) the writers' session-pooled DSN. */
    const char *writer_dsn = getenv("SECKILL_TEST_PG_WRITER_DSN");
    if (writer_dsn && *writer_dsn)
        ck_assert(cfg_set(c, "pg_writer_dsn", writer_dsn, err, sizeof err) == 0);
    ck_assert(cfg_set(c, "writer_claim_idle_ms", "300", err, sizeof err) == 0);
    ck_assert(cfg_set(c, "writer_refresh_ms", "100", err, sizeof err) == 0);
    ck_assert(cfg_set(c, "writer_block_ms", "50", err, sizeof err) == 0);
    ck_assert(cfg_set(c, "writer_retry_ms", "50", err, sizeof err) == 0);
    pgwait_set_default_timeout_ms((int)c->pg_client_timeout_ms);
    embedded_init();
}

/* A connection to the test Redis named by the URL in env variable 'var'. */
static redisContext *redis_from_env(const char *var)
{
    struct rlock_url u;
    char err[320];
    ck_assert_msg(rlock_url_parse(th_env(var), &u, err, sizeof err) == 0, "%s: %s", var, err);
    redisContext *r =
        rlock_url_connect(&u, TH_REDIS_TIMEOUT_MS, TH_REDIS_TIMEOUT_MS, err, sizeof err);
    ck_assert_msg(r != NULL, "cannot connect to the test Redis (%s): %s", var, err);
    return r;
}

redisContext *th_redis(void)
{
    return redis_from_env("SECKILL_TEST_REDIS_URL");
}

redisContext *th_redis_admin(void)
{
    return redis_from_env("SECKILL_TEST_REDIS_ADMIN_URL");
}

/* A connection to the test PostgreSQL with the DSN in env variable 'var'. */
static PGconn *pg_from_env(const char *var)
{
    PGconn *c = PQconnectdb(th_env(var));
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "cannot connect to the test PostgreSQL (%s): %s",
                  var, PQerrorMessage(c));
    return c;
}

PGconn *th_pg(void)
{
    return pg_from_env("SECKILL_TEST_PG_DSN");
}

PGconn *th_pg_admin(void)
{
    return pg_from_env("SECKILL_TEST_PG_ADMIN_DSN");
}

/* Runs 'sql' (no result rows) on c or aborts the test. */
static void pg_exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

void th_scratch_table(const char *name, const char *columns)
{
    char sql[512];
    PGconn *c = th_pg_admin();
    ck_assert(snprintf(sql, sizeof sql,
                       "DROP TABLE IF EXISTS %s; CREATE TABLE %s (%s); "
                       "GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO seckill_app",
                       name, name, columns, name) < (int)sizeof sql);
    pg_exec_ok(c, sql);
    PQfinish(c);
}

void th_scratch_table_drop(const char *name)
{
    char sql[128];
    PGconn *c = th_pg_admin();
    ck_assert(snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", name) < (int)sizeof sql);
    pg_exec_ok(c, sql);
    PQfinish(c);
}

long long th_pg_int(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "query failed: %s: %s",
                  sql, PQerrorMessage(c));
    long long v = PQgetisnull(r, 0, 0) ? 0 : atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

int th_pg_backend_pid(PGconn *c)
{
    return (int)th_pg_int(c, "SELECT pg_backend_pid()");
}

long long th_redis_int(redisContext *r, const char *key)
{
    redisReply *rep = redisCommand(r, "GET %s", key);
    ck_assert(rep != NULL);
    long long v = rep->type == REDIS_REPLY_STRING ? atoll(rep->str) : -1;
    freeReplyObject(rep);
    return v;
}

long long th_stream_len(int64_t sku)
{
    char key[KEYS_MAX];
    keys_sku(key, sku, KEY_STREAM);
    redisContext *r = th_redis();
    redisReply *rep = redisCommand(r, "XLEN %s", key);
    ck_assert(rep && rep->type == REDIS_REPLY_INTEGER);
    long long n = rep->integer;
    freeReplyObject(rep);
    redisFree(r);
    return n;
}

int th_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

long long th_sku_int(int64_t sku, enum keys_kind kind)
{
    char key[KEYS_MAX];
    keys_sku(key, sku, kind);
    redisContext *r = th_redis();
    long long v = th_redis_int(r, key);
    redisFree(r);
    return v;
}

void th_reset(void)
{
    redisContext *r = th_redis_admin();
    redisReply *rep = redisCommand(r, "FLUSHALL");
    ck_assert(rep && rep->type != REDIS_REPLY_ERROR);
    freeReplyObject(rep);
    redisFree(r);
    PGconn *c = th_pg_admin();
    PGresult *res = PQexec(
        c, "TRUNCATE stock_ledger, order_cancel_requests, order_pending, orders, sku_epochs, skus "
           "RESTART IDENTITY");
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(res);
    PQfinish(c);
}

int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ck_assert(fd >= 0);
    ck_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

void th_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The daemons this process started: public port -> internal port. */
#define TH_DAEMONS_MAX 64
static struct {
    int port, metrics_port;
} daemons[TH_DAEMONS_MAX];
static size_t ndaemons;

int th_internal_port(int port)
{
    for (size_t i = 0; i < ndaemons; i++)
        if (daemons[i].port == port)
            return daemons[i].metrics_port;
    return port;
}

static void note_daemon(int port, int metrics_port)
{
    for (size_t i = 0; i < ndaemons; i++)
        if (daemons[i].port == port) {
            daemons[i].metrics_port = metrics_port;
            return;
        }
    ck_assert_msg(ndaemons < TH_DAEMONS_MAX, "more than %d daemons in one test", TH_DAEMONS_MAX);
    daemons[ndaemons].port = port;
    daemons[ndaemons].metrics_port = metrics_port;
    ndaemons++;
}

/* A free port other than 'other'. */
static int free_port_besides(int other)
{
    for (;;) {
        int p = th_free_port();
        if (p != other)
            return p;
    }
}

/* Forks seckilld serve on 'port' (internal listener on 'metrics_port') with
 * the test settings and extra_env. */
static pid_t spawn_daemon(int port, int metrics_port, const char *const *extra_env)
{
    const char *bin = th_env("SECKILL_TEST_DAEMON");
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
        setenv("SECKILL_HTTP_ADDR", addr, 1);
        snprintf(addr, sizeof addr, "127.0.0.1:%d", metrics_port);
        setenv("SECKILL_METRICS_ADDR", addr, 1);
        /* Tests read the per-SKU gauges right after they change them. */
        setenv("SECKILL_METRICS_REFRESH_MS", "0", 1);
        setenv("SECKILL_REDIS_URL", th_env("SECKILL_TEST_REDIS_URL"), 1);
        setenv("SECKILL_PG_DSN", th_env("SECKILL_TEST_PG_DSN"), 1);
        setenv("SECKILL_ADMIN_TOKEN", TH_ADMIN_TOKEN, 1);
        setenv("SECKILL_BUYER_TOKEN_SECRET", TH_BUYER_SECRET, 1);
        setenv("SECKILL_WRITER_CLAIM_IDLE_MS", "500", 1);
        setenv("SECKILL_WRITER_REFRESH_MS", "100", 1);
        setenv("SECKILL_WRITER_BLOCK_MS", "50", 1);
        setenv("SECKILL_LOG_LEVEL", "warn", 1);
        /* Every test speaks from 127.0.0.1, many as hundreds of buyers at
         * once or as one buyer many times: the rate limits are off unless a
         * test sets them (test_limits). */
        setenv("SECKILL_RATE_ADDR_PER_S", "0", 1);
        setenv("SECKILL_RATE_BUYER_ORDERS_PER_MIN", "0", 1);
        setenv("SECKILL_ADMIN_AUTH_FAIL_PER_MIN", "0", 1);
        setenv("SECKILL_PAYMENT_AUTH_FAIL_PER_MIN", "0", 1);
        for (size_t i = 0; extra_env && extra_env[i]; i++)
            putenv((char *)extra_env[i]);
        execl(bin, bin, "serve", (char *)NULL);
        _exit(127);
    }
    return pid;
}

int th_daemon_start_fails(const char *const *extra_env)
{
    int port = th_free_port();
    pid_t pid = spawn_daemon(port, free_port_besides(port), extra_env);
    int st;
    for (int i = 0; i < 400; i++) { /* 400 x 25 ms */
        if (waitpid(pid, &st, WNOHANG) == pid)
            return st;
        th_sleep_ms(25);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    ck_abort_msg("seckilld started although it should have refused to");
    return st;
}

void th_daemon_start(struct th_daemon *d, const char *const *extra_env)
{
    d->port = th_free_port();
    d->metrics_port = free_port_besides(d->port);
    note_daemon(d->port, d->metrics_port);
    d->pid = spawn_daemon(d->port, d->metrics_port, extra_env);
    /* Bounded wait for the listeners (the internal one opens last): 100 x 50 ms. */
    struct th_response resp;
    for (int i = 0; i < 100; i++) {
        if (th_http_exact(d->metrics_port, "GET", "/nothing-here", NULL, NULL, &resp) == 0 &&
            th_http_exact(d->port, "GET", "/nothing-here", NULL, NULL, &resp) == 0)
            return;
        int st;
        ck_assert_msg(waitpid(d->pid, &st, WNOHANG) == 0, "seckilld exited during start-up");
        th_sleep_ms(50);
    }
    ck_abort_msg("seckilld did not start listening on port %d", d->port);
}

/* Every answer a test provoked must be one its route declares: the route
 * table is what docs/openapi.json is checked against. */
static void assert_answers_declared(const struct th_daemon *d)
{
    struct th_response m;
    if (th_http(d->port, "GET", "/metrics", NULL, NULL, &m) != 0)
        return; /* the daemon is not answering (a test froze or broke it) */
    const char *name = "\nseckill_http_undeclared_answers_total ";
    const char *p = strstr(m.body, name);
    ck_assert_msg(p, "/metrics lacks seckill_http_undeclared_answers_total");
    ck_assert_msg(atoll(p + strlen(name)) == 0,
                  "seckilld gave answers its routes do not declare (see its log: \"does not "
                  "declare\"); add them to http/routes.c and docs/openapi.json, or fix the answer");
}

int th_daemon_stop(struct th_daemon *d)
{
    int st = 0;
    if (d->pid <= 0)
        return 0;
    if (kill(d->pid, 0) == 0)
        assert_answers_declared(d);
    kill(d->pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            /* A clean shutdown is part of the contract; under ASan a memory
             * error or leak in the daemon shows up here as a non-zero exit. */
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                          "seckilld did not exit cleanly (status %d)", st);
            return st;
        }
        th_sleep_ms(25);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &st, 0);
    d->pid = 0;
    ck_abort_msg("seckilld did not stop within 5 s of SIGTERM");
    return st;
}

int th_http(int port, const char *method, const char *path, const char *headers, const char *body,
            struct th_response *out)
{
    if (strncmp(path, "/admin/", 7) == 0 || strncmp(path, "/metrics", 8) == 0)
        port = th_internal_port(port);
    return th_http_exact(port, method, path, headers, body, out);
}

int th_http_exact(int port, const char *method, const char *path, const char *headers,
                  const char *body, struct th_response *out)
{
    memset(out, 0, sizeof *out);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    size_t blen = body ? strlen(body) : 0;
    size_t cap = 1024 + blen + (headers ? strlen(headers) : 0);
    char *req = malloc(cap);
    ck_assert(req != NULL);
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, headers ? headers : "", blen, body ? body : "");
    ssize_t sent = 0;
    while (sent < n) {
        ssize_t w = write(fd, req + sent, (size_t)(n - sent));
        if (w <= 0)
            break;
        sent += w;
    }
    free(req);
    char buf[16384];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got == sizeof buf - 1)
            break;
    }
    close(fd);
    buf[got] = '\0';
    if (sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1)
        return -1;
    char *b = strstr(buf, "\r\n\r\n");
    if (b) {
        snprintf(out->body, sizeof out->body, "%s", b + 4);
        const char *h = strstr(buf, "\r\n") + 2;
        snprintf(out->headers, sizeof out->headers, "%.*s", (int)(b + 2 - h), h);
    }
    return 0;
}

long long th_metric(int port, const char *sample)
{
    struct th_response m;
    ck_assert_int_eq(th_http(port, "GET", "/metrics", NULL, NULL, &m), 0);
    ck_assert_int_eq(m.status, 200);
    char want[160];
    snprintf(want, sizeof want, "\n%s ", sample);
    const char *p = strstr(m.body, want);
    ck_assert_msg(p, "/metrics lacks %s", sample);
    return atoll(p + strlen(want));
}

int th_admin(int port, const char *method, const char *path, const char *body,
             struct th_response *out)
{
    return th_http(port, method, path,
                   "Authorization: Bearer " TH_ADMIN_TOKEN "\r\nContent-Type: application/json\r\n",
                   body, out);
}

char *th_buyer_token(int64_t user, char *out, size_t cap)
{
    int64_t now = (int64_t)time(NULL);
    int n =
        buyer_token_sign(TH_BUYER_SECRET, strlen(TH_BUYER_SECRET), user, now, now + 3600, out, cap);
    ck_assert_msg(n > 0, "cannot sign a buyer token for user %lld", (long long)user);
    return out;
}

char *th_buyer_auth(int64_t user, char *out, size_t cap)
{
    char token[TH_BUYER_AUTH_MAX - 32]; /* room for the header's name */
    th_buyer_token(user, token, sizeof token);
    ck_assert(snprintf(out, cap, "Authorization: Bearer %s\r\n", token) < (int)cap);
    return out;
}

int th_order(int port, int64_t sku, int64_t user, int64_t qty, const char *idem,
             struct th_response *out)
{
    char path[64], body[96], headers[1024], auth[TH_BUYER_AUTH_MAX];
    snprintf(path, sizeof path, "/api/v1/skus/%lld/orders", (long long)sku);
    snprintf(body, sizeof body, "{\"user_id\":%lld,\"qty\":%lld}", (long long)user, (long long)qty);
    snprintf(headers, sizeof headers, "Content-Type: application/json\r\n%s%s%s%s",
             th_buyer_auth(user, auth, sizeof auth), idem ? "Idempotency-Key: " : "",
             idem ? idem : "", idem ? "\r\n" : "");
    ck_assert_msg(th_http(port, "POST", path, headers, body, out) == 0, "POST %s: no HTTP answer",
                  path);
    return out->status;
}

void th_sku_create_direct(const struct cfg *c, int64_t id, int64_t stock, int limit,
                          int64_t window_s)
{
    struct worker_ctx w;
    char err[160];
    ck_assert_msg(worker_ctx_init(&w, c, err, sizeof err) == 0, "%s", err);
    struct validate_sku spec = {.has_id = 1,
                                .id = id,
                                .stock = stock,
                                .per_user_limit = limit,
                                .payment_window_s = window_s};
    snprintf(spec.name, sizeof spec.name, "sku %lld", (long long)id);
    json_t *out;
    ck_assert_int_eq(sku_create(&w, &spec, &out), SKU_OK);
    json_decref(out);
    worker_ctx_close(&w);
}

int64_t th_reserve(const struct cfg *c, int64_t sku, int64_t user, int64_t qty)
{
    struct redis_conn rc;
    char err[160];
    ck_assert_msg(redis_conn_init(&rc, c, err, sizeof err) == 0, "%s", err);
    struct order_reserve_call call = {0};
    order_reserve_begin(&call, sku, 60, 60, INT64_MAX);
    order_reserve_add(&call, user, qty, NULL, 0, 0, 1);
    order_reserve_argv(&call);
    redisReply *r =
        redis_conn_script(&rc, &script_reserve, call.nkeys, call.nargs, call.argv, NULL);
    const redisReply *one = order_reserve_reply_at(r, 1, 0);
    ck_assert(one && one->type == REDIS_REPLY_ARRAY && one->elements >= 2);
    ck_assert_str_eq(one->element[0]->str, "ok");
    int64_t id = atoll(one->element[1]->str);
    freeReplyObject(r);
    order_reserve_free(&call);
    redis_conn_close(&rc);
    return id;
}

void th_create_sku(int port, int64_t id, int64_t stock, int limit)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"id\":%lld,\"name\":\"sku %lld\",\"stock\":%lld,\"per_user_limit\":%d}",
             (long long)id, (long long)id, (long long)stock, limit);
    struct th_response r;
    ck_assert_int_eq(th_admin(port, "POST", "/admin/v1/skus", body, &r), 0);
    ck_assert_msg(r.status == 201, "create sku: %d %s", r.status, r.body);
}

void th_wait_drained(int64_t sku, int timeout_ms)
{
    char stream[KEYS_MAX];
    keys_sku(stream, sku, KEY_STREAM);
    redisContext *r = th_redis();
    for (int waited = 0;; waited += 20) {
        redisReply *rep = redisCommand(r, "XLEN %s", stream);
        ck_assert(rep && rep->type == REDIS_REPLY_INTEGER);
        long long n = rep->integer;
        freeReplyObject(rep);
        if (n == 0)
            break;
        ck_assert_msg(waited < timeout_ms, "order stream of sku %lld not drained: %lld left",
                      (long long)sku, n);
        th_sleep_ms(20);
    }
    redisFree(r);
}

void th_assert_invariants(int64_t sku)
{
    PGconn *c = th_pg();
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)sku);
    const char *p[] = {id};
    PGresult *r = PQexecParams(c, sql_text("invariant_check"), 1, NULL, p, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    ck_assert_msg(PQntuples(r) == 0, "I1 violated for sku %s: stock %s expected %s ledger %s", id,
                  PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3));
    PQclear(r);
    char q[256];
    snprintf(q, sizeof q, "SELECT stock FROM skus WHERE id = %s", id);
    long long db = th_pg_int(c, q);
    snprintf(q, sizeof q,
             "SELECT count(*) FROM (SELECT user_id FROM orders o JOIN skus s ON s.id = o.sku_id "
             "WHERE o.sku_id = %s AND o.status IN ('confirmed', 'paid') "
             "GROUP BY user_id, s.per_user_limit HAVING sum(o.qty) > s.per_user_limit) x",
             id);
    ck_assert_msg(th_pg_int(c, q) == 0, "I3 violated: a user holds more than the limit");
    char key[KEYS_MAX];
    keys_sku(key, sku, KEY_STOCK);
    redisContext *rc = th_redis();
    long long avail = th_redis_int(rc, key);
    ck_assert_msg(avail == db, "I2 violated: redis available %lld, database stock %lld", avail, db);
    /* and every buyer's units held, as the active (confirmed, paid) orders say */
    keys_sku(key, sku, KEY_BOUGHT);
    redisReply *held = redisCommand(rc, "HGETALL %s", key);
    ck_assert(held && held->type == REDIS_REPLY_ARRAY);
    size_t buyers = 0; /* fields that are user ids, not buyers' buckets */
    for (size_t i = 0; i + 1 < held->elements; i += 2)
        buyers += (size_t)keys_bought_is_user(held->element[i]->str);
    snprintf(q, sizeof q,
             "SELECT count(DISTINCT user_id) FROM orders WHERE sku_id = %s "
             "AND status IN ('confirmed', 'paid')",
             id);
    ck_assert_msg((long long)buyers == th_pg_int(c, q),
                  "I2 violated: Redis holds units for %zu buyers, the database for %lld", buyers,
                  th_pg_int(c, q));
    for (size_t i = 0; i + 1 < held->elements; i += 2) {
        if (!keys_bought_is_user(held->element[i]->str))
            continue;
        snprintf(q, sizeof q,
                 "SELECT coalesce(sum(qty), 0) FROM orders WHERE sku_id = %s AND user_id = %s "
                 "AND status IN ('confirmed', 'paid')",
                 id, held->element[i]->str);
        ck_assert_msg(atoll(held->element[i + 1]->str) == th_pg_int(c, q),
                      "I2 violated: Redis says user %s holds %s units, the database %lld",
                      held->element[i]->str, held->element[i + 1]->str, th_pg_int(c, q));
    }
    freeReplyObject(held);
    redisFree(rc);
    PQfinish(c);
}

long long th_json_int(const char *body, const char *key, long long dflt)
{
    json_t *o = json_loads(body, 0, NULL);
    json_t *v = o ? json_object_get(o, key) : NULL;
    long long r = json_is_integer(v) ? json_integer_value(v) : dflt;
    json_decref(o);
    return r;
}

void th_json_str(const char *body, const char *key, char *out, size_t cap)
{
    json_t *o = json_loads(body, 0, NULL);
    json_t *v = o ? json_object_get(o, key) : NULL;
    snprintf(out, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
    json_decref(o);
}

void th_redis_busy_ms(int ms)
{
    static const char spin[] = "local t0 = redis.call('TIME') "
                               "local t = t0 "
                               "repeat t = redis.call('TIME') "
                               "until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) >= "
                               "tonumber(ARGV[1]) * 1000 "
                               "return 1";
    redisContext *rc = th_redis_admin();
    char arg[16];
    snprintf(arg, sizeof arg, "%d", ms);
    redisReply *rep = redisCommand(rc, "EVAL %s 0 %s", spin, arg);
    ck_assert_msg(rep && rep->type == REDIS_REPLY_INTEGER, "busy script failed: %s",
                  rep && rep->type == REDIS_REPLY_ERROR ? rep->str : rc->errstr);
    freeReplyObject(rep);
    redisFree(rc);
}

/* Reads the SKU's stream entries as a consumer named 'consumer' (they become
 * pending for it, as if that writer had taken them). */
size_t th_read_entries(int64_t sku, const char *consumer, struct writer_entry *e, size_t max)
{
    char stream[KEYS_MAX];
    keys_sku(stream, sku, KEY_STREAM);
    redisContext *r = th_redis();
    redisReply *rep = redisCommand(r, "XREADGROUP GROUP %s %s COUNT %d STREAMS %s >",
                                   KEYS_WRITER_GROUP, consumer, (int)max, stream);
    ck_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1);
    redisReply *list = rep->element[0]->element[1];
    size_t n = 0;
    for (size_t i = 0; i < list->elements && n < max; i++, n++) {
        redisReply *ent = list->element[i];
        memset(&e[n], 0, sizeof e[n]);
        snprintf(e[n].stream_id, sizeof e[n].stream_id, "%s", ent->element[0]->str);
        e[n].reserved_ms = atoll(e[n].stream_id);
        redisReply *f = ent->element[1];
        for (size_t k = 0; k + 1 < f->elements; k += 2) {
            const char *key = f->element[k]->str, *v = f->element[k + 1]->str;
            if (!strcmp(key, "o"))
                e[n].order_id = atoll(v);
            else if (!strcmp(key, "u"))
                e[n].user_id = atoll(v);
            else if (!strcmp(key, "q"))
                e[n].qty = atoll(v);
        }
    }
    freeReplyObject(rep);
    redisFree(r);
    return n;
}
