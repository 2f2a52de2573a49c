/*
 * The service follows a PostgreSQL primary that moves, and a COMMIT cut by
 * the move is settled by the new primary.
 *
 * Each test has a primary (a) and its synchronous streaming standby (b) of
 * its own (service/tests/pg_pair.sh: initdb, pg_basebackup -R, loopback,
 * free ports), reached as the role 'app' through
 *   host=127.0.0.1,127.0.0.1 port=A,B target_session_attrs=read-write
 * "Killed" is SIGKILL to a's postmaster and its children, as a machine lost;
 * b is then promoted as Patroni would.  Timing assertions are bounds, and
 * the measured times are printed.
 */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "store/db.h"
#include "store/dbtx.h"
#include "store/pgwait.h"
#include <rlock/rlock.h>

/* The client deadline here: a promotion under a loaded CI machine fits in it. */
#define CLIENT_TIMEOUT_MS 15000
/* From kill -9 to the first commit on the promoted standby, promotion included. */
#define RESUME_BOUND_MS 20000
/* From the end of the promotion to the first commit there: the service's part. */
#define FOLLOW_BOUND_MS 3000
#define POLL_MS 50
#define POLLS 400 /* of POLL_MS: 20 s */

/* The witness of a probe row: k is there, written by the transaction. */
#define PROBE_WITNESS                                                                              \
    "SELECT EXISTS (SELECT 1 FROM failover_probe WHERE k = $1"                                     \
    " AND xmin = ($2::bigint % 4294967296)::text::xid)"

static char pair_dir[PATH_MAX]; /* set in the parent, before any test forks */
static int port_a, port_b;

