/*
 * Every PostgreSQL wait ends on the client side, and a Redis connection the
 * server closed never fails a call.
 *
 * "Frozen" is the test PostgreSQL with its postmaster and every child
 * SIGSTOPped: the kernel still accepts and acknowledges, nobody answers.
 * Three things thaw it, whatever happens to the test: the test itself; a
 * guard process (its own session, so a kill of the test's process group
 * spares it) that thaws when the test process ends or after FREEZE_MAX_MS;
 * and the runner's unchecked teardown, in the parent process.  Timing
 * assertions are liveness bounds (a multiple of the deadline), never tight.
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/keys.h"
#include "harness.h"
#include "store/db.h"
#include "store/dbtx.h"
#include "store/pgwait.h"
#include "store/redis_conn.h"
#include "store/txlock.h"
#include <rlock/rlock.h>
#include <rlock/watch.h>

/* The client deadline of the frozen tests, and the multiple of it within
 * which a wait must have ended ("returned at all"). */
#define DEADLINE_MS 400
#define LIVENESS_FACTOR 5
/* The longest the guard lets PostgreSQL stay frozen. */
#define FREEZE_MAX_MS 60000

static pid_t postmaster; /* found while PostgreSQL answers, before any test */

/* Parent pid of pid from /proc, or -1. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
    char *p = strrchr(buf, ')');
    int ppid;
    if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

/* Sends sig to the postmaster's children (every PostgreSQL process but it). */
static void signal_children(int sig)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end == '\0' && pid > 0 && parent_of((pid_t)pid) == postmaster)
            kill((pid_t)pid, sig);
    }
    closedir(d);
}

static void thaw_all(void)
{
    if (postmaster <= 0)
        return;
    signal_children(SIGCONT);
    kill(postmaster, SIGCONT);
}

/* Unchecked fixture: runs in the runner process, around the whole case. */
static void find_postmaster(void)
{
    PGconn *c = th_pg();
    postmaster = parent_of((pid_t)th_pg_int(c, "SELECT pg_backend_pid()"));
    PQfinish(c);
    ck_assert_msg(postmaster > 1, "cannot find the test PostgreSQL's postmaster");
}

static void thaw_after_case(void)
{
    thaw_all();
}

static pid_t guard = -1;
static int guard_pipe = -1; /* its write end: closing it (or dying) wakes the guard */

static void freeze(void)
{
    int p[2];
    ck_assert(pipe2(p, O_CLOEXEC) == 0);
    guard = fork();
    ck_assert(guard >= 0);
    if (guard == 0) {
        (void)setsid();
        close(p[1]);
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        (void)poll(&pf, 1, FREEZE_MAX_MS);
        thaw_all();
        _exit(0);
    }
    close(p[0]);
    guard_pipe = p[1];
    /* The postmaster first, so that it forks no child we would miss. */
    ck_assert(kill(postmaster, SIGSTOP) == 0);
    signal_children(SIGSTOP);
}

static void thaw(void)
{
    thaw_all();
    if (guard_pipe >= 0) {
        close(guard_pipe);
        guard_pipe = -1;
        waitpid(guard, NULL, 0);
        guard = -1;
    }
}

static pid_t redis_server; /* found while Redis answers, before any test */

/* Unchecked fixture: the test Redis's pid, in the runner process. */
static void find_redis_server(void)
{
    redisContext *r = th_redis_admin();
    redisReply *info = redisCommand(r, "INFO server");
    ck_assert(info && info->type == REDIS_REPLY_STRING);
    const char *p = strstr(info->str, "process_id:");
    ck_assert(p != NULL);
    redis_server = (pid_t)atol(p + strlen("process_id:"));
    freeReplyObject(info);
    redisFree(r);
    ck_assert_msg(redis_server > 1, "cannot find the test Redis's pid");
}

static void thaw_redis(void)
{
    if (redis_server > 0)
        kill(redis_server, SIGCONT);
}

/* Frozen until thaw_redis(), the runner's teardown, or a guard like
 * freeze()'s that thaws it when the test process ends. */
