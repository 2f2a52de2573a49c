/*
 * migrate: applies the embedded migrations/ files in name order, each in its
 * own transaction, recorded in schema_migrations.  A session-level advisory
 * lock makes instances that start together apply them one at a time.  It
 * connects with migrate_pg_dsn (the schema's owner), else pg_dsn.  Then it
 * loads (or replaces, on an upgrade) the Redis Functions library on every
 * Redis server as migrate_redis_url's user (the administrator), else
 * redis_url's (store/redis_functions.h).
 */
#ifndef SECKILL_MIGRATE_H
#define SECKILL_MIGRATE_H

#include "core/cfg.h"

/* Returns the number of migrations applied now (0: up to date), or -1
 * (logged) when a migration or the library's load failed. */
int migrate_run(const struct cfg *c);

#endif
