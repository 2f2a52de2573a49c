/*
 * dbtx against a real PostgreSQL.  The connection string comes from
 * SECKILL_TEST_PG_DSN (password via PGPASSFILE, which libpq reads itself).
 * Without it every test fails: a silently skipped database test is a test
 * that never runs.
 *
 * All tests share one scratch table named after the runner's pid, created
 * once before the tests and dropped after them by the superuser
 * (SECKILL_TEST_PG_ADMIN_DSN), and use their own keys.
 */
#include "store/dbtx.h"

#include "harness.h"

#include <check.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char table[64];      /* dbtx_test_<pid>, "" when setup could not create it */
static char setup_err[512]; /* why not, reported by every test */

static const char *dsn(void)
{
    const char *d = getenv("SECKILL_TEST_PG_DSN");

    ck_assert_msg(d != NULL && d[0] != '\0',
                  "SECKILL_TEST_PG_DSN is not set: these tests need a real PostgreSQL, e.g. "
                  "SECKILL_TEST_PG_DSN='host=127.0.0.1 port=5432 dbname=seckill user=seckill_app' "
                  "(password via PGPASSFILE)");
    return d;
}

static PGconn *connect_db(void)
{
    PGconn *c = PQconnectdb(dsn());

    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "cannot connect with SECKILL_TEST_PG_DSN: %s",
                  PQerrorMessage(c));
    return c;
}

/* Runs a statement outside dbtx on c; fails the test on error. */
static void exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);

    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK,
                  "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

/* Rows with key k in the scratch table, seen from c. */
static long count_key(PGconn *c, const char *k)
{
    char sql[160];
    const char *params[1] = {k};
    PGresult *r;
    long n;

    snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE k = $1", table);
    r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "count: %s", PQerrorMessage(c));
    n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return n;
}

/* INSERT (k, v) through dbtx; fails the test if the insert fails. */
static void insert_row(struct dbtx *tx, const char *k, const char *v)
{
    char sql[160];
    const char *params[2] = {k, v};
    PGresult *r;

    snprintf(sql, sizeof(sql), "INSERT INTO %s (k, v) VALUES ($1, $2)", table);
    r = dbtx_exec(tx, sql, 2, params);
    ck_assert_msg(r != NULL, "insert: %s", dbtx_error(tx));
    PQclear(r);
}

static struct dbtx *begin_ok(PGconn *c, const char *conninfo)
{
    char err[256];
    struct dbtx *tx = dbtx_begin(c, conninfo, DBTX_ISO_DEFAULT, err, sizeof(err));

    ck_assert_msg(tx != NULL, "dbtx_begin: %s", err);
    ck_assert_int_gt(dbtx_txid(tx), 0);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_INTRANS);
    return tx;
}

static void check_setup(void)
{
    (void)dsn();
    ck_assert_msg(table[0] != '\0', "scratch table not created: %s", setup_err);
}

/* What hooks saw. */
struct record {
    int calls;
    enum dbtx_outcome outcome;
    int order[16];
};

struct hook_arg {
    struct record *rec;
    int id;
};

static void record_hook(enum dbtx_outcome outcome, void *arg)
{
    struct hook_arg *h = arg;

    if (h->rec->calls < 16)
        h->rec->order[h->rec->calls] = h->id;
    h->rec->calls++;
    h->rec->outcome = outcome;
}

static void register_ok(struct dbtx *tx, struct hook_arg *h)
{
    ck_assert_int_eq(dbtx_on_complete(tx, record_hook, h), 0);
}

/* ---- fixture: runs once in the runner, not per test ---- */

/* The scratch table belongs to the superuser (the service's role may not
 * create tables); the transactions under test run as the service's role,
 * granted the rows of this table only. */
