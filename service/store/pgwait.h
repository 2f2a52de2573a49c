/*
 * pgwait: PostgreSQL round trips with a deadline kept by the client.
 *
 * Why: statement_timeout is enforced by the server and TCP keepalives only
 * help when the peer vanishes.  A server that is frozen (its processes
 * stopped, a partition where the kernel still acknowledges) answers nothing
 * and blocking libpq waits as long as it stays frozen.  pgwait sends with
 * libpq's non-blocking API and waits in poll() until a CLOCK_MONOTONIC
 * deadline, or until an abort flag raised by another thread says the answer
 * is no longer wanted (a lost lock).
 *
 * Giving up never calls PQcancel(), which itself connects to the postmaster
 * and blocks when that is frozen.  The connection is closed instead: the
 * server rolls back whatever transaction was open when it notices (at once
 * for an idle session; during a statement within the session's
 * client_connection_check_interval), and the connection reads as
 * CONNECTION_BAD to its owner, who reconnects before the next use.
 *
 * A struct pgwait is one budget: a deadline, an optional abort flag and the
 * reason of the last failure.  Several calls may share it (a connect and the
 * session set-up).  It is used by one thread, like the PGconn it waits on;
 * only the abort flag is written by others.
 */
#ifndef SECKILL_PGWAIT_H
#define SECKILL_PGWAIT_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PGWAIT_MUST_CHECK __attribute__((warn_unused_result))

/* The deadline of budgets started with timeout_ms <= 0 until
 * pgwait_set_default_timeout_ms() is called: the built-in default of the
 * pg_client_timeout_ms setting (test_config checks that they agree). */
#define PGWAIT_FALLBACK_TIMEOUT_MS 6000

/* The built-in default of pg_connect_host_timeout_ms likewise. */
#define PGWAIT_FALLBACK_HOST_TIMEOUT_MS 2000

struct pgwait {
    int64_t deadline_ms;     /* CLOCK_MONOTONIC, as rlock_mono_ms() */
    int timeout_ms;          /* the budget as started, for messages */
    int capped;              /* the thread's deadline came first */
    const atomic_int *abort; /* non-zero: stop waiting at once; may be NULL */
    char err[256];           /* why the last call failed, "" after a success */
};

/* Sets the process-wide default deadline (ms, > 0) of budgets started with
 * timeout_ms <= 0.  Called once at start-up from pg_client_timeout_ms, before
 * other threads run; later calls are safe but affect only new budgets. */
void pgwait_set_default_timeout_ms(int ms);

/* The current process-wide default, in ms. */
int pgwait_default_timeout_ms(void);

/* Sets the process-wide share (ms, > 0) of a connect's budget that one host
 * of a multi-host connection string may take (pg_connect_host_timeout_ms),
 * at start-up like pgwait_set_default_timeout_ms(). */
void pgwait_set_host_timeout_ms(int ms);

/* Starts a budget of timeout_ms from now (<= 0: the process-wide default),
 * ending no later than the calling thread's deadline, if one is set.
 * 'abort' (may be NULL) is read every few tens of ms while waiting; it must
 * stay valid while w is used. */
void pgwait_start(struct pgwait *w, int timeout_ms, const atomic_int *abort);

/* Milliseconds left of w's budget (0 when it is over). */
int64_t pgwait_left_ms(const struct pgwait *w);

/* Sets the calling thread's deadline (CLOCK_MONOTONIC ms, as rlock_mono_ms();
 * 0: none): every budget started on this thread until it is cleared ends by
 * then, whatever its own timeout.  A worker sets it to the deadline of the
 * HTTP request it runs, so that all the request's waits share one bound,
 * those of dbtx (BEGIN, statements, COMMIT, the outcome lookup) included.
 * A budget whose deadline has already passed sends nothing: it fails before
 * connecting or sending, with "request deadline passed" in w->err. */
void pgwait_set_thread_deadline(int64_t deadline_ms);

/*
 * Opens a connection (PQconnectStartParams(keys, vals, expand_dbname = 1),
 * then PQconnectPoll) within w's deadline; a connect_timeout in the
 * parameters is not needed and does not lengthen it.  Host names are
 * resolved before the deadline applies (libpq resolves synchronously).
 *
 * With several hosts (host=a,b port=1,2, or postgresql://a:1,b:2/db) each
 * host is tried on its own, as libpq would try them, but with at most the
 * host share (pgwait_set_host_timeout_ms) of the budget each: libpq's
 * non-blocking connect has no per-host timeout, so a frozen first host
 * would take the whole budget and the next one, perhaps the new primary,
 * would never be tried.  target_session_attrs and every other option apply
 * to each attempt.  The first host tried is the one that last gave a
 * connection (a hint shared by the process), so after a failover every
 * reconnect goes to the new primary first.
 *
 * Returns a CONNECTION_OK connection the caller owns (PQfinish), or NULL with
 * w->err set (refused, authentication failed, no answer in time, aborted;
 * with several hosts, why the last one failed).
 */
