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

/* Room for the service's functions and the lock library's. */
#define EMBEDDED_LIBRARY_MAX 64

static char *library_text;
static size_t library_len;
static char library_version[RLOCK_SHA1_HEX_LEN + 1];

/* Makes lua/<file>.lua the function seckill_<file> ('fn', a literal). */
static void init_one(struct rlock_script *s, const char *file, const char *fn, unsigned flags)
{
    for (size_t i = 0; i < svclua_count; i++)
        if (strcmp(svclua_names[i], file) == 0) {
            rlock_function_init(s, fn, svclua_texts[i], svclua_lens[i], flags);
            return;
        }
    fprintf(stderr, "embedded: no script lua/%s.lua\n", file);
    abort();
}

#define INIT(file, flags) init_one(&script_##file, #file, "seckill_" #file, flags)

void embedded_init(void)
{
    if (library_text) /* done already (tests call it more than once) */
        return;
    /* Flags: what adds memory on a buyer's or an admin's behalf (a
     * reservation, a stock change, a SKU's load) has no allow-oom, so a full
     * Redis refuses it before it runs and nothing is half done; what settles
     * (acknowledges, releases, dead-letters, undoes or re-applies what is
     * already durable) frees memory or keeps Redis true to the database, and
     * may run when Redis is full so that it can drain; what only reads is
     * no-writes and goes by FCALL_RO. */
    INIT(reserve, 0);
    INIT(sku_load, 0);
    INIT(stock_adjust, 0);
    INIT(stock_adjust_undo, RLOCK_FN_ALLOW_OOM);
    INIT(orders_ack, RLOCK_FN_ALLOW_OOM);
    INIT(orders_reapply, RLOCK_FN_ALLOW_OOM);
    INIT(orders_dead_letter, RLOCK_FN_ALLOW_OOM);
    INIT(order_release, RLOCK_FN_ALLOW_OOM);
    INIT(order_pending_settled, RLOCK_FN_ALLOW_OOM);
    INIT(sku_state, RLOCK_FN_NO_WRITES);
    INIT(order_pending_probe, RLOCK_FN_NO_WRITES);

    const struct rlock_script *all[EMBEDDED_LIBRARY_MAX] = {&script_reserve,
                                                            &script_sku_load,
                                                            &script_stock_adjust,
                                                            &script_stock_adjust_undo,
                                                            &script_orders_ack,
                                                            &script_orders_reapply,
                                                            &script_orders_dead_letter,
                                                            &script_order_release,
                                                            &script_order_pending_settled,
                                                            &script_sku_state,
                                                            &script_order_pending_probe};
    size_t n = 0;
    while (n < EMBEDDED_LIBRARY_MAX && all[n])
        n++;
    /* the lock library's, for the locks the service takes */
    for (size_t i = 0; n < EMBEDDED_LIBRARY_MAX && rlock_library_script(i); i++)
        all[n++] = rlock_library_script(i);
    library_text = rlock_library_build(EMBEDDED_LIBRARY, all, n, &library_len, library_version);
    if (!library_text) {
        fprintf(stderr, "embedded: cannot build the Redis Functions library\n");
        abort();
    }
    rlock_use_functions();
}

const char *embedded_library_text(size_t *len)
{
    *len = library_len;
    return library_text;
}

const char *embedded_library_version(void)
{
    return library_version;
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