static void create_table(void)
{
    const char *d = getenv("SECKILL_TEST_PG_ADMIN_DSN");
    char sql[256];
    PGconn *c;
    PGresult *r;

    table[0] = '\0';
    if (d == NULL || d[0] == '\0') {
        snprintf(setup_err, sizeof(setup_err), "SECKILL_TEST_PG_ADMIN_DSN is not set");
        return;
    }
    c = PQconnectdb(d);
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(setup_err, sizeof(setup_err), "connect: %s", PQerrorMessage(c));
        PQfinish(c);
        return;
    }
    /* u: a deferred unique constraint, so that a COMMIT itself can fail */
    snprintf(sql, sizeof(sql),
             "CREATE TABLE dbtx_test_%ld (k text PRIMARY KEY, v int NOT NULL, "
             "u int UNIQUE DEFERRABLE INITIALLY DEFERRED)",
             (long)getpid());
    r = PQexec(c, sql);
    if (PQresultStatus(r) == PGRES_COMMAND_OK) {
        PQclear(r);
        snprintf(sql, sizeof(sql),
                 "GRANT SELECT, INSERT, UPDATE, DELETE ON dbtx_test_%ld TO seckill_app",
                 (long)getpid());
        r = PQexec(c, sql);
    }
    if (PQresultStatus(r) == PGRES_COMMAND_OK)
        snprintf(table, sizeof(table), "dbtx_test_%ld", (long)getpid());
    else
        snprintf(setup_err, sizeof(setup_err), "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

static void drop_table(void)
{
    char sql[128];
    PGconn *c;

    if (table[0] == '\0')
        return;
    c = PQconnectdb(getenv("SECKILL_TEST_PG_ADMIN_DSN"));
    if (PQstatus(c) == CONNECTION_OK) {
        snprintf(sql, sizeof(sql), "DROP TABLE IF EXISTS %s", table);
        PQclear(PQexec(c, sql));
    }
    PQfinish(c);
}

/* ---- tests ---- */

/* What a hook that checks the committed row needs. */
struct visibility_probe {
    const char *key;
    PGconn *tx_conn;
    int calls;
    enum dbtx_outcome outcome;
    long rows_seen;
    PGTransactionStatusType tx_conn_status;
};

static void probe_hook(enum dbtx_outcome outcome, void *arg)
{
    struct visibility_probe *p = arg;
    PGconn *other = PQconnectdb(getenv("SECKILL_TEST_PG_DSN"));

    p->calls++;
    p->outcome = outcome;
    p->tx_conn_status = PQtransactionStatus(p->tx_conn);
    p->rows_seen = PQstatus(other) == CONNECTION_OK ? count_key(other, p->key) : -1;
    PQfinish(other);
}

START_TEST(test_hook_runs_after_commit_and_sees_committed_data)
{
    PGconn *c;
    struct dbtx *tx;
    struct visibility_probe probe = {.key = "commit-visible", .rows_seen = -2};
    char err[256] = "x", state[6] = "x";

    check_setup();
    c = connect_db();
    probe.tx_conn = c;
    tx = begin_ok(c, dsn());
    insert_row(tx, probe.key, "1");
    ck_assert_int_eq(dbtx_on_complete(tx, probe_hook, &probe), 0);
    ck_assert_int_eq(probe.calls, 0); /* nothing runs before the end */

    ck_assert_int_eq(dbtx_commit(tx, err, sizeof(err), state), DBTX_COMMITTED);
    ck_assert_str_eq(err, "");
    ck_assert_str_eq(state, "");
    ck_assert_int_eq(probe.calls, 1);
    ck_assert_int_eq(probe.outcome, DBTX_COMMITTED);
    /* the whole point: when the hook runs, everybody can see the data */
    ck_assert_int_eq(probe.rows_seen, 1);
    ck_assert_int_eq(probe.tx_conn_status, PQTRANS_IDLE);
    PQfinish(c);
}
END_TEST

START_TEST(test_hook_runs_on_rollback)
{
    PGconn *c;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h = {&rec, 1};

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    insert_row(tx, "rollback", "1");
    register_ok(tx, &h);
    ck_assert_int_eq(dbtx_rollback(tx), DBTX_ROLLED_BACK);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(rec.outcome, DBTX_ROLLED_BACK);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_IDLE);
    ck_assert_int_eq(count_key(c, "rollback"), 0);
    PQfinish(c);
}
END_TEST

