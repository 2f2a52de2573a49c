/*
 * redis_functions: the service's Redis Functions library on its servers.
 *
 * Every Lua script of the service and of the lock library runs as a function
 * of one library (core/embedded.h), which the service's own Redis user may
 * call (FCALL, FCALL_RO) but not load: only an administrator sends code to
 * Redis.  `seckilld migrate` loads the library as the admin user
 * (migrate_redis_url); Redis keeps it in its AOF and replicates it, so a
 * restart from the AOF and a failover keep it.  A restart that lost
 * everything also lost it: the daemon notices (the reconciler asks before
 * each pass) and, given the narrow credential redis_functions_url (a user
 * that may only FUNCTION LOAD), loads it again before it rebuilds the SKUs.
 */
#ifndef SECKILL_REDIS_FUNCTIONS_H
#define SECKILL_REDIS_FUNCTIONS_H

#include <stddef.h>

#include "core/cfg.h"
#include "store/redis_conn.h"

/*
 * Loads the library on every server of rc (each master of a cluster) with
 * FUNCTION LOAD REPLACE: a new version replaces the old in place.  rc's user
 * needs that right.  Returns the number of servers loaded, or -1 with err set
 * (never a password) when one could not be reached or refused.
 */
int redis_functions_load(struct redis_conn *rc, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Loads the library as the user of 'url' (a redis_url, same forms), with c's
 * timeouts.  Returns what redis_functions_load() returns.
 */
int redis_functions_load_as(const struct cfg *c, const char *url, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Asks every server of rc which version of the library it holds (FCALL_RO
 * seckill_version, which the service's user may send).  Returns
 * RLOCK_LIBRARY_CURRENT when all hold this build's; else the first server's
 * other answer, with err saying which: MISSING (not loaded there), OTHER
 * (another build's: an upgrade under way) or ERROR (no answer).
 */
enum rlock_library_state redis_functions_check(struct redis_conn *rc, char *err, size_t errlen);

/*
 * The reconciler's step before a pass: checks rc; when the library is
 * missing somewhere and c->redis_functions_url is set, loads it again as
 * that user.  Another version is left alone (a rolling upgrade: the newer
 * migrate replaced it, and an older daemon must not put its own back).
 * Logs what it found once per change.  Returns the state after it
 * (redis_functions_state() too).
 */
enum rlock_library_state redis_functions_heal(struct redis_conn *rc, const struct cfg *c);

/* At start-up: returns 0 when redis_functions_url is empty or a URL
 * rlock_url_parse() takes, else -1 with err set (never the password). */
int redis_functions_check_config(const struct cfg *c, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* What the last redis_functions_heal() found, for /healthz; CURRENT before
 * the first. Any thread. */
enum rlock_library_state redis_functions_state(void);

/* "current", "missing", "other version", "unknown". */
const char *redis_functions_state_str(enum rlock_library_state st);

#endif