/* Runs pg_pair.sh with the arguments; the test fails unless it succeeds. */
static void pair(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void pair(const char *fmt, ...)
{
    char args[PATH_MAX + 64], cmd[2 * PATH_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "timeout 150 %s/service/tests/pg_pair.sh %s",
             th_env("SECKILL_TEST_ROOT"), args);
    int rc = system(cmd);
    ck_assert_msg(rc == 0, "%s: status %d", cmd, rc);
}

static void pair_name(void)
{
    snprintf(pair_dir, sizeof pair_dir, "%s/pgpair-%d", th_env("SECKILL_TEST_STACK_DIR"),
             (int)getpid());
}

/* Checked (in the test's process): a fresh pair for each test. */
static void pair_up(void)
{
    pair("stop %s", pair_dir);
    port_a = th_free_port();
    do
        port_b = th_free_port();
    while (port_b == port_a);
    pair("start %s %d %d", pair_dir, port_a, port_b);
}

/* Unchecked (in the runner's process): whatever a failed test left running. */
static void pair_down(void)
{
    char cmd[2 * PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "timeout 150 %s/service/tests/pg_pair.sh stop %s",
             th_env("SECKILL_TEST_ROOT"), pair_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_pgfailover: stopping the pair in %s failed\n", pair_dir);
}

static void pair_cfg(struct cfg *c, int first, int second)
{
    char err[160], dsn[256];
    th_cfg(c);
    snprintf(dsn, sizeof dsn,
             "host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres user=app "
             "target_session_attrs=read-write",
             first, second);
    ck_assert(cfg_set(c, "pg_dsn", dsn, err, sizeof err) == 0);
    ck_assert(cfg_set(c, "lock_ttl_ms", "60000", err, sizeof err) == 0);
    ck_assert(cfg_set(c, "pg_client_timeout_ms", "15000", err, sizeof err) == 0);
    ck_assert_msg(cfg_check(c, err, sizeof err) == 0, "%s", err);
    pgwait_set_default_timeout_ms(CLIENT_TIMEOUT_MS);
}

/* A connection as the superuser to one member. */
static PGconn *node(int port)
{
    char ci[160];
    snprintf(ci, sizeof ci, "host=127.0.0.1 port=%d dbname=postgres user=pair connect_timeout=5",
             port);
    PGconn *c = PQconnectdb(ci);
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "port %d: %s", port, PQerrorMessage(c));
    return c;
}

static long long rows_with(PGconn *c, const char *k)
{
    char q[160];
    snprintf(q, sizeof q, "SELECT count(*) FROM failover_probe WHERE k = '%s'", k);
    return th_pg_int(c, q);
}

/* Inserts k in a transaction on d's connection.  Returns the outcome, or -1
 * when there was no connection or no transaction to begin. */
static int insert_row(struct db_conn *d, const struct cfg *c, const char *k)
{
    PGconn *conn = db_conn_get(d);
    char err[512];
    struct dbtx *tx =
        conn ? dbtx_begin(conn, c->pg_dsn, DBTX_ISO_READ_COMMITTED, err, sizeof err) : NULL;
    if (!tx)
        return -1;
    PGresult *r = dbtx_exec(tx, "INSERT INTO failover_probe VALUES ($1)", 1, &k);
    if (!r)
        return (int)dbtx_rollback(tx);
    PQclear(r);
    return (int)dbtx_commit(tx, err, sizeof err, NULL);
}

/* Waits (bounded) until a's backend running the COMMIT waits for the standby. */
static void wait_for_syncrep(PGconn *a)
{
    long long n = 0;
    for (int i = 0; i < POLLS && n == 0; i++) {
        n = th_pg_int(a, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
        if (n == 0)
            th_sleep_ms(POLL_MS);
    }
    ck_assert_msg(n == 1, "no COMMIT waits for the synchronous standby");
}

/* A transaction whose COMMIT runs on a thread of its own, so that the test
 * can kill and promote while it waits. */
struct cut_commit {
    struct db_conn d;
    const struct cfg *c;
    struct dbtx *tx;
    char txid[24];
    int hook;                  /* the outcome the completion hook saw */
    enum dbtx_outcome outcome; /* what dbtx_commit returned */
    char err[512];
    int64_t took_ms;
    pthread_t thread;
};

static void record_outcome(enum dbtx_outcome outcome, void *arg)
{
    *(int *)arg = (int)outcome;
}

/* Opens the transaction and inserts k; 'sync' is its synchronous_commit. */
static void cut_begin(struct cut_commit *x, const struct cfg *c, const char *k, const char *sync)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    x->hook = -1;
    db_conn_init(&x->d, c);
    PGconn *conn = db_conn_get(&x->d);
    ck_assert_ptr_nonnull(conn);
    ck_assert_int_eq(atoi(PQport(conn)), port_a);
    char set[80];
    snprintf(set, sizeof set, "SET synchronous_commit = %s", sync);
    PGresult *r = PQexec(conn, set);
    ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    x->tx = dbtx_begin(conn, c->pg_dsn, DBTX_ISO_READ_COMMITTED, x->err, sizeof x->err);
    ck_assert_msg(x->tx != NULL, "%s", x->err);
    snprintf(x->txid, sizeof x->txid, "%lld", dbtx_txid(x->tx));
    ck_assert_int_eq(dbtx_on_complete(x->tx, record_outcome, &x->hook), 0);
    r = dbtx_exec(x->tx, "INSERT INTO failover_probe VALUES ($1)", 1, &k);
    ck_assert_ptr_nonnull(r);
    PQclear(r);
    ck_assert_int_eq(dbtx_set_witness(x->tx, PROBE_WITNESS, 1, &k), 0);
}

static void *cut_run(void *arg)
{
    struct cut_commit *x = arg;
    int64_t t0 = rlock_mono_ms();
    x->outcome = dbtx_commit(x->tx, x->err, sizeof x->err, NULL);
    x->took_ms = rlock_mono_ms() - t0;
    return NULL;
}

static void cut_start(struct cut_commit *x)
{
    ck_assert_int_eq(pthread_create(&x->thread, NULL, cut_run, x), 0);
}

/* Joins the COMMIT's thread: every wait of dbtx_commit is bounded, by
 * CLIENT_TIMEOUT_MS a few times over at most. */
static void cut_join(struct cut_commit *x)
{
    ck_assert_int_eq(pthread_join(x->thread, NULL), 0);
    db_conn_close(&x->d);
}

START_TEST(test_transactions_follow_a_killed_primary_to_the_promoted_standby)
{
    struct cfg c;
    pair_cfg(&c, port_a, port_b);
    struct db_conn d;
    db_conn_init(&d, &c);
    ck_assert_int_eq(insert_row(&d, &c, "before"), DBTX_COMMITTED);
    ck_assert_int_eq(atoi(PQport(d.conn)), port_a);
    unsigned long before = d.session;

    int64_t t0 = rlock_mono_ms();
    pair("kill9 %s a", pair_dir);
    pair("promote %s b", pair_dir);
    int64_t promoted = rlock_mono_ms();
    int got = -1, tries = 0;
    char k[32];
    while (got != DBTX_COMMITTED && rlock_mono_ms() - t0 < RESUME_BOUND_MS) {
        snprintf(k, sizeof k, "after-%d", tries++);
        got = insert_row(&d, &c, k);
        if (got != DBTX_COMMITTED)
            th_sleep_ms(POLL_MS);
    }
    int64_t done = rlock_mono_ms();
    printf("measured: kill -9 to promoted %lld ms; promoted to the first commit on it %lld ms "
           "(%d tries)\n",
           (long long)(promoted - t0), (long long)(done - promoted), tries);
    ck_assert_msg(got == DBTX_COMMITTED, "no commit within %d ms of the kill", RESUME_BOUND_MS);
    ck_assert_msg(done - promoted < FOLLOW_BOUND_MS, "first commit %lld ms after the promotion",
                  (long long)(done - promoted));
    /* The session the kill ended was found before use: with the new primary
     * up, no transaction failed on the old one. */
    ck_assert_int_eq(tries, 1);
    /* A new session on the new primary: what was prepared is prepared again. */
    ck_assert_int_eq(atoi(PQport(d.conn)), port_b);
    ck_assert_uint_gt(d.session, before);
    /* The commit answered before the kill is there (synchronous standby). */
    PGconn *b = node(port_b);
    ck_assert_int_eq(rows_with(b, "before"), 1);
    ck_assert_int_eq(rows_with(b, k), 1);
    PQfinish(b);
    db_conn_close(&d);
    cfg_free(&c);
}
END_TEST

/* A frozen old primary (SIGSTOP: it accepts and never answers) listed first
 * does not hide the promoted standby: the statement in flight gives up at
 * the client deadline, and the reconnect waits for the frozen host at most
 * its share (pg_connect_host_timeout_ms), not the whole deadline. */
START_TEST(test_a_frozen_primary_listed_first_does_not_hide_the_new_one)
{
    struct cfg c;
    char err[160];
    pair_cfg(&c, port_a, port_b);
    ck_assert(cfg_set(&c, "pg_statement_timeout_ms", "500", err, sizeof err) == 0);
    ck_assert(cfg_set(&c, "pg_client_timeout_ms", "3000", err, sizeof err) == 0);
    ck_assert(cfg_set(&c, "pg_connect_host_timeout_ms", "500", err, sizeof err) == 0);
    ck_assert_msg(cfg_check(&c, err, sizeof err) == 0, "%s", err);
    pgwait_set_default_timeout_ms(3000);
    pgwait_set_host_timeout_ms(500);
    struct db_conn d;
    db_conn_init(&d, &c);
    ck_assert_int_eq(insert_row(&d, &c, "before"), DBTX_COMMITTED);

    pair("freeze %s a", pair_dir);
    pair("promote %s b", pair_dir);
    int64_t t0 = rlock_mono_ms();
    int first = insert_row(&d, &c, "on-frozen"); /* its BEGIN is never answered */
    int64_t t1 = rlock_mono_ms();
    int second = insert_row(&d, &c, "after");
    int64_t t2 = rlock_mono_ms();
    pair("thaw %s a", pair_dir);
    printf("measured: with the old primary frozen, the statement in flight gave up after %lld ms; "
           "the next transaction (a reconnect) committed on the new primary in %lld ms\n",
           (long long)(t1 - t0), (long long)(t2 - t1));
    ck_assert_int_eq(first, -1);
    ck_assert_int_eq(second, DBTX_COMMITTED);
    ck_assert_int_eq(atoi(PQport(d.conn)), port_b);
    ck_assert_msg(t2 - t1 < 2500, "the reconnect took %lld ms", (long long)(t2 - t1));
    db_conn_close(&d);
    cfg_free(&c);
}
END_TEST

/* Whatever names a standby, no session is kept on it: the service's
 * connections refuse it, an answer saying "read-only" closes the session,
 * and with both hosts listed the standby first, the primary is chosen. */
START_TEST(test_a_session_on_a_standby_is_dropped_not_kept)
{
    struct cfg c;
    pair_cfg(&c, port_b, port_a);
    struct db_conn d;
    db_conn_init(&d, &c);
    PGconn *conn = db_conn_get(&d);
    ck_assert_ptr_nonnull(conn);
    ck_assert_int_eq(atoi(PQport(conn)), port_a);
    db_conn_close(&d);

    /* pg_dsn naming only the standby, without target_session_attrs. */
    char err[160], dsn[160];
    snprintf(dsn, sizeof dsn, "host=127.0.0.1 port=%d dbname=postgres user=app", port_b);
    ck_assert(cfg_set(&c, "pg_dsn", dsn, err, sizeof err) == 0);
    db_conn_init(&d, &c);
    ck_assert_ptr_null(db_conn_get(&d));
    ck_assert_ptr_null(d.conn);

    /* A session that is on a standby anyway (made by hand, as after a
     * demotion): a write's 25006 closes it under its owner. */
    PGconn *raw = PQconnectdb(dsn);
    ck_assert_int_eq(PQstatus(raw), CONNECTION_OK);
    ck_assert(pgwait_on_standby(raw));
    struct pgwait w;
    pgwait_start(&w, 0, NULL);
    const char *k = "on-standby";
    PGresult *r = pgwait_params(&w, raw, "INSERT INTO failover_probe VALUES ($1)", 1, &k);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "25006");
    ck_assert(pgwait_wrong_server(r));
    PQclear(r);
    ck_assert_int_eq(PQstatus(raw), CONNECTION_BAD);
    /* and a transaction is not even begun there */
    PQfinish(raw);
    raw = PQconnectdb(dsn);
    ck_assert_int_eq(PQstatus(raw), CONNECTION_OK);
    char why[256];
    ck_assert_ptr_null(dbtx_begin(raw, dsn, DBTX_ISO_DEFAULT, why, sizeof why));
    ck_assert_msg(strstr(why, "standby") != NULL, "%s", why);
    ck_assert_int_eq(PQstatus(raw), CONNECTION_BAD);
    PQfinish(raw);
    cfg_free(&c);
}
END_TEST