START_TEST(test_failed_statement_turns_commit_into_rollback)
{
    PGconn *c;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h = {&rec, 1};
    char sql[160], err[256], state[6];
    const char *params[2] = {"failed-first", "2"};
    PGresult *r;

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    register_ok(tx, &h);
    insert_row(tx, "failed-first", "1");
    /* the same primary key again: 23505 */
    snprintf(sql, sizeof(sql), "INSERT INTO %s (k, v) VALUES ($1, $2)", table);
    r = dbtx_exec(tx, sql, 2, params);
    ck_assert_ptr_null(r);
    ck_assert_str_eq(dbtx_sqlstate(tx), "23505");
    ck_assert_msg(strstr(dbtx_error(tx), "duplicate key") != NULL, "error: %s", dbtx_error(tx));
    /* later statements are refused without a round trip, and the first cause is kept */
    r = dbtx_exec(tx, "SELECT 1", 0, NULL);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(dbtx_error(tx), "duplicate key") != NULL, "error: %s", dbtx_error(tx));
    ck_assert_int_eq(rec.calls, 0);

    ck_assert_int_eq(dbtx_commit(tx, err, sizeof(err), state), DBTX_ROLLED_BACK);
    ck_assert_msg(strstr(err, "duplicate key") != NULL, "commit error: %s", err);
    ck_assert_str_eq(state, "23505");
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(rec.outcome, DBTX_ROLLED_BACK);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_IDLE);
    ck_assert_int_eq(count_key(c, "failed-first"), 0);
    PQfinish(c);
}
END_TEST

/* n statements in one round trip: each result in order, the rows visible to
 * the transaction's later statements and committed together. */
START_TEST(test_pipeline_runs_statements_in_order_in_the_transaction)
{
    PGconn *c;
    struct dbtx *tx;
    char ins[160], cnt[160];
    PGresult *r[3];

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    snprintf(ins, sizeof(ins), "INSERT INTO %s (k, v) VALUES ($1, $2) RETURNING v", table);
    snprintf(cnt, sizeof(cnt), "SELECT count(*) FROM %s WHERE k LIKE 'pipe-%%'", table);
    const char *a[] = {"pipe-a", "1"}, *b[] = {"pipe-b", "2"};
    const struct pgwait_stmt q[] = {{.sql = ins, .nparams = 2, .params = a},
                                    {.sql = ins, .nparams = 2, .params = b},
                                    {.sql = cnt}};
    ck_assert_msg(dbtx_exec_pipeline(tx, 3, q, r) == 0, "pipeline: %s", dbtx_error(tx));
    ck_assert_str_eq(PQgetvalue(r[0], 0, 0), "1");
    ck_assert_str_eq(PQgetvalue(r[1], 0, 0), "2");
    ck_assert_str_eq(PQgetvalue(r[2], 0, 0), "2"); /* sees the two rows before it */
    for (int i = 0; i < 3; i++)
        PQclear(r[i]);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_INTRANS);
    ck_assert_int_eq(dbtx_commit(tx, NULL, 0, NULL), DBTX_COMMITTED);
    ck_assert_int_eq(count_key(c, "pipe-a") + count_key(c, "pipe-b"), 2);
    /* the connection is usable as before, outside pipeline mode */
    ck_assert_int_eq(PQpipelineStatus(c), PQ_PIPELINE_OFF);
    exec_ok(c, "SELECT 1");
    PQfinish(c);
}
END_TEST

/* A deferred BEGIN goes out with the first pipeline: the connection stays
 * idle until then, the transaction has its txid after it, and it commits
 * (or, with a failing first statement, rolls back) as one begun the usual
 * way. */
