/*
 * embedded: the Lua scripts and SQL files compiled into the binary (generated
 * by service/tools/embed.c from lua/ and sql/), looked up by file name.
 */
#ifndef SECKILL_EMBEDDED_H
#define SECKILL_EMBEDDED_H

#include <stddef.h>

#include <rlock/script.h>

/* The service's scripts, initialised once by embedded_init(). */
extern struct rlock_script script_reserve, script_sku_load, script_stock_adjust,
    script_stock_adjust_undo, script_orders_ack, script_orders_reapply, script_orders_dead_letter,
    script_sku_state, script_order_release, script_order_pending_probe,
    script_order_pending_settled;

/* The Redis Functions library of every script above and of the lock
 * library's own (rlock_library_script()), and the name of its read-only
 * function that tells the version ("<lib>_version"). */
#define EMBEDDED_LIBRARY "seckill"

/*
 * Makes every script above the Redis function seckill_<file> (with its flags,
 * embedded.c), switches the lock library to its functions
 * (rlock_use_functions()) and builds the library's text.  Call once at
 * start-up, before any thread.  Aborts when out of memory.
 */
void embedded_init(void);

/* The library's text (NUL-terminated, static after embedded_init()) and its
 * length; the version: the SHA1 that <lib>_version answers. */
const char *embedded_library_text(size_t *len);
const char *embedded_library_version(void);

/* The text of sql/<name>.sql; aborts on an unknown name (a programming error). */
const char *sql_text(const char *name);

/* Migrations in file-name order. */
size_t embedded_migration_count(void);
const char *embedded_migration_name(size_t i);
const char *embedded_migration_text(size_t i);

#endif