static void freeze_redis(void)
{
    pid_t test = getpid();
    pid_t g = fork();
    ck_assert(g >= 0);
    if (g == 0) {
        (void)setsid();
        for (int waited = 0; waited < FREEZE_MAX_MS && kill(test, 0) == 0; waited += 100)
            th_sleep_ms(100);
        thaw_redis();
        _exit(0);
    }
    ck_assert(kill(redis_server, SIGSTOP) == 0);
}

static void thaw_redis_after_case(void)
{
    thaw_redis();
}

/* A config whose PostgreSQL waits end after DEADLINE_MS. */
static void short_deadline_cfg(struct cfg *c)
{
    char err[160], v[24];
    th_cfg(c);
    snprintf(v, sizeof v, "%d", DEADLINE_MS / 2);
    ck_assert(cfg_set(c, "pg_statement_timeout_ms", v, err, sizeof err) == 0);
    snprintf(v, sizeof v, "%d", DEADLINE_MS);
    ck_assert(cfg_set(c, "pg_client_timeout_ms", v, err, sizeof err) == 0);
    ck_assert_msg(cfg_check(c, err, sizeof err) == 0, "%s", err);
    pgwait_set_default_timeout_ms(DEADLINE_MS);
}

START_TEST(test_statement_on_frozen_postgres_gives_up_and_the_next_use_reconnects)
{
    struct cfg c;
    short_deadline_cfg(&c);
    struct db_conn d;
    db_conn_init(&d, &c);
    ck_assert_int_eq(db_ping(&d), 0);

    freeze();
    int64_t t0 = rlock_mono_ms();
    PGresult *r = db_query(&d, "sku_ids_active", 0, NULL);
    int64_t took = rlock_mono_ms() - t0;
    struct pgwait w;
    pgwait_start(&w, 0, NULL);
    t0 = rlock_mono_ms();
    PGconn *fresh =
        pgwait_connect(&w, (const char *[]){"dbname", NULL}, (const char *[]){c.pg_dsn, NULL});
    /* pgbouncer (make test PGBOUNCER=1) answers a connection itself, frozen
     * server or not: there the connection's first statement is what must give
     * up at the deadline. */
    const char *bouncer = getenv("SECKILL_TEST_PG_WRITER_DSN");
    if (fresh && bouncer && *bouncer) {
        PGresult *q = pgwait_query(&w, fresh, "SELECT 1");
        ck_assert_ptr_null(q);
        PQfinish(fresh);
        fresh = NULL;
    }
    int64_t connect_took = rlock_mono_ms() - t0;
    thaw();

    ck_assert_ptr_null(r);
    ck_assert_msg(took < LIVENESS_FACTOR * DEADLINE_MS, "query waited %lld ms", (long long)took);
    ck_assert_ptr_null(d.conn); /* the connection that did not answer is dropped */
    ck_assert_ptr_null(fresh);
    ck_assert_msg(strstr(w.err, "no answer within") != NULL, "%s", w.err);
    ck_assert_msg(connect_took < LIVENESS_FACTOR * DEADLINE_MS, "connect waited %lld ms",
                  (long long)connect_took);
    /* Thawed, the next use connects again. */
    ck_assert_int_eq(db_ping(&d), 0);
    ck_assert_ptr_nonnull(d.conn);
    db_conn_close(&d);
    cfg_free(&c);
}
END_TEST

/* A pipeline sent to a frozen server gives up at the deadline like a single
 * statement, and closes the connection under its owner. */
