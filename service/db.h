/*
 * db: blocking PostgreSQL connections for workers and the order writer.
 * One db_conn per thread; reconnects lazily after the server went away.
 */
#ifndef SECKILL_DB_H
#define SECKILL_DB_H

#include <libpq-fe.h>

#include "cfg.h"

struct db_conn {
    const struct cfg *cfg;
    PGconn *conn;
};

void db_conn_init(struct db_conn *d, const struct cfg *c);

/* Returns a healthy connection owned by d (statement_timeout set), or NULL
 * when PostgreSQL cannot be reached (logged). */
PGconn *db_conn_get(struct db_conn *d);

/* Runs sql/<name>.sql outside a transaction.  Returns the result (caller
 * PQclear) when it succeeded, NULL on failure (logged; a broken connection is
 * dropped so the next call reconnects). */
PGresult *db_query(struct db_conn *d, const char *name, int nparams, const char *const *params);

void db_conn_close(struct db_conn *d);

/* Copies column 'col' of row 0 as int64 into out; returns 0, or -1 if NULL/absent. */
int db_get_i64(const PGresult *r, int row, int col, long long *out);

#endif