PGconn *pgwait_connect(struct pgwait *w, const char *const *keys,
                       const char *const *vals) PGWAIT_MUST_CHECK;

/*
 * Runs a simple-query string (one or more statements, PQsendQuery) on conn
 * within w's deadline.  Like PQexec: returns the last result (caller
 * PQclear()s it) whatever its status, so a statement the server refused
 * comes back as a PGRES_FATAL_ERROR result, as does a connection lost
 * midway (then PQstatus(conn) == CONNECTION_BAD).  COPY is not supported.
 *
 * Returns NULL with w->err set when there is no result to return:
 *   - conn is NULL or not CONNECTION_OK, or the query could not be sent:
 *     nothing reached the server, conn is left as it was;
 *   - the abort flag was already raised: nothing was sent, conn untouched;
 *   - the deadline passed ("no answer within N ms") or the abort flag was
 *     raised while waiting: the query was sent, its fate is unknown, and conn
 *     has been closed under its owner, who still PQfinish()es it;
 *     PQstatus(conn) == CONNECTION_BAD from now on.
 * A result that pgwait_wrong_server() recognises is returned with conn
 * closed likewise.
 */
PGresult *pgwait_query(struct pgwait *w, PGconn *conn, const char *sql) PGWAIT_MUST_CHECK;

/* Same for one statement with text parameters and text results
 * (PQsendQueryParams; params may be NULL when nparams is 0). */
PGresult *pgwait_params(struct pgwait *w, PGconn *conn, const char *sql, int nparams,
                        const char *const *params) PGWAIT_MUST_CHECK;

/* One statement of a pipeline (text parameters, text results).  With a
 * name, the statement prepared under that name on this connection runs
 * ('sql' unused); with a name and 'prepare', 'sql' is prepared under the
 * name (parameter types inferred; no parameters are sent). */
struct pgwait_stmt {
    const char *sql;
    int nparams;
    const char *const *params; /* may be NULL when nparams is 0 */
    const char *name;          /* NULL: an unnamed statement, parsed each time */
    int prepare;
};

/*
 * Sends n statements in one round trip (libpq's pipeline mode, one Sync after
 * the last) and collects one result per statement into res[0..n), within w's
 * deadline.  The server runs them in order; after one fails, the rest come
 * back PGRES_PIPELINE_ABORTED.  Inside a transaction block that is what a
 * failed dbtx statement means anyway; outside one, each statement up to the
 * failure has committed on its own.
 *
 * Returns 0 with every res[i] set (the caller PQclear()s each, whatever its
 * status), or -1 with w->err set and every res[i] NULL: nothing was sent (as
 * for pgwait_params), or the deadline passed, the abort flag was raised or
 * the connection was lost while waiting (then conn is closed or broken under
 * its owner, as for pgwait_params).  n must be at least 1.
 */
int pgwait_pipeline(struct pgwait *w, PGconn *conn, size_t n, const struct pgwait_stmt *stmts,
                    PGresult **res) PGWAIT_MUST_CHECK;

/* Closes conn under its owner without waiting for the server, as a wait
 * that ran out does: the server rolls back what was open, PQstatus(conn)
 * is CONNECTION_BAD from now on, and the owner still PQfinish()es it.  For a
 * transaction whose ROLLBACK could not be sent (the request's deadline had
 * passed): the session must not be used again in that state. */
void pgwait_close(PGconn *conn);

/* Returns 1 when r is an error that says this server can no longer do this
 * session's work, though it answered: 25006 read_only_sql_transaction (a
 * standby, or a primary demoted under the session), 57P01 admin_shutdown,
 * 57P02 crash_shutdown, 57P03 cannot_connect_now.  Else 0 (NULL r too).
 * pgwait_query, pgwait_params and pgwait_pipeline close the connection
 * after such an answer (still returning it), so that its owner reconnects
 * and finds the primary again instead of keeping a session on a standby. */
int pgwait_wrong_server(const PGresult *r);

/* Returns 1 when the server of conn says it is a hot standby (the
 * in_hot_standby parameter PostgreSQL 14 and later report to every session,
 * and update when the standby is promoted), else 0.  No round trip. */
int pgwait_on_standby(const PGconn *conn);

/* Copies the message of a failed result (or, without one, of conn) into dst
 * as one line; "unknown libpq error" when both are empty.  dst is always
 * NUL-terminated when cap > 0. */
void pgwait_message(char *dst, size_t cap, PGconn *conn, const PGresult *res);

#endif