START_TEST(test_pipeline_on_frozen_postgres_gives_up)
{
    struct cfg c;
    short_deadline_cfg(&c);
    struct db_conn d;
    db_conn_init(&d, &c);
    ck_assert_int_eq(db_ping(&d), 0);
    PGconn *conn = db_conn_get(&d);
    ck_assert_ptr_nonnull(conn);

    const struct pgwait_stmt q[] = {{.sql = "SELECT 1"}, {.sql = "SELECT 2"}};
    PGresult *r[2];
    struct pgwait w;
    freeze();
    pgwait_start(&w, DEADLINE_MS, NULL);
    int64_t t0 = rlock_mono_ms();
    int rc = pgwait_pipeline(&w, conn, 2, q, r);
    int64_t took = rlock_mono_ms() - t0;
    thaw();

    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_null(r[0]);
    ck_assert_ptr_null(r[1]);
    ck_assert_msg(strstr(w.err, "no answer within") != NULL, "%s", w.err);
    ck_assert_msg(took < LIVENESS_FACTOR * DEADLINE_MS, "pipeline waited %lld ms", (long long)took);
    ck_assert_int_eq(PQstatus(conn), CONNECTION_BAD);
    db_conn_close(&d);
    cfg_free(&c);
}
END_TEST

static void record_outcome(enum dbtx_outcome outcome, void *arg)
{
    *(int *)arg = (int)outcome;
}

/* A COMMIT the frozen server never answered may still commit when it wakes
 * (it is in the socket's buffer): "unknown", never "rolled back". */
START_TEST(test_commit_without_answer_is_unknown_not_rolled_back)
{
    struct cfg c;
    short_deadline_cfg(&c);
    th_scratch_table("pgwait_probe", "k text PRIMARY KEY");
    PGconn *conn = th_pg();
    PGconn *check = th_pg();
    char err[512];
    struct dbtx *tx = dbtx_begin(conn, c.pg_dsn, DBTX_ISO_DEFAULT, err, sizeof err);
    ck_assert_msg(tx != NULL, "%s", err);
    char txid[24];
    snprintf(txid, sizeof txid, "%lld", dbtx_txid(tx));
    int outcome = -1;
    ck_assert_int_eq(dbtx_on_complete(tx, record_outcome, &outcome), 0);
    PGresult *r = dbtx_exec(tx, "INSERT INTO pgwait_probe VALUES ('unanswered')", 0, NULL);
    ck_assert_ptr_nonnull(r);
    PQclear(r);

    freeze();
    int64_t t0 = rlock_mono_ms();
    enum dbtx_outcome got = dbtx_commit(tx, err, sizeof err, NULL);
    int64_t took = rlock_mono_ms() - t0;
    thaw();

    ck_assert_int_eq(got, DBTX_UNKNOWN);
    ck_assert_int_eq(outcome, DBTX_UNKNOWN);
    ck_assert_msg(strstr(err, "no answer") != NULL, "%s", err);
    /* COMMIT, then the lookup's connect: each bounded. */
    ck_assert_msg(took < 2 * LIVENESS_FACTOR * DEADLINE_MS, "commit waited %lld ms",
                  (long long)took);
    ck_assert_int_eq(PQstatus(conn), CONNECTION_BAD);
    /* Awake, the server runs the COMMIT it had received: unknown was right. */
    char q[96];
    snprintf(q, sizeof q, "SELECT (txid_status(%s) = 'committed')::int", txid);
    long long committed = 0;
    for (int i = 0; i < 100 && !committed; i++) {
        committed = th_pg_int(check, q);
        if (!committed)
            th_sleep_ms(50);
    }
    ck_assert_int_eq(committed, 1);
    ck_assert_int_eq(th_pg_int(check, "SELECT count(*) FROM pgwait_probe"), 1);
    PQfinish(check);
    th_scratch_table_drop("pgwait_probe");
    PQfinish(conn);
    cfg_free(&c);
}
END_TEST

/* The health probes' defaults (the daemons here keep them unless they set
 * HEALTH_TIMEOUT_MS below): a stalled store is reported down within their sum. */
#define PROBE_INTERVAL_MS 250
#define DEFAULT_HEALTH_TIMEOUT_MS 1000

/* Asks /healthz every 20 ms until it answers 'want', for at most bound_ms.
 * Each check answers at once from the probes' latest result, never waiting
 * on a store: *slowest gets the longest one.  Returns the time to the first
 * 'want' (h holds it), or -1 (h holds the last answer). */
