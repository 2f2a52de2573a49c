#include "core/embedded.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char *const svclua_names[], *const svclua_texts[];
extern const size_t svclua_lens[], svclua_count;
extern const char *const sql_names[], *const sql_texts[];
extern const size_t sql_count;
extern const char *const migration_names[], *const migration_texts[];
extern const size_t migration_count;

struct rlock_script script_reserve, script_sku_load, script_stock_adjust, script_stock_adjust_undo,
    script_orders_ack, script_orders_reapply, script_orders_dead_letter, script_sku_state,
    script_order_release, script_order_pending_probe, script_order_pending_settled;

static void init_one(struct rlock_script *s, const char *name)
{
    for (size_t i = 0; i < svclua_count; i++)
        if (strcmp(svclua_names[i], name) == 0) {
            rlock_script_init(s, name, svclua_texts[i], svclua_lens[i]);
            return;
        }
    fprintf(stderr, "embedded: no script lua/%s.lua\n", name);
    abort();
}

void embedded_init(void)
{
    init_one(&script_reserve, "reserve");
    init_one(&script_sku_load, "sku_load");
    init_one(&script_stock_adjust_undo, "stock_adjust_undo");
    init_one(&script_stock_adjust, "stock_adjust");
    init_one(&script_orders_ack, "orders_ack");
    init_one(&script_orders_reapply, "orders_reapply");
    init_one(&script_orders_dead_letter, "orders_dead_letter");
    init_one(&script_sku_state, "sku_state");
    init_one(&script_order_release, "order_release");
    init_one(&script_order_pending_probe, "order_pending_probe");
    init_one(&script_order_pending_settled, "order_pending_settled");
}

const char *sql_text(const char *name)
{
    for (size_t i = 0; i < sql_count; i++)
        if (strcmp(sql_names[i], name) == 0)
            return sql_texts[i];
    fprintf(stderr, "embedded: no query sql/%s.sql\n", name);
    abort();
}

size_t embedded_migration_count(void)
{
    return migration_count;
}

const char *embedded_migration_name(size_t i)
{
    return migration_names[i];
}

const char *embedded_migration_text(size_t i)
{
    return migration_texts[i];
}
