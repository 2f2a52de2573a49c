/*
 * registry: the one table of the library's Lua scripts (see internal.h).
 * Every module asks it for its scripts by id, so each text is embedded once
 * and each SHA1 computed once per process.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "internal.h"
#include "rlock/script.h"

/* Embedded by the build from lua/rlock/<file>.lua (service/tools/embed.c). */
#define RLOCK_LUA_EXTERN(id, file, flags)                                                          \
    extern const char rlock_lua_##file[];                                                          \
    extern const size_t rlock_lua_##file##_len;
RLOCK_LUA_SCRIPTS(RLOCK_LUA_EXTERN)
#undef RLOCK_LUA_EXTERN

/* Where each text is; the lengths are not constant expressions in C, so
 * the table points at them and reads them once.  As a function the script
 * is rlock_<file>: those that only end or prolong a hold may run when Redis
 * is over maxmemory (a holder that cannot let go or renew keeps everyone
 * waiting, and they add next to nothing); those that take a lock may not. */
static const struct {
    const char *name;
    const char *function;
    const char *text;
    const size_t *len;
    unsigned flags;
} sources[RLOCK_LUA_COUNT] = {
#define RLOCK_LUA_SOURCE(id, file, fl)                                                             \
    [RLOCK_LUA_##                                                                                  \
        id] = {"rlock/" #file, "rlock_" #file, rlock_lua_##file, &rlock_lua_##file##_len, fl},
    RLOCK_LUA_SCRIPTS(RLOCK_LUA_SOURCE)
#undef RLOCK_LUA_SOURCE
};

/* The only state the scripts need: immutable once registry_init() ran. */
static struct rlock_script scripts[RLOCK_LUA_COUNT], functions[RLOCK_LUA_COUNT];
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;
static atomic_int use_functions;

static void registry_init(void)
{
    for (int i = 0; i < RLOCK_LUA_COUNT; i++) {
        rlock_script_init(&scripts[i], sources[i].name, sources[i].text, *sources[i].len);
        rlock_function_init(&functions[i], sources[i].function, sources[i].text, *sources[i].len,
                            sources[i].flags);
    }
}

const struct rlock_script *rlock_lua(enum rlock_lua id)
{
    (void)pthread_once(&registry_once, registry_init);
    if ((unsigned)id >= RLOCK_LUA_COUNT)
        return NULL;
    return atomic_load_explicit(&use_functions, memory_order_relaxed) ? &functions[id]
                                                                      : &scripts[id];
}

const struct rlock_script *rlock_library_script(size_t i)
{
    (void)pthread_once(&registry_once, registry_init);
    return i < RLOCK_LUA_COUNT ? &functions[i] : NULL;
}

void rlock_use_functions(void)
{
    atomic_store(&use_functions, 1);
}