static int64_t healthz_until(int port, int want, int64_t bound_ms, struct th_response *h,
                             int64_t *slowest)
{
    int64_t t0 = rlock_mono_ms();
    *slowest = 0;
    for (;;) {
        int64_t t1 = rlock_mono_ms();
        int rc = th_http(port, "GET", "/healthz", NULL, NULL, h);
        int64_t now = rlock_mono_ms();
        if (now - t1 > *slowest)
            *slowest = now - t1;
        if (rc == 0 && h->status == want)
            return now - t0;
        if (now - t0 > bound_ms)
            return -1;
        th_sleep_ms(20);
    }
}

START_TEST(test_healthz_and_lookup_answer_503_while_postgres_is_frozen)
{
    th_reset();
    char client[64], statement[64];
    snprintf(statement, sizeof statement, "SECKILL_PG_STATEMENT_TIMEOUT_MS=%d", DEADLINE_MS);
    snprintf(client, sizeof client, "SECKILL_PG_CLIENT_TIMEOUT_MS=%d", 2 * DEADLINE_MS);
    const char *env[] = {statement, client, NULL};
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 1, 10, 1);
    struct th_response h, sku;
    ck_assert_int_eq(th_http(d.port, "GET", "/healthz", NULL, NULL, &h), 0);
    ck_assert_int_eq(h.status, 200);

    freeze();
    int64_t slowest;
    int64_t health_took = healthz_until(
        d.port, 503, LIVENESS_FACTOR * (PROBE_INTERVAL_MS + DEFAULT_HEALTH_TIMEOUT_MS), &h,
        &slowest);
    int64_t t0 = rlock_mono_ms();
    int src = th_http(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &sku);
    int64_t sku_took = rlock_mono_ms() - t0;
    thaw();

    ck_assert_msg(health_took >= 0, "healthz while frozen: status %d %s", h.status, h.body);
    char pg[16];
    th_json_str(h.body, "postgres", pg, sizeof pg);
    ck_assert_str_eq(pg, "down");
    ck_assert_msg(slowest < LIVENESS_FACTOR * DEADLINE_MS,
                  "a health check took %lld ms while frozen", (long long)slowest);
    ck_assert_msg(src == 0 && sku.status == 503, "lookup while frozen: rc %d status %d %s", src,
                  sku.status, sku.body);
    ck_assert_msg(sku_took < 2 * LIVENESS_FACTOR * DEADLINE_MS, "lookup took %lld ms",
                  (long long)sku_took);
    /* Thawed: healthy again after the next probe. */
    ck_assert_msg(healthz_until(d.port, 200,
                                LIVENESS_FACTOR * (PROBE_INTERVAL_MS + DEFAULT_HEALTH_TIMEOUT_MS),
                                &h, &slowest) >= 0,
                  "healthz after thaw: %d %s", h.status, h.body);
    ck_assert_int_eq(th_http(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &sku), 0);
    ck_assert_int_eq(sku.status, 200);
    th_daemon_stop(&d);
}
END_TEST

/* The request deadline and health bound of the daemons below: far under
 * pg_client_timeout_ms (6 s by default), whose one wait per store call made
 * a lookup take 12 s while PostgreSQL was frozen. */
#define REQUEST_DEADLINE_MS 2000
#define HEALTH_TIMEOUT_MS 500
/* Lookups sent at once while frozen: more than the two workers. */
#define SLOW_LOOKUPS 6

/* A daemon with the deadlines above and otherwise default store timeouts
 * (an order's own waits fit in the request's deadline: order_ack_wait_ms). */
static void deadline_daemon_start(struct th_daemon *d)
{
    char deadline[64], health[64];
    snprintf(deadline, sizeof deadline, "SECKILL_REQUEST_DEADLINE_MS=%d", REQUEST_DEADLINE_MS);
    snprintf(health, sizeof health, "SECKILL_HEALTH_TIMEOUT_MS=%d", HEALTH_TIMEOUT_MS);
    const char *env[] = {deadline, health, "SECKILL_ORDER_ACK_WAIT_MS=500", NULL};
    th_daemon_start(d, env);
}

struct timed_get {
    pthread_t tid;
    int port, rc;
    int64_t took_ms;
    struct th_response resp;
};

