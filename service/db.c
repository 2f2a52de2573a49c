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
    d->conn = PQconnectdb(d->cfg->pg_dsn);
    if (PQstatus(d->conn) != CONNECTION_OK) {
        log_warn("postgres connect failed: %s", PQerrorMessage(d->conn));
        db_conn_close(d);
        return NULL;
    }
    /* Every statement is bounded, so no request or batch waits forever on a lock. */
    char set[96];
    snprintf(set, sizeof set,
             "SET statement_timeout = %" PRId64 "; SET application_name = 'seckilld'",
             d->cfg->pg_statement_timeout_ms);
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