START_TEST(test_deferred_begin_opens_with_the_first_pipeline)
{
    PGconn *c;
    struct dbtx *tx;
    char ins[160], err[256];
    PGresult *r[2];
    struct record rec = {0};
    struct hook_arg h = {&rec, 1};

    check_setup();
    c = connect_db();
    tx = dbtx_begin_deferred(c, dsn(), DBTX_ISO_READ_COMMITTED, err, sizeof(err));
    ck_assert_msg(tx != NULL, "dbtx_begin_deferred: %s", err);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_IDLE); /* nothing sent yet */
    ck_assert_int_eq(dbtx_txid(tx), 0);
    register_ok(tx, &h);
    snprintf(ins, sizeof(ins), "INSERT INTO %s (k, v) VALUES ($1, $2) RETURNING v", table);
    const char *a[] = {"deferred-a", "1"};
    const struct pgwait_stmt q[] = {{.sql = ins, .nparams = 2, .params = a},
                                    {.sql = "SELECT current_setting('transaction_isolation')"}};
    ck_assert_msg(dbtx_exec_pipeline(tx, 2, q, r) == 0, "pipeline: %s", dbtx_error(tx));
    ck_assert_str_eq(PQgetvalue(r[0], 0, 0), "1");
    ck_assert_str_eq(PQgetvalue(r[1], 0, 0), "read committed");
    PQclear(r[0]);
    PQclear(r[1]);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_INTRANS);
    ck_assert_int_gt(dbtx_txid(tx), 0);
    /* another session does not see it before COMMIT */
    PGconn *other = connect_db();
    ck_assert_int_eq(count_key(other, "deferred-a"), 0);
    ck_assert_int_eq(dbtx_commit(tx, NULL, 0, NULL), DBTX_COMMITTED);
    ck_assert_int_eq(rec.outcome, DBTX_COMMITTED);
    ck_assert_int_eq(count_key(other, "deferred-a"), 1);

    /* a failing first statement: BEGIN ran, the block rolls back */
    rec.calls = 0;
    tx = dbtx_begin_deferred(c, dsn(), DBTX_ISO_DEFAULT, err, sizeof(err));
    ck_assert_ptr_nonnull(tx);
    register_ok(tx, &h);
    const char *b[] = {"deferred-b", "2"};
    const struct pgwait_stmt bad[] = {{.sql = ins, .nparams = 2, .params = b},
                                      {.sql = "SELECT 1/0"}};
    ck_assert_int_eq(dbtx_exec_pipeline(tx, 2, bad, r), -1);
    ck_assert_str_eq(dbtx_sqlstate(tx), "22012");
    ck_assert_int_eq(dbtx_commit(tx, NULL, 0, NULL), DBTX_ROLLED_BACK);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(count_key(other, "deferred-b"), 0);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_IDLE);

    /* ended before any statement: nothing was opened, no round trip */
    rec.calls = 0;
    tx = dbtx_begin_deferred(c, dsn(), DBTX_ISO_DEFAULT, err, sizeof(err));
    ck_assert_ptr_nonnull(tx);
    register_ok(tx, &h);
    ck_assert_int_eq(dbtx_rollback(tx), DBTX_ROLLED_BACK);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_IDLE);
    exec_ok(c, "SELECT 1");
    PQfinish(other);
    PQfinish(c);
}
END_TEST

/* A statement that fails in the middle of a pipeline fails the transaction
 * with its own message; those after it never run; nothing commits. */