static void *timed_get_run(void *arg)
{
    struct timed_get *g = arg;
    int64_t t0 = rlock_mono_ms();
    g->rc = th_http(g->port, "GET", "/api/v1/skus/1", NULL, NULL, &g->resp);
    g->took_ms = rlock_mono_ms() - t0;
    return NULL;
}

/* The answer a request gets when its deadline passes: 503 unavailable with
 * Retry-After, within about the deadline (a liveness bound, not a tight one:
 * the promise is an answer by the deadline, the margin is the machine's). */
static void assert_deadline_503(const struct timed_get *g)
{
    ck_assert_msg(g->rc == 0 && g->resp.status == 503, "lookup while frozen: rc %d status %d %s",
                  g->rc, g->resp.status, g->resp.body);
    ck_assert_msg(strcasestr(g->resp.headers, "Retry-After: 1\r\n"), "no Retry-After: %s",
                  g->resp.headers);
    char err[32];
    th_json_str(g->resp.body, "error", err, sizeof err);
    ck_assert_str_eq(err, "unavailable");
    ck_assert_msg(g->took_ms < 2 * REQUEST_DEADLINE_MS, "lookup took %lld ms (bound 2 x %d ms)",
                  (long long)g->took_ms, REQUEST_DEADLINE_MS);
}

/* One deadline per request, not one per wait: a lookup whose every store
 * call would wait pg_client_timeout_ms answers 503 by request_deadline_ms;
 * lookups queued behind it on the busy workers too (past their deadline,
 * they never start), and /healthz, which no queued job holds up, answers
 * every check at once and names PostgreSQL within health_probe_interval_ms
 * + health_timeout_ms. */
START_TEST(test_requests_answer_503_by_their_deadline_while_postgres_is_frozen)
{
    th_reset();
    struct th_daemon d;
    deadline_daemon_start(&d);
    th_create_sku(d.port, 1, 10, 1);
    struct th_response h;
    ck_assert_int_eq(th_http(d.port, "GET", "/healthz", NULL, NULL, &h), 0);
    ck_assert_int_eq(h.status, 200);

    freeze();
    struct timed_get g[SLOW_LOOKUPS];
    for (int i = 0; i < SLOW_LOOKUPS; i++) {
        g[i] = (struct timed_get){.port = d.port};
        ck_assert(pthread_create(&g[i].tid, NULL, timed_get_run, &g[i]) == 0);
    }
    th_sleep_ms(100); /* the lookups hold both workers, the rest queue */
    int64_t slowest;
    int64_t health_took = healthz_until(
        d.port, 503, LIVENESS_FACTOR * (PROBE_INTERVAL_MS + HEALTH_TIMEOUT_MS), &h, &slowest);
    for (int i = 0; i < SLOW_LOOKUPS; i++)
        pthread_join(g[i].tid, NULL);
    thaw();

    ck_assert_msg(health_took >= 0, "healthz while frozen: status %d %s", h.status, h.body);
    char pg[16], redis[16], detail[160];
    th_json_str(h.body, "postgres", pg, sizeof pg);
    th_json_str(h.body, "redis", redis, sizeof redis);
    th_json_str(h.body, "detail", detail, sizeof detail);
    ck_assert_str_eq(pg, "down");
    ck_assert_str_eq(redis, "ok");
    /* the probe's own wait ended, or its result went stale first: either says postgres */
    ck_assert_msg(strncmp(detail, "postgres did not answer", 23) == 0, "%s", h.body);
    /* no check waited behind the busy workers, nor on the frozen store */
    ck_assert_msg(slowest < HEALTH_TIMEOUT_MS, "a health check took %lld ms (bound %d ms)",
                  (long long)slowest, HEALTH_TIMEOUT_MS);
    for (int i = 0; i < SLOW_LOOKUPS; i++)
        assert_deadline_503(&g[i]);
    /* Thawed: answered again. */
    ck_assert_int_eq(th_http(d.port, "GET", "/api/v1/skus/1", NULL, NULL, &h), 0);
    ck_assert_msg(h.status == 200, "lookup after thaw: %d %s", h.status, h.body);
    ck_assert_msg(healthz_until(d.port, 200,
                                LIVENESS_FACTOR * (PROBE_INTERVAL_MS + HEALTH_TIMEOUT_MS), &h,
                                &slowest) >= 0,
                  "healthz after thaw: %d %s", h.status, h.body);
    th_daemon_stop(&d);
}
END_TEST

