#include "db.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "embedded.h"
#include "log.h"

void db_conn_init(struct db_conn *d, const struct cfg *c)
{
    d->cfg = c;
    d->conn = NULL;
}

PGconn *db_conn_get(struct db_conn *d)
{
    if (d->conn && PQstatus(d->conn) == CONNECTION_OK)
        return d->conn;
    db_conn_close(d);
    /* statement_timeout bounds work on the server; TCP keepalives and
     * tcp_user_timeout bound a wait on a peer that vanished (a partition),
     * which would otherwise block a writer for many minutes. */
    char user_timeout[24];
    snprintf(user_timeout, sizeof user_timeout, "%" PRId64, d->cfg->pg_statement_timeout_ms + 2000);
    const char *keys[] = {"dbname",
                          "keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          NULL};
    const char *vals[] = {d->cfg->pg_dsn, "1", "5", "2", "3", user_timeout, NULL};
    d->conn = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(d->conn) != CONNECTION_OK) {
        log_warn("postgres connect failed: %s", PQerrorMessage(d->conn));
        db_conn_close(d);
        return NULL;
    }
    /* Every statement is bounded, so no request or batch waits forever on a lock. */
    /* A session stuck inside a transaction (its process paused or cut off)
     * must not hold the SKU row lock for longer than a lock lease or two. */
    char set[192];
    snprintf(set, sizeof set,
             "SET statement_timeout = %" PRId64
             "; SET idle_in_transaction_session_timeout = %" PRId64
             "; SET application_name = 'seckilld'",
             d->cfg->pg_statement_timeout_ms, 2 * d->cfg->lock_ttl_ms);
    PGresult *r = PQexec(d->conn, set);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        log_warn("postgres session setup failed: %s", PQerrorMessage(d->conn));
    PQclear(r);
    if (!ok) {
        db_conn_close(d);
        return NULL;
    }
    return d->conn;
}

PGresult *db_query(struct db_conn *d, const char *name, int nparams, const char *const *params)
{
    PGconn *c = db_conn_get(d);
    if (!c)
        return NULL;
    PGresult *r = PQexecParams(c, sql_text(name), nparams, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return r;
    log_warn("query %s failed: %s", name, PQerrorMessage(c));
    PQclear(r);
    if (PQstatus(c) != CONNECTION_OK)
        db_conn_close(d);
    return NULL;
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
