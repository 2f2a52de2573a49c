/*
 * migrate: applies the embedded migrations/ files in name order, each in its
 * own transaction, recorded in schema_migrations.  A session-level advisory
 * lock makes instances that start together apply them one at a time.  It
 * connects with migrate_pg_dsn (the schema's owner), else pg_dsn.
 */
#ifndef SECKILL_MIGRATE_H
#define SECKILL_MIGRATE_H

#include "core/cfg.h"

/* Returns the number of migrations applied now (0: up to date), or -1 (logged). */
int migrate_run(const struct cfg *c);

#endif