/* The same whatever store stalls: with Redis frozen, /healthz says so within
 * health_probe_interval_ms + health_timeout_ms, every check at once, and a
 * lookup answers by its deadline. */
START_TEST(test_healthz_names_a_frozen_redis_within_health_timeout)
{
    th_reset();
    struct th_daemon d;
    deadline_daemon_start(&d);
    th_create_sku(d.port, 1, 10, 1);
    struct th_response h;
    ck_assert_int_eq(th_http(d.port, "GET", "/healthz", NULL, NULL, &h), 0);
    ck_assert_int_eq(h.status, 200);

    freeze_redis();
    int64_t slowest;
    int64_t health_took = healthz_until(
        d.port, 503, LIVENESS_FACTOR * (PROBE_INTERVAL_MS + HEALTH_TIMEOUT_MS), &h, &slowest);
    struct timed_get g = {.port = d.port};
    timed_get_run(&g);
    thaw_redis();

    ck_assert_msg(health_took >= 0, "healthz while frozen: status %d %s", h.status, h.body);
    char pg[16], redis[16];
    th_json_str(h.body, "postgres", pg, sizeof pg);
    th_json_str(h.body, "redis", redis, sizeof redis);
    ck_assert_str_eq(redis, "down");
    ck_assert_str_eq(pg, "ok");
    ck_assert_msg(slowest < HEALTH_TIMEOUT_MS, "a health check took %lld ms (bound %d ms)",
                  (long long)slowest, HEALTH_TIMEOUT_MS);
    /* The lookup reads Redis's stock: a 503 by its deadline, or (Redis's
     * timeout being shorter) any answer within it. */
    ck_assert_msg(g.rc == 0 && g.took_ms < 2 * REQUEST_DEADLINE_MS, "lookup: rc %d after %lld ms",
                  g.rc, (long long)g.took_ms);
    ck_assert_msg(healthz_until(d.port, 200,
                                LIVENESS_FACTOR * (PROBE_INTERVAL_MS + HEALTH_TIMEOUT_MS), &h,
                                &slowest) >= 0,
                  "healthz after thaw: %d %s", h.status, h.body);
    th_daemon_stop(&d);
}
END_TEST

struct raise_later {
    atomic_int *flag;
    long after_ms;
};

static void *raise_after(void *arg)
{
    struct raise_later *rl = arg;
    th_sleep_ms(rl->after_ms);
    atomic_store(rl->flag, 1);
    return NULL;
}

/* Polls pg_stat_activity until backend 'pid' is gone; returns 1, or 0 after ms. */
static int backend_gone_within(PGconn *check, const char *pid, long ms)
{
    char q[128];
    snprintf(q, sizeof q, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid);
    for (long waited = 0; waited < ms; waited += 50) {
        if (th_pg_int(check, q) == 0)
            return 1;
        th_sleep_ms(50);
    }
    return 0;
}

/* A config for statements that outlive the abort by far: only the abort and
 * the server's client check can end them early. */
static void long_statement_cfg(struct cfg *c)
{
    char err[160];
    th_cfg(c);
    ck_assert(cfg_set(c, "pg_statement_timeout_ms", "8000", err, sizeof err) == 0);
    ck_assert(cfg_set(c, "pg_client_timeout_ms", "9000", err, sizeof err) == 0);
    ck_assert(cfg_set(c, "pg_client_check_interval_ms", "200", err, sizeof err) == 0);
    ck_assert_msg(cfg_check(c, err, sizeof err) == 0, "%s", err);
    pgwait_set_default_timeout_ms((int)c->pg_client_timeout_ms);
}

