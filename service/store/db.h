/*
 * db: PostgreSQL connections for workers and the order writer.  One db_conn
 * per thread; reconnects lazily after the server went away.  Every wait,
 * the connect included, ends within pg_client_timeout_ms (pgwait); a
 * connection that did not answer in time is dropped, so a frozen server
 * costs each caller one timeout, never a hang.
 */
#ifndef SECKILL_DB_H
#define SECKILL_DB_H

#include <jansson.h>
#include <libpq-fe.h>

#include "core/cfg.h"

struct db_conn {
    const struct cfg *cfg;
    const char *dsn; /* conninfo: cfg->pg_dsn unless db_conn_use_dsn() */
    PGconn *conn;
    unsigned long session; /* grows with each connection made: what was prepared on
                            * session N is gone in session N+1 */
};

void db_conn_init(struct db_conn *d, const struct cfg *c);

/* Makes d connect with conninfo 'dsn' (not copied: it must outlive d, as the
 * cfg's strings do) from its next connection on; an empty one keeps pg_dsn. */
void db_conn_use_dsn(struct db_conn *d, const char *dsn);

/* Returns a healthy connection owned by d (session settings applied), or
 * NULL when PostgreSQL cannot be reached or did not answer within
 * pg_client_timeout_ms (logged).  Connect and set-up share one deadline.
 * A kept connection the server closed while it was idle (a restart, a
 * failover) is found without waiting and replaced; a connection that got an
 * answer saying its server is a standby or going down was closed by pgwait
 * (pgwait_wrong_server) and is replaced too.  A connection to a standby
 * (pgwait_on_standby) is never returned: closed, NULL.  pg_dsn may list several hosts
 * with target_session_attrs=read-write (see pgwait_connect): the new
 * connection goes to whichever is the primary now, and d->session grows, so
 * statements prepared on the old one are prepared again. */
PGconn *db_conn_get(struct db_conn *d);

/* Runs sql/<name>.sql outside a transaction within pg_client_timeout_ms.
 * Returns the result (caller PQclear) when it succeeded, NULL on failure or
 * no answer in time (logged; a broken connection is dropped so the next call
 * reconnects).  Refused by a read-only server (25006), it is run once more on
 * a new connection within the thread's deadline. */
PGresult *db_query(struct db_conn *d, const char *name, int nparams, const char *const *params);

/* db_query() for a statement that must come from its indexes whatever the
 * statistics say (a partial index of a few rows in a table of millions,
 * which PostgreSQL's estimate of "col = false" over a column of NULLs costs
 * as the whole table): runs it with enable_seqscan off for that statement
 * alone (SET, the statement and RESET in one round trip, one implicit
 * transaction, so a failure rolls the SET back too).  Same returns. */
PGresult *db_query_indexed(struct db_conn *d, const char *name, int nparams,
                           const char *const *params);

/* SELECT 1 within pg_client_timeout_ms (after a reconnect, if needed, with
 * its own deadline).  Returns 0 when PostgreSQL answered, -1 otherwise
 * (logged; the connection is dropped if it is broken). */
int db_ping(struct db_conn *d) __attribute__((warn_unused_result));

void db_conn_close(struct db_conn *d);

/* Copies column 'col' of row 0 as int64 into out; returns 0, or -1 if NULL/absent. */
int db_get_i64(const PGresult *r, int row, int col, long long *out);

/* Sets key of o to the RFC 3339 time of row 0's column col (Unix ms), or to
 * null when the column is NULL. */
void db_json_time(json_t *o, const char *key, const PGresult *r, int col);
/* The same for row 'row' (a result of many rows: one object each). */
void db_json_time_at(json_t *o, const char *key, const PGresult *r, int row, int col);

#endif
