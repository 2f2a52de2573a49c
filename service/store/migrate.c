#include "store/migrate.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/embedded.h"
#include "core/log.h"
#include "store/redis_functions.h"

/* Arbitrary but fixed: every seckilld migrating the same database uses it. */
#define MIGRATE_LOCK_KEY "7263542011"

static int exec_ok(PGconn *c, const char *sql, int n, const char *const *params)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        log_error("migrate: %s", PQerrorMessage(c));
    PQclear(r);
    return ok ? 0 : -1;
}

static int applied(PGconn *c, const char *name)
{
    const char *p[] = {name};
    PGresult *r = PQexecParams(c, "SELECT 1 FROM schema_migrations WHERE version = $1", 1, NULL, p,
                               NULL, NULL, 0);
    int yes = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) > 0 : -1;
    PQclear(r);
    return yes;
}

/* Waits up to wait_ms for the advisory lock, polling, so that an instance
 * stuck in a migration cannot block the others forever.  Returns 0 or -1. */
static int take_lock(PGconn *c, int64_t wait_ms)
{
    struct timespec pause = {0, 100 * 1000 * 1000};
    for (int64_t waited = 0;; waited += 100) {
        PGresult *r = PQexec(c, "SELECT pg_try_advisory_lock(" MIGRATE_LOCK_KEY ")");
        int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
        int got = ok && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        PQclear(r);
        if (!ok) {
            log_error("migrate: %s", PQerrorMessage(c));
            return -1;
        }
        if (got)
            return 0;
        if (waited >= wait_ms) {
            log_error("migrate: another instance held the migration lock for %lld ms",
                      (long long)wait_ms);
            return -1;
        }
        nanosleep(&pause, NULL);
    }
}

/* The database's migrations; returns how many were applied, or -1. */
static int migrate_pg(const struct cfg *cfg)
{
    /* The schema's owner migrates; the service's own role may not. */
    PGconn *c = PQconnectdb(cfg->migrate_pg_dsn[0] ? cfg->migrate_pg_dsn : cfg->pg_dsn);
    if (PQstatus(c) != CONNECTION_OK) {
        log_error("migrate: cannot connect: %s", PQerrorMessage(c));
        PQfinish(c);
        return -1;
    }
    int count = 0;
    char timeouts[160];
    snprintf(timeouts, sizeof timeouts, "SET statement_timeout = %lld; SET lock_timeout = %lld",
             (long long)cfg->migrate_statement_timeout_ms,
             (long long)cfg->migrate_statement_timeout_ms);
    PGresult *set = PQexec(c, timeouts);
    int set_ok = PQresultStatus(set) == PGRES_COMMAND_OK;
    PQclear(set);
    if (!set_ok || take_lock(c, cfg->migrate_lock_wait_ms) != 0 ||
        exec_ok(c,
                "CREATE TABLE IF NOT EXISTS schema_migrations (version text PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT now())",
                0, NULL) != 0) {
        PQfinish(c);
        return -1;
    }
    for (size_t i = 0; i < embedded_migration_count() && count >= 0; i++) {
        const char *name = embedded_migration_name(i);
        int done = applied(c, name);
        if (done < 0) {
            count = -1;
            break;
        }
        if (done)
            continue;
        /* A migration and its record commit together or not at all.  The file
         * goes through the simple protocol because it holds many statements. */
        if (exec_ok(c, "BEGIN", 0, NULL) != 0) {
            count = -1;
            break;
        }
        PGresult *r = PQexec(c, embedded_migration_text(i));
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
        if (!ok)
            log_error("migration %s failed: %s", name, PQerrorMessage(c));
        PQclear(r);
        const char *p[] = {name};
        if (ok && exec_ok(c, "INSERT INTO schema_migrations (version) VALUES ($1)", 1, p) == 0 &&
            exec_ok(c, "COMMIT", 0, NULL) == 0) {
            log_info("migration %s applied", name);
            count++;
        } else {
            r = PQexec(c, "ROLLBACK");
            PQclear(r);
            count = -1;
        }
    }
    if (PQstatus(c) == CONNECTION_OK)
        (void)exec_ok(c, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")", 0, NULL);
    PQfinish(c);
    return count;
}

/* Loads the Redis Functions library as the administrator (the service's
 * user may call functions, never load them).  Returns 0 or -1. */
static int migrate_redis(const struct cfg *cfg)
{
    char err[400];
    const char *url = cfg->migrate_redis_url[0] ? cfg->migrate_redis_url : cfg->redis_url;
    int n = redis_functions_load_as(cfg, url, err, sizeof err);
    if (n < 0) {
        log_error("migrate: %s", err);
        return -1;
    }
    log_info("migrate: Redis Functions library %s version %s loaded on %d server%s",
             EMBEDDED_LIBRARY, embedded_library_version(), n, n == 1 ? "" : "s");
    return 0;
}

int migrate_run(const struct cfg *cfg)
{
    int count = migrate_pg(cfg);
    if (count >= 0 && migrate_redis(cfg) != 0)
        return -1;
    return count;
}