/* Begins a transaction on d's connection and returns it with its backend pid. */
static struct dbtx *begin_with_pid(struct db_conn *d, const struct cfg *c, char *pid, size_t cap)
{
    char err[512];
    PGconn *conn = db_conn_get(d);
    ck_assert_ptr_nonnull(conn);
    struct dbtx *tx = dbtx_begin(conn, c->pg_dsn, DBTX_ISO_DEFAULT, err, sizeof err);
    ck_assert_msg(tx != NULL, "%s", err);
    PGresult *r = dbtx_exec(tx, "SELECT pg_backend_pid()", 0, NULL);
    ck_assert_ptr_nonnull(r);
    snprintf(pid, cap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return tx;
}

START_TEST(test_abort_flag_ends_a_running_statement_and_its_transaction)
{
    struct cfg c;
    long_statement_cfg(&c);
    struct db_conn d;
    db_conn_init(&d, &c);
    char pid[24];
    struct dbtx *tx = begin_with_pid(&d, &c, pid, sizeof pid);
    int outcome = -1;
    ck_assert_int_eq(dbtx_on_complete(tx, record_outcome, &outcome), 0);
    atomic_int flag = 0;
    dbtx_set_abort_flag(tx, &flag);
    struct raise_later rl = {&flag, 200};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, raise_after, &rl), 0);

    int64_t t0 = rlock_mono_ms();
    PGresult *r = dbtx_exec(tx, "SELECT pg_sleep(30)", 0, NULL);
    int64_t took = rlock_mono_ms() - t0;
    pthread_join(th, NULL);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(dbtx_error(tx), "abandoned") != NULL, "%s", dbtx_error(tx));
    ck_assert_msg(took < 4000, "the statement ran %lld ms after its abort", (long long)took);
    ck_assert_int_eq(dbtx_commit(tx, NULL, 0, NULL), DBTX_ROLLED_BACK);
    ck_assert_int_eq(outcome, DBTX_ROLLED_BACK);
    /* The server ends the statement well before its own timeout (8 s). */
    PGconn *check = th_pg();
    ck_assert_msg(backend_gone_within(check, pid, 4000), "backend %s still running", pid);
    PQfinish(check);
    db_conn_close(&d);
    cfg_free(&c);
}
END_TEST

START_TEST(test_lost_lock_rolls_back_its_transaction_at_once)
{
    struct cfg c;
    long_statement_cfg(&c);
    char err[160];
    /* A short lease, so the watchdog looks every 300 ms. */
    ck_assert(cfg_set(&c, "lock_ttl_ms", "900", err, sizeof err) == 0);
    struct redis_conn rc;
    ck_assert(redis_conn_init(&rc, &c, err, sizeof err) == 0);
    struct rlock_watchdog_opts wo = {.lease_ms = 900, .op_timeout_ms = 250};
    struct rlock_watchdog *wd = rlock_watchdog_new(redis_conn_open, &rc, &wo, err, sizeof err);
    ck_assert_msg(wd != NULL, "%s", err);
    txlock_set_watchdog(wd);

    char key[KEYS_MAX];
    keys_sku(key, 77, KEY_SKU_LOCK);
    const char *keys[] = {key};
    struct txlock t;
    ck_assert_int_eq(txlock_acquire(&t, &rc, &c, 77, keys, 1), RLOCK_OK);
    struct db_conn d;
    db_conn_init(&d, &c);
    char pid[24];
    struct dbtx *tx = begin_with_pid(&d, &c, pid, sizeof pid);
    ck_assert_int_eq(txlock_bind(&t, tx), 0);
    redisContext *r = th_redis();
    redisReply *rep = redisCommand(r, "DEL %s", key); /* the lease is over: someone else's now */
    ck_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1);
    freeReplyObject(rep);

    int64_t t0 = rlock_mono_ms();
    PGresult *res = dbtx_exec(tx, "SELECT pg_sleep(30)", 0, NULL);
    int64_t took = rlock_mono_ms() - t0;
    ck_assert_ptr_null(res);
    ck_assert_msg(strstr(dbtx_error(tx), "abandoned") != NULL, "%s", dbtx_error(tx));
    ck_assert_msg(took < 4000, "the statement ran %lld ms after the loss", (long long)took);
    ck_assert_int_eq(dbtx_rollback(tx), DBTX_ROLLED_BACK);

    txlock_set_watchdog(NULL);
    rlock_watchdog_free(wd);
    redisFree(r);
    redis_conn_close(&rc);
    db_conn_close(&d);
    cfg_free(&c);
}
END_TEST

