#include "store/redis_functions.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/embedded.h"
#include "core/log.h"

static atomic_int last_state = RLOCK_LIBRARY_CURRENT;

const char *redis_functions_state_str(enum rlock_library_state st)
{
    switch (st) {
    case RLOCK_LIBRARY_CURRENT:
        return "current";
    case RLOCK_LIBRARY_MISSING:
        return "missing";
    case RLOCK_LIBRARY_OTHER:
        return "other version";
    case RLOCK_LIBRARY_ERROR:
    default:
        return "unknown";
    }
}

int redis_functions_load(struct redis_conn *rc, char *err, size_t errlen)
{
    size_t len;
    const char *text = embedded_library_text(&len);
    int n = redis_conn_nservers(rc);
    if (n < 0) {
        snprintf(err, errlen, "redis: cannot read the cluster's map to load the functions");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        redisContext *c = redis_conn_server(rc, i);
        if (!c) {
            snprintf(err, errlen, "redis: server %d of %d not reachable to load the functions", i,
                     n);
            return -1;
        }
        redisReply *r = rlock_library_load(c, text, len);
        int ok = r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
        if (!ok)
            snprintf(err, errlen, "redis: FUNCTION LOAD of library %s on server %d of %d: %s",
                     EMBEDDED_LIBRARY, i, n,
                     r && r->str    ? r->str
                     : c->errstr[0] ? c->errstr
                                    : "no reply");
        freeReplyObject(r);
        if (!r)
            redis_conn_close(rc);
        if (!ok)
            return -1;
    }
    return n;
}

int redis_functions_load_as(const struct cfg *c, const char *url, char *err, size_t errlen)
{
    struct cfg as = *c;
    as.redis_url = (char *)url;
    struct redis_conn rc;
    if (redis_conn_init(&rc, &as, err, errlen) != 0)
        return -1;
    int n = redis_functions_load(&rc, err, errlen);
    redis_conn_close(&rc);
    return n;
}

enum rlock_library_state redis_functions_check(struct redis_conn *rc, char *err, size_t errlen)
{
    int n = redis_conn_nservers(rc);
    if (n < 0) {
        snprintf(err, errlen, "cannot read the cluster's map");
        return RLOCK_LIBRARY_ERROR;
    }
    for (int i = 0; i < n; i++) {
        redisContext *c = redis_conn_server(rc, i);
        enum rlock_library_state st =
            c ? rlock_library_check(c, EMBEDDED_LIBRARY, embedded_library_version())
              : RLOCK_LIBRARY_ERROR;
        if (st == RLOCK_LIBRARY_CURRENT)
            continue;
        if (c && c->err)
            redis_conn_close(rc);
        snprintf(err, errlen, "library %s on server %d of %d: %s", EMBEDDED_LIBRARY, i, n,
                 redis_functions_state_str(st));
        return st;
    }
    return RLOCK_LIBRARY_CURRENT;
}

/* The last failure to load the library again that was logged: logged once
 * per cause, not once per reconciler pass (its thread alone calls heal). */
static char load_failure_logged[400];

enum rlock_library_state redis_functions_heal(struct redis_conn *rc, const struct cfg *c)
{
    char why[400];
    enum rlock_library_state st = redis_functions_check(rc, why, sizeof why);
    enum rlock_library_state before = (enum rlock_library_state)atomic_load(&last_state);
    if (st == RLOCK_LIBRARY_MISSING && c->redis_functions_url[0]) {
        char err[400];
        if (redis_functions_load_as(c, c->redis_functions_url, err, sizeof err) < 0) {
            if (strcmp(load_failure_logged, err) != 0)
                log_error("redis functions: %s; loading it again as redis_functions_url's "
                          "user failed (logged again when the cause changes): %s",
                          why, err);
            snprintf(load_failure_logged, sizeof load_failure_logged, "%s", err);
        } else {
            load_failure_logged[0] = '\0';
            log_warn("redis functions: %s (an empty restart?): loaded again, version %s", why,
                     embedded_library_version());
            st = redis_functions_check(rc, why, sizeof why);
        }
    } else if (st != before && st == RLOCK_LIBRARY_MISSING) {
        log_error("redis functions: %s: every script fails until `seckilld migrate` loads it "
                  "(or set redis_functions_url to let the daemon do it)",
                  why);
    } else if (st != before && st == RLOCK_LIBRARY_OTHER) {
        log_warn("redis functions: %s (this build's is %s): an upgrade under way, or run "
                 "`seckilld migrate` of this build",
                 why, embedded_library_version());
    }
    if (st == RLOCK_LIBRARY_CURRENT && before != RLOCK_LIBRARY_CURRENT)
        log_info("redis functions: library %s version %s on every server", EMBEDDED_LIBRARY,
                 embedded_library_version());
    if (st != RLOCK_LIBRARY_ERROR) /* no answer tells nothing of the library */
        atomic_store(&last_state, (int)st);
    return st;
}

int redis_functions_check_config(const struct cfg *c, char *err, size_t errlen)
{
    struct rlock_url u;
    char why[256];
    if (!c->redis_functions_url[0] ||
        rlock_url_parse(c->redis_functions_url, &u, why, sizeof why) == 0)
        return 0;
    snprintf(err, errlen, "redis_functions_url: %s", why);
    return -1;
}

enum rlock_library_state redis_functions_state(void)
{
    return (enum rlock_library_state)atomic_load(&last_state);
}