START_TEST(test_pipeline_failure_fails_the_transaction)
{
    PGconn *c;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h = {&rec, 1};
    char ins[160], state[6];
    PGresult *r[3] = {(PGresult *)1, (PGresult *)1, (PGresult *)1};

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    register_ok(tx, &h);
    snprintf(ins, sizeof(ins), "INSERT INTO %s (k, v) VALUES ($1, $2)", table);
    const char *a[] = {"pipe-dup", "1"}, *z[] = {"pipe-after", "3"};
    const struct pgwait_stmt q[] = {{.sql = ins, .nparams = 2, .params = a},
                                    {.sql = ins, .nparams = 2, .params = a},
                                    {.sql = ins, .nparams = 2, .params = z}};
    ck_assert_int_eq(dbtx_exec_pipeline(tx, 3, q, r), -1);
    for (int i = 0; i < 3; i++)
        ck_assert_ptr_null(r[i]);
    ck_assert_str_eq(dbtx_sqlstate(tx), "23505");
    ck_assert_msg(strstr(dbtx_error(tx), "duplicate key") != NULL, "error: %s", dbtx_error(tx));
    /* later statements are refused without a round trip */
    ck_assert_int_eq(dbtx_exec_pipeline(tx, 1, q, r), -1);
    ck_assert_int_eq(dbtx_commit(tx, NULL, 0, state), DBTX_ROLLED_BACK);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(rec.outcome, DBTX_ROLLED_BACK);
    ck_assert_int_eq(count_key(c, "pipe-dup") + count_key(c, "pipe-after"), 0);
    ck_assert_int_eq(PQpipelineStatus(c), PQ_PIPELINE_OFF);
    exec_ok(c, "SELECT 1");
    PQfinish(c);
}
END_TEST

START_TEST(test_refused_commit_is_rolled_back)
{
    PGconn *c;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h = {&rec, 1};
    char sql[160], err[256], state[6];
    const char *p1[2] = {"deferred-1", "7"}, *p2[2] = {"deferred-2", "7"};
    PGresult *r;

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    register_ok(tx, &h);
    /* both inserts succeed; the deferred unique check fails only at COMMIT */
    snprintf(sql, sizeof(sql), "INSERT INTO %s (k, v, u) VALUES ($1, 1, $2)", table);
    r = dbtx_exec(tx, sql, 2, p1);
    ck_assert_msg(r != NULL, "%s", dbtx_error(tx));
    PQclear(r);
    r = dbtx_exec(tx, sql, 2, p2);
    ck_assert_msg(r != NULL, "%s", dbtx_error(tx));
    PQclear(r);

    ck_assert_int_eq(dbtx_commit(tx, err, sizeof(err), state), DBTX_ROLLED_BACK);
    ck_assert_str_eq(state, "23505");
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(rec.outcome, DBTX_ROLLED_BACK);
    ck_assert_int_eq(count_key(c, "deferred-1"), 0);
    ck_assert_int_eq(PQtransactionStatus(c), PQTRANS_IDLE);
    PQfinish(c);
}
END_TEST