/* The standby received and flushed the commit record but had not applied it
 * (remote_apply, replay paused) when the primary was killed: the COMMIT got
 * no answer; the lookup finds the promoted standby and it says committed. */
START_TEST(test_a_replicated_commit_cut_by_the_failover_is_committed_on_the_new_primary)
{
    struct cfg c;
    pair_cfg(&c, port_a, port_b);
    PGconn *a = node(port_a), *b = node(port_b);
    PQclear(PQexec(b, "SELECT pg_wal_replay_pause()"));
    struct cut_commit x;
    cut_begin(&x, &c, "replicated", "remote_apply");
    cut_start(&x);
    wait_for_syncrep(a);
    /* Everything a wrote (the commit record included) is on b's disk. */
    char lsn[64];
    PGresult *r = PQexec(a, "SELECT pg_current_wal_lsn()");
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    snprintf(lsn, sizeof lsn, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    char q[160];
    snprintf(q, sizeof q, "SELECT (pg_last_wal_receive_lsn() >= '%s')::int", lsn);
    long long flushed = 0;
    for (int i = 0; i < POLLS && !flushed; i++)
        if (!(flushed = th_pg_int(b, q)))
            th_sleep_ms(POLL_MS);
    ck_assert_msg(flushed, "the standby never received %s", lsn);
    PQfinish(a);
    PQfinish(b);

    pair("kill9 %s a", pair_dir);
    pair("promote %s b", pair_dir);
    cut_join(&x);
    printf("measured: a COMMIT cut by a kill -9 and a promotion settled in %lld ms: %s\n",
           (long long)x.took_ms, dbtx_outcome_str(x.outcome));
    ck_assert_msg(x.outcome == DBTX_COMMITTED, "%s: %s", dbtx_outcome_str(x.outcome), x.err);
    ck_assert_int_eq(x.hook, DBTX_COMMITTED);
    b = node(port_b);
    ck_assert_int_eq(rows_with(b, "replicated"), 1);
    PQfinish(b);
    cfg_free(&c);
}
END_TEST

/* The standby was down while the primary committed and was killed: the
 * commit record never reached it.  Promoted, it is the system of record,
 * and the transaction is not in its history: rolled back, row absent. */
START_TEST(test_a_commit_the_standby_never_received_is_rolled_back_on_the_new_primary)
{
    struct cfg c;
    pair_cfg(&c, port_a, port_b);
    pair("stopnode %s b", pair_dir);
    PGconn *a = node(port_a);
    struct cut_commit x;
    cut_begin(&x, &c, "unreplicated", "on");
    cut_start(&x);
    wait_for_syncrep(a);
    PQfinish(a);

    pair("kill9 %s a", pair_dir);
    pair("startnode %s b", pair_dir);
    pair("promote %s b", pair_dir);
    cut_join(&x);
    printf("measured: a COMMIT the standby never saw settled in %lld ms: %s\n",
           (long long)x.took_ms, dbtx_outcome_str(x.outcome));
    ck_assert_msg(x.outcome == DBTX_ROLLED_BACK, "%s: %s", dbtx_outcome_str(x.outcome), x.err);
    ck_assert_int_eq(x.hook, DBTX_ROLLED_BACK);
    PGconn *b = node(port_b);
    ck_assert_int_eq(rows_with(b, "unreplicated"), 0);
    PQfinish(b);
    cfg_free(&c);
}
END_TEST

/* A COMMIT waiting for a synchronous standby that does not confirm (it is
 * down) is in the primary's commit log already, but not durable: a failover
 * to the standby loses it.  The lookup must not call it committed: unknown,
 * within its bound.  (PostgreSQL 15's txid_status() says 'in progress' for
 * it, as its backend is still in the process array; the lookup's snapshot
 * check says the same whatever the order of txid_status()'s checks.) */
START_TEST(test_a_commit_waiting_for_its_synchronous_standby_is_not_called_committed)
{
    struct cfg c;
    pair_cfg(&c, port_a, port_b);
    pgwait_set_default_timeout_ms(1000); /* the COMMIT's wait and the lookup's */
    pair("stopnode %s b", pair_dir);
    PGconn *a = node(port_a);
    struct cut_commit x;
    cut_begin(&x, &c, "waiting", "on");
    cut_start(&x);
    cut_join(&x);
    printf("measured: a COMMIT waiting for its standby settled in %lld ms: %s\n",
           (long long)x.took_ms, dbtx_outcome_str(x.outcome));
    ck_assert_msg(x.outcome == DBTX_UNKNOWN, "%s: %s", dbtx_outcome_str(x.outcome), x.err);
    ck_assert_int_eq(x.hook, DBTX_UNKNOWN);
    ck_assert_msg(x.took_ms < 10000, "the lookup took %lld ms", (long long)x.took_ms);
    /* It is still waiting, neither committed for the others nor rolled back. */
    char q[128];
    snprintf(q, sizeof q, "SELECT (NOT txid_visible_in_snapshot(%s, txid_current_snapshot()))::int",
             x.txid);
    ck_assert_int_eq(th_pg_int(a, q), 1);
    PQfinish(a);
    cfg_free(&c);
}
END_TEST

/* A transaction id says committed, but the witness finds none of the
 * transaction's own rows (as when a new primary gave the id to another
 * transaction): rolled back; with its rows there: committed.  The lookup is
 * forced by a COMMIT sent through dbtx_exec, which dbtx settles by id. */
START_TEST(test_a_committed_id_without_its_rows_is_not_taken_for_ours)
{
    struct cfg c;
    pair_cfg(&c, port_a, port_b);
    struct db_conn d;
    db_conn_init(&d, &c);
    const char *const keys[2][2] = {{"mine", "mine"}, {"written", "not-written"}};
    const int want[2] = {DBTX_COMMITTED, DBTX_ROLLED_BACK};
    for (int i = 0; i < 2; i++) {
        PGconn *conn = db_conn_get(&d);
        ck_assert_ptr_nonnull(conn);
        char err[256];
        struct dbtx *tx = dbtx_begin(conn, c.pg_dsn, DBTX_ISO_DEFAULT, err, sizeof err);
        ck_assert_msg(tx != NULL, "%s", err);
        PGresult *r = dbtx_exec(tx, "INSERT INTO failover_probe VALUES ($1)", 1, &keys[i][0]);
        ck_assert_ptr_nonnull(r);
        PQclear(r);
        ck_assert_int_eq(dbtx_set_witness(tx, PROBE_WITNESS, 1, &keys[i][1]), 0);
        ck_assert_ptr_null(dbtx_exec(tx, "COMMIT", 0, NULL)); /* committed behind dbtx's back */
        int got = dbtx_commit(tx, err, sizeof err, NULL);
        ck_assert_msg(got == want[i], "%s: %s", dbtx_outcome_str(got), err);
    }
    db_conn_close(&d);
    cfg_free(&c);
}
END_TEST

int main(void)
{
    pair_name();
    Suite *s = suite_create("pgfailover");
    TCase *tc = tcase_create("pair");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, pair_up, NULL);
    tcase_add_unchecked_fixture(tc, NULL, pair_down);
    tcase_add_test(tc, test_transactions_follow_a_killed_primary_to_the_promoted_standby);
    tcase_add_test(tc, test_a_session_on_a_standby_is_dropped_not_kept);
    tcase_add_test(tc, test_a_frozen_primary_listed_first_does_not_hide_the_new_one);
    tcase_add_test(tc,
                   test_a_replicated_commit_cut_by_the_failover_is_committed_on_the_new_primary);
    tcase_add_test(tc, test_a_commit_the_standby_never_received_is_rolled_back_on_the_new_primary);
    tcase_add_test(tc, test_a_commit_waiting_for_its_synchronous_standby_is_not_called_committed);
    tcase_add_test(tc, test_a_committed_id_without_its_rows_is_not_taken_for_ours);
    suite_add_tcase(s, tc);
    return th_run(s);
}