/* Redis closed the connection (restart, timeout, CLIENT KILL): the next call
 * reconnects first instead of failing once on the dead socket. */
START_TEST(test_redis_conn_survives_a_server_side_close)
{
    struct cfg c;
    char err[160];
    th_cfg(&c);
    /* CLIENT ID is no command of the service: this connection is the admin's. */
    ck_assert(cfg_set(&c, "redis_url", th_env("SECKILL_TEST_REDIS_ADMIN_URL"), err, sizeof err) ==
              0);
    struct redis_conn rc;
    ck_assert(redis_conn_init(&rc, &c, err, sizeof err) == 0);
    redisContext *admin = th_redis_admin();
    const char *client_id[] = {"CLIENT", "ID"};
    const char *ping[] = {"PING"};
    for (int round = 0; round < 3; round++) {
        redisReply *id = redis_conn_cmd(&rc, 2, client_id, NULL);
        ck_assert(id && id->type == REDIS_REPLY_INTEGER);
        redisReply *k = redisCommand(admin, "CLIENT KILL ID %lld", id->integer);
        ck_assert(k && k->type == REDIS_REPLY_INTEGER && k->integer == 1);
        freeReplyObject(k);
        /* Let the close reach our socket, as it has long before any real
         * next call after a restart. */
        th_sleep_ms(50);
        redisReply *p = redis_conn_cmd(&rc, 1, ping, NULL);
        ck_assert_msg(p != NULL, "the first call after a server-side close failed");
        ck_assert_str_eq(p->str, "PONG");
        freeReplyObject(p);
        redisReply *id2 = redis_conn_cmd(&rc, 2, client_id, NULL);
        ck_assert(id2 && id2->type == REDIS_REPLY_INTEGER);
        ck_assert(id2->integer != id->integer);
        freeReplyObject(id2);
        freeReplyObject(id);
    }
    redisFree(admin);
    redis_conn_close(&rc);
    cfg_free(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pgwait");
    TCase *frozen = tcase_create("frozen postgres");
    tcase_add_unchecked_fixture(frozen, find_postmaster, thaw_after_case);
    tcase_add_test(frozen, test_statement_on_frozen_postgres_gives_up_and_the_next_use_reconnects);
    tcase_add_test(frozen, test_commit_without_answer_is_unknown_not_rolled_back);
    tcase_add_test(frozen, test_pipeline_on_frozen_postgres_gives_up);
    tcase_add_test(frozen, test_healthz_and_lookup_answer_503_while_postgres_is_frozen);
    tcase_add_test(frozen, test_requests_answer_503_by_their_deadline_while_postgres_is_frozen);
    tcase_set_timeout(frozen, 60);
    suite_add_tcase(s, frozen);
    TCase *frozen_redis = tcase_create("frozen redis");
    tcase_add_unchecked_fixture(frozen_redis, find_redis_server, thaw_redis_after_case);
    tcase_add_test(frozen_redis, test_healthz_names_a_frozen_redis_within_health_timeout);
    tcase_set_timeout(frozen_redis, 60);
    suite_add_tcase(s, frozen_redis);
    TCase *abort_tc = tcase_create("abort");
    tcase_add_test(abort_tc, test_abort_flag_ends_a_running_statement_and_its_transaction);
    tcase_add_test(abort_tc, test_lost_lock_rolls_back_its_transaction_at_once);
    suite_add_tcase(s, abort_tc);
    TCase *redis_tc = tcase_create("redis");
    tcase_add_test(redis_tc, test_redis_conn_survives_a_server_side_close);
    suite_add_tcase(s, redis_tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
