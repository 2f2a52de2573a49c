#include "store/db.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/embedded.h"
#include "core/log.h"
#include "core/timefmt.h"
#include "store/pgwait.h"

void db_conn_init(struct db_conn *d, const struct cfg *c)
{
    d->cfg = c;
    d->dsn = c->pg_dsn;
    d->conn = NULL;
    d->session = 0;
}

/*
 * Whether an idle connection is still worth using.  One the server ended
 * while nobody used it (the primary killed or demoted, a restart, a
 * failover) has its goodbye waiting in the socket: a FATAL 57P01 first, the
 * end of the stream perhaps a moment later.  Nothing else comes unasked to
 * these sessions but the rare notice or changed parameter (a reload), so
 * anything readable means the session is replaced: the caller's statement
 * goes to a new connection, which finds the primary, instead of failing on
 * the old one.  Never waits.
 */
static int idle_session_alive(PGconn *c)
{
    struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
    return p.fd >= 0 && poll(&p, 1, 0) == 0;
}

void db_conn_use_dsn(struct db_conn *d, const char *dsn)
{
    if (dsn && dsn[0])
        d->dsn = dsn;
}

PGconn *db_conn_get(struct db_conn *d)
{
    if (d->conn && PQstatus(d->conn) == CONNECTION_OK && idle_session_alive(d->conn) &&
        !pgwait_on_standby(d->conn))
        return d->conn;
    db_conn_close(d);
    struct pgwait w;
    pgwait_start(&w, (int)d->cfg->pg_client_timeout_ms, NULL);
    /* TCP keepalives and tcp_user_timeout drop a connection whose peer
     * vanished (a partition) even while nobody waits on it; the client
     * deadline covers the waits themselves. */
    char user_timeout[24];
    snprintf(user_timeout, sizeof user_timeout, "%" PRId64, d->cfg->pg_client_timeout_ms);
    const char *keys[] = {"dbname",
                          "keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          NULL};
    const char *vals[] = {d->dsn, "1", "5", "2", "3", user_timeout, NULL};
    d->conn = pgwait_connect(&w, keys, vals);
    if (!d->conn) {
        log_warn("postgres %s", w.err);
        return NULL;
    }
    /* Every user of these connections writes, and a standby's reads lag:
     * the service works against the primary only (pg_dsn without
     * target_session_attrs=read-write may name a standby). */
    if (pgwait_on_standby(d->conn)) {
        log_warn("postgres %s:%s is a standby; pg_dsn should name the primary, or every member "
                 "with target_session_attrs=read-write",
                 PQhost(d->conn), PQport(d->conn));
        db_conn_close(d);
        return NULL;
    }
    /* Every statement is bounded on the server too, so no request or batch
     * waits forever on a row lock.  A session stuck inside a transaction (its
     * process paused or cut off) must not hold the SKU row lock for longer
     * than a lock lease or two.  A statement whose client gave up (pgwait
     * closed the connection) is ended within the check interval instead of
     * running to its end. */
    char set[256];
    snprintf(
        set, sizeof set,
        "SET statement_timeout = %" PRId64 "; SET idle_in_transaction_session_timeout = %" PRId64
        "; SET client_connection_check_interval = %" PRId64 "; SET application_name = 'seckilld'",
        d->cfg->pg_statement_timeout_ms, 2 * d->cfg->lock_ttl_ms,
        d->cfg->pg_client_check_interval_ms);
    PGresult *r = pgwait_query(&w, d->conn, set);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) {
        char why[256];
        if (r)
            pgwait_message(why, sizeof why, d->conn, r);
        log_warn("postgres session setup failed: %s", r ? why : w.err);
    }
    PQclear(r);
    if (!ok) {
        db_conn_close(d);
        return NULL;
    }
    d->session++;
    return d->conn;
}

/* Runs sql with its own deadline; 'label' names it in the log.  A statement
 * a read-only server refused (25006: it ran nothing) goes once more to a new
 * connection, which target_session_attrs=read-write sends to the primary;
 * both tries share the thread's deadline (a request's). */
static PGresult *run(struct db_conn *d, const char *label, const char *sql, int nparams,
                     const char *const *params)
{
    for (int attempt = 0;; attempt++) {
        PGconn *c = db_conn_get(d);
        if (!c)
            return NULL;
        struct pgwait w;
        pgwait_start(&w, (int)d->cfg->pg_client_timeout_ms, NULL);
        PGresult *r = pgwait_params(&w, c, sql, nparams, params);
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
            return r;
        if (r) {
            char why[256];
            pgwait_message(why, sizeof why, c, r);
            log_warn("query %s failed: %s", label, why);
        } else {
            log_warn("query %s failed: %s", label, w.err);
        }
        const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
        int refused_read_only = state != NULL && strcmp(state, "25006") == 0;
        PQclear(r);
        if (PQstatus(c) != CONNECTION_OK)
            db_conn_close(d);
        if (!refused_read_only || attempt > 0)
            return NULL;
    }
}

PGresult *db_query(struct db_conn *d, const char *name, int nparams, const char *const *params)
{
    return run(d, name, sql_text(name), nparams, params);
}

PGresult *db_query_indexed(struct db_conn *d, const char *name, int nparams,
                           const char *const *params)
{
    PGconn *c = db_conn_get(d);
    if (!c)
        return NULL;
    struct pgwait_stmt q[3] = {{.sql = "SET enable_seqscan = off"},
                               {.sql = sql_text(name), .nparams = nparams, .params = params},
                               {.sql = "RESET enable_seqscan"}};
    PGresult *r[3] = {NULL, NULL, NULL};
    struct pgwait w;
    pgwait_start(&w, (int)d->cfg->pg_client_timeout_ms, NULL);
    int ok = pgwait_pipeline(&w, c, 3, q, r) == 0;
    for (int i = 0; ok && i < 3; i++) {
        ExecStatusType st = PQresultStatus(r[i]);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            char why[256];
            pgwait_message(why, sizeof why, c, r[i]);
            log_warn("query %s failed: %s", name, why);
            ok = 0;
        }
    }
    if (!ok && !r[0])
        log_warn("query %s failed: %s", name, w.err);
    PQclear(r[0]);
    PQclear(r[2]);
    if (!ok) {
        PQclear(r[1]);
        if (PQstatus(c) != CONNECTION_OK)
            db_conn_close(d);
        return NULL;
    }
    return r[1];
}

int db_ping(struct db_conn *d)
{
    PGresult *r = run(d, "ping", "SELECT 1", 0, NULL);
    int ok = r != NULL;
    PQclear(r);
    return ok ? 0 : -1;
}

void db_conn_close(struct db_conn *d)
{
    if (d->conn)
        PQfinish(d->conn);
    d->conn = NULL;
}

int db_get_i64(const PGresult *r, int row, int col, long long *out)
{
    if (row >= PQntuples(r) || col >= PQnfields(r) || PQgetisnull(r, row, col))
        return -1;
    *out = strtoll(PQgetvalue(r, row, col), NULL, 10);
    return 0;
}

void db_json_time(json_t *o, const char *key, const PGresult *r, int col)
{
    db_json_time_at(o, key, r, 0, col);
}

void db_json_time_at(json_t *o, const char *key, const PGresult *r, int row, int col)
{
    long long ms;
    if (db_get_i64(r, row, col, &ms) != 0) {
        json_object_set_new(o, key, json_null());
        return;
    }
    char buf[40];
    timefmt_rfc3339(ms, buf, sizeof buf);
    json_object_set_new(o, key, json_string(buf));
}