START_TEST(test_hooks_run_in_reverse_order_exactly_once)
{
    PGconn *c;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h[5];
    char err[256];

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    for (int i = 0; i < 5; i++) {
        h[i].rec = &rec;
        h[i].id = i + 1;
        register_ok(tx, &h[i]);
    }
    insert_row(tx, "reverse", "1");
    ck_assert_int_eq(dbtx_commit(tx, err, sizeof(err), NULL), DBTX_COMMITTED);
    ck_assert_int_eq(rec.calls, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(rec.order[i], 5 - i);
    ck_assert_int_eq(rec.outcome, DBTX_COMMITTED);
    PQfinish(c);
}
END_TEST

/* Terminates the backend behind 'victim' and waits until it is really gone. */
static void kill_backend(PGconn *victim)
{
    /* fault injection: the superuser, as an operator would */
    PGconn *killer = PQconnectdb(getenv("SECKILL_TEST_PG_ADMIN_DSN"));
    ck_assert_msg(PQstatus(killer) == CONNECTION_OK, "cannot connect as the superuser: %s",
                  PQerrorMessage(killer));
    char pid[16];
    const char *params[1] = {pid};
    PGresult *r;
    int gone = 0;

    snprintf(pid, sizeof(pid), "%d", th_pg_backend_pid(victim));
    r = PQexecParams(killer, "SELECT pg_terminate_backend($1::int)", 1, NULL, params, NULL, NULL,
                     0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(killer));
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    /*
     * SIGTERM is asynchronous: without waiting, our COMMIT could still reach
     * the backend first and commit, and the test would be about a race.
     */
    for (int i = 0; i < 200 && !gone; i++) {
        struct timespec ts = {0, 25 * 1000000L};

        r = PQexecParams(killer, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", 1,
                         NULL, params, NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
        gone = strcmp(PQgetvalue(r, 0, 0), "0") == 0;
        PQclear(r);
        if (!gone)
            nanosleep(&ts, NULL);
    }
    ck_assert_msg(gone, "backend %s still alive after pg_terminate_backend", pid);
    PQfinish(killer);
}

START_TEST(test_connection_killed_before_commit_is_reconciled_as_rolled_back)
{
    PGconn *c, *other;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h1 = {&rec, 1}, h2 = {&rec, 2};
    char err[512], state[6];

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    register_ok(tx, &h1);
    register_ok(tx, &h2);
    insert_row(tx, "killed", "1");
    kill_backend(c);
    ck_assert_int_eq(PQstatus(c), CONNECTION_OK); /* libpq does not know yet */

    /* COMMIT hits a dead session; the outcome is looked up, not guessed */
    ck_assert_int_eq(dbtx_commit(tx, err, sizeof(err), state), DBTX_ROLLED_BACK);
    ck_assert_msg(strstr(err, "connection lost during COMMIT") != NULL, "error: %s", err);
    ck_assert_int_eq(rec.calls, 2);
    ck_assert_int_eq(rec.order[0], 2);
    ck_assert_int_eq(rec.order[1], 1);
    ck_assert_int_eq(rec.outcome, DBTX_ROLLED_BACK);
    ck_assert_int_eq(PQstatus(c), CONNECTION_BAD);

    other = connect_db();
    ck_assert_int_eq(count_key(other, "killed"), 0);
    PQfinish(other);
    PQfinish(c);
}
END_TEST

START_TEST(test_lost_commit_without_conninfo_is_unknown)
{
    PGconn *c;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h = {&rec, 1};
    char err[512];

    check_setup();
    c = connect_db();
    tx = begin_ok(c, NULL);
    register_ok(tx, &h);
    insert_row(tx, "unknown", "1");
    kill_backend(c);
    ck_assert_int_eq(dbtx_commit(tx, err, sizeof(err), NULL), DBTX_UNKNOWN);
    ck_assert_msg(strstr(err, "unknown") != NULL, "error: %s", err);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(rec.outcome, DBTX_UNKNOWN);
    PQfinish(c);
}
END_TEST

START_TEST(test_rollback_on_broken_connection_runs_hooks)
{
    PGconn *c;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h = {&rec, 1};

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    register_ok(tx, &h);
    insert_row(tx, "broken-rollback", "1");
    kill_backend(c);
    ck_assert_int_eq(dbtx_rollback(tx), DBTX_ROLLED_BACK);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(rec.outcome, DBTX_ROLLED_BACK);
    PQfinish(c);
}
END_TEST

START_TEST(test_statement_ending_block_is_reconciled)
{
    PGconn *c;
    struct dbtx *tx;
    struct record rec = {0};
    struct hook_arg h = {&rec, 1};
    PGresult *r;

    check_setup();
    c = connect_db();
    tx = begin_ok(c, dsn());
    register_ok(tx, &h);
    insert_row(tx, "escaped", "1");
    /* misuse: COMMIT through dbtx_exec; dbtx must still tell the hooks the truth */
    r = dbtx_exec(tx, "COMMIT", 0, NULL);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(dbtx_error(tx), "ended the transaction") != NULL, "%s", dbtx_error(tx));
    ck_assert_int_eq(dbtx_rollback(tx), DBTX_COMMITTED);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(rec.outcome, DBTX_COMMITTED);
    ck_assert_int_eq(count_key(c, "escaped"), 1);
    PQfinish(c);
}
END_TEST

START_TEST(test_isolation_of_uncommitted_insert)
{
    PGconn *c, *other;
    struct dbtx *tx;
    char err[256];

    check_setup();
    c = connect_db();
    other = connect_db();
    tx = begin_ok(c, dsn());
    insert_row(tx, "isolated", "1");
    /*
     * Another process checking "does this order exist?" sees nothing until
     * COMMIT.  A lock released before COMMIT would let it insert a duplicate;
     * that is why locks are released by completion hooks.
     */
    ck_assert_int_eq(count_key(other, "isolated"), 0);
    ck_assert_int_eq(dbtx_commit(tx, err, sizeof(err), NULL), DBTX_COMMITTED);
    ck_assert_int_eq(count_key(other, "isolated"), 1);
    PQfinish(other);
    PQfinish(c);
}
END_TEST

START_TEST(test_begin_refuses_open_transaction)
{
    PGconn *c;
    char err[256];
    struct dbtx *tx;

    check_setup();
    c = connect_db();
    exec_ok(c, "BEGIN");
    tx = dbtx_begin(c, dsn(), DBTX_ISO_DEFAULT, err, sizeof(err));
    ck_assert_ptr_null(tx);
    ck_assert_msg(strstr(err, "already in a transaction") != NULL, "%s", err);
    exec_ok(c, "ROLLBACK");
    PQfinish(c);
}
END_TEST

START_TEST(test_begin_with_isolation_level)
{
    PGconn *c;
    struct dbtx *tx;
    PGresult *r;
    char err[256];

    check_setup();
    c = connect_db();
    tx = dbtx_begin(c, dsn(), DBTX_ISO_SERIALIZABLE, err, sizeof(err));
    ck_assert_msg(tx != NULL, "%s", err);
    r = dbtx_exec(tx, "SHOW transaction_isolation", 0, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "serializable");
    PQclear(r);
    ck_assert_int_eq(dbtx_commit(tx, err, sizeof(err), NULL), DBTX_COMMITTED);
    PQfinish(c);
}
END_TEST

START_TEST(test_outcome_str)
{
    ck_assert_str_eq(dbtx_outcome_str(DBTX_COMMITTED), "committed");
    ck_assert_str_eq(dbtx_outcome_str(DBTX_ROLLED_BACK), "rolled_back");
    ck_assert_str_eq(dbtx_outcome_str(DBTX_UNKNOWN), "unknown");
}
END_TEST

static Suite *dbtx_suite(void)
{
    Suite *s = suite_create("dbtx");
    TCase *tc = tcase_create("postgres");

    tcase_add_unchecked_fixture(tc, create_table, drop_table);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hook_runs_after_commit_and_sees_committed_data);
    tcase_add_test(tc, test_hook_runs_on_rollback);
    tcase_add_test(tc, test_failed_statement_turns_commit_into_rollback);
    tcase_add_test(tc, test_pipeline_runs_statements_in_order_in_the_transaction);
    tcase_add_test(tc, test_pipeline_failure_fails_the_transaction);
    tcase_add_test(tc, test_deferred_begin_opens_with_the_first_pipeline);
    tcase_add_test(tc, test_refused_commit_is_rolled_back);
    tcase_add_test(tc, test_hooks_run_in_reverse_order_exactly_once);
    tcase_add_test(tc, test_connection_killed_before_commit_is_reconciled_as_rolled_back);
    tcase_add_test(tc, test_lost_commit_without_conninfo_is_unknown);
    tcase_add_test(tc, test_rollback_on_broken_connection_runs_hooks);
    tcase_add_test(tc, test_statement_ending_block_is_reconciled);
    tcase_add_test(tc, test_isolation_of_uncommitted_insert);
    tcase_add_test(tc, test_begin_refuses_open_transaction);
    tcase_add_test(tc, test_begin_with_isolation_level);
    tcase_add_test(tc, test_outcome_str);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(dbtx_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
