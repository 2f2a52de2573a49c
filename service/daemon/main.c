/*
 * seckilld: the flash-sale reservation daemon.
 *
 *   seckilld [--setting=value ...] serve     run the HTTP API and the order writer
 *   seckilld [--setting=value ...] migrate   apply database migrations and exit
 *   seckilld --help
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buyer_token.h"
#include "core/cfg.h"
#include "core/embedded.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/sdnotify.h"
#include "http/handle_metrics.h"
#include "http/limits.h"
#include "http/metrics_cache.h"
#include "http/routes.h"
#include "http/server.h"
#include "order/order_desk.h"
#include "order/order_sweeper.h"
#include "order/order_writer.h"
#include "sku/reconcile.h"
#include "store/migrate.h"
#include "store/pgwait.h"
#include "store/redis_conn.h"
#include "store/redis_functions.h"
#include "store/txlock.h"
#include "store/workers.h"
#include <rlock/notify.h>
#include <rlock/watch.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: seckilld [--config FILE] [--setting value ...] serve|migrate\n\n");
    cfg_print_help(out);
}

/* Tells systemd (Type=notify) what the daemon does; a failed notice is a
 * warning: the daemon serves either way, the manager's timeout decides. */
static void notify_manager(const char *state)
{
    char err[256];
    if (sdnotify(state, err, sizeof err) < 0)
        log_warn("%s", err);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    log_info("signal %d: shutting down", (int)sig);
    notify_manager("STOPPING=1");
    event_base_loopbreak(arg);
}

/* What a reload needs: the running settings and how they were given. */
struct reload_env {
    struct cfg *cfg;
    int argc;
    char **argv;
};

/* SIGHUP (systemctl reload): libevent hands the signal to this callback on
 * the main loop, so the work is done here, not in a signal handler.  The
 * file, the environment and the flags are read again as at start-up; a bad
 * result is refused whole, and the running settings stay. */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    struct reload_env *r = arg;
    struct cfg next;
    char err[400], summary[1024];
    int applied = -1;
    if (cfg_reread(&next, r->argc, r->argv, err, sizeof err) == 0) {
        applied = cfg_reload(r->cfg, &next, summary, sizeof summary, err, sizeof err);
        cfg_free(&next);
    }
    if (applied < 0) {
        metrics_add(M_CONFIG_RELOADS_REFUSED, 1);
        log_error("config reload refused, the running settings stay: %s", err);
        return;
    }
    /* The settings read at run time (CFG_LIVE) already hold their new
     * values; these two keep theirs apart. */
    if (log_set_level(r->cfg->log_level) != 0)
        abort(); /* cfg_check let only valid levels through */
    limits_update(r->cfg);
    metrics_add(M_CONFIG_RELOADS_OK, 1);
    metrics_set(M_CONFIG_RELOAD_LAST_OK, (long)time(NULL));
    log_info("config reloaded: %s", summary);
}

/* ---- each public HTTP loop's order desk (http/server.h: struct
 * http_loop_hooks); the internal listener takes no orders ---- */

struct desk_env {
    const struct cfg *cfg;
    struct workers *ws; /* the PostgreSQL look-ups of the order path */
};

static void *desk_start(struct event_base *base, void *arg, char *err, size_t errlen)
{
    const struct desk_env *e = arg;
    return order_desk_new(base, e->cfg, e->ws, err, errlen);
}

/* New orders answer 503 at once; reservations already sent keep theirs. */
static void desk_stop(void *od)
{
    order_desk_close(od);
}

static int desk_pending(const void *od)
{
    return order_desk_pending(od);
}

/* Buyers still waiting for a commit learn that their order is pending. */
static void desk_free(void *od)
{
    order_desk_free(od);
}

static int serve(struct cfg *c, int argc, char **argv)
{
    char err[256];
    if (!c->admin_token[0])
        log_warn("admin_token is empty: the admin API refuses every request");
    /* Without it no buyer can be told from another: the buyer API would
     * refuse every order, so a sale cannot start (cfg_check refused a short one). */
    if (!c->buyer_token_secret[0]) {
        log_error("buyer_token_secret is not set: buyers are identified by tokens signed with it "
                  "(SECKILL_BUYER_TOKEN_SECRET or the config file, at least %d bytes)",
                  BUYER_TOKEN_SECRET_MIN_BYTES);
        return 1;
    }

    /* Initialise subsystems; order matters: workers before the HTTP loops that
     * submit to them, the writer last.  Teardown runs in reverse. */
    struct event_base *base = event_base_new();
    if (!base) {
        log_error("cannot create the main event loop");
        return 1;
    }
    struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    struct reload_env reload_env = {.cfg = c, .argc = argc, .argv = argv};
    struct event *sighup = evsignal_new(base, SIGHUP, on_reload, &reload_env);
    evsignal_add(sigint, NULL);
    evsignal_add(sigterm, NULL);
    /* Caught from here on; its callback runs in event_base_dispatch below,
     * once everything that reads the settings has started. */
    evsignal_add(sighup, NULL);

    int rc = 1;
    struct http_server *http = NULL, *internal = NULL;
    struct metrics_cache *gauges = NULL;
    struct order_writer *writer = NULL;
    struct reconciler *reconciler = NULL;
    struct order_sweeper *sweeper = NULL;
    struct workers *ws = NULL;
    /* The lock library's two background threads: one subscriber connection
     * that wakes every waiting lock on release, and the watchdog that renews
     * held locks and flags lost ones.  Both open their own connections. */
    struct redis_conn lock_conn;
    struct rlock_notifier *notifier = NULL;
    struct rlock_watchdog *watchdog = NULL;
    if (redis_conn_follow_start(c, err, sizeof err) != 0 ||
        redis_conn_init(&lock_conn, c, err, sizeof err) != 0 ||
        redis_conn_check_credentials(&lock_conn, err, sizeof err) != 0 ||
        redis_functions_check_config(c, err, sizeof err) != 0)
        goto out;
    notifier = rlock_notifier_new(redis_conn_open, &lock_conn, err, sizeof err);
    struct rlock_watchdog_opts wo = {.lease_ms = (int)c->lock_ttl_ms,
                                     .op_timeout_ms = (int)c->redis_timeout_ms};
    /* On a cluster the watchdog sends each renewal to its lock's master. */
    watchdog = notifier ? redis_conn_watchdog(&lock_conn, &wo, err, sizeof err) : NULL;
    if (!watchdog)
        goto out;
    rlock_notifier_set_default(notifier);
    txlock_set_watchdog(watchdog);
    ws = workers_start(c, err, sizeof err);
    if (!ws)
        goto out;
    /* Its first pass settles what a dead predecessor left and restores SKUs
     * Redis lost, before buyers arrive. */
    reconciler = reconcile_start(c, err, sizeof err);
    if (!reconciler)
        goto out;
    limits_init(c); /* before the loops that consult them */
    /* Before the internal listener whose scrapes read it. */
    gauges = metrics_cache_start(c, err, sizeof err);
    if (!gauges)
        goto out;
    handle_metrics_init(gauges);
    struct desk_env desk_env = {.cfg = c, .ws = ws};
    const struct http_loop_hooks desks = {.start = desk_start,
                                          .stop = desk_stop,
                                          .pending = desk_pending,
                                          .free = desk_free,
                                          .arg = &desk_env};
    const struct http_listen public_ln = {.setting = "http_addr",
                                          .addr = c->http_addr,
                                          .threads = c->http_threads,
                                          .max_connections = c->http_max_connections,
                                          .hooks = &desks};
    /* One loop: metrics, health and admin requests are few, and their
     * blocking work runs on the workers and the cache's thread. */
    const struct http_listen internal_ln = {.setting = "metrics_addr",
                                            .addr = c->metrics_addr,
                                            .threads = 1,
                                            .max_connections = c->metrics_max_connections,
                                            .internal = 1};
    http = http_server_start(c, &public_ln, ws, routes_dispatch, err, sizeof err);
    if (!http)
        goto out;
    internal = http_server_start(c, &internal_ln, ws, routes_dispatch, err, sizeof err);
    if (!internal)
        goto out;
    writer = order_writer_start(c, err, sizeof err);
    if (!writer)
        goto out;
    sweeper = order_sweeper_start(c, err, sizeof err);
    if (!sweeper)
        goto out;
    log_info("seckilld listening on %s (%" PRId64 " HTTP threads, %" PRId64
             " writers), internal API on %s",
             c->http_addr, c->http_threads, c->writer_threads, c->metrics_addr);
    /* Both listeners accept, Redis took the credentials and both stores had
     * their first probe: from here /healthz tells whether they still answer
     * (a store lost later is healed, not a reason to restart). */
    notify_manager("READY=1");
    event_base_dispatch(base);
    rc = 0;
out:
    if (rc)
        log_error("%s", err);
    /* Teardown, reverse order: writers; then the workers, whose last answers
     * still reach running loops; then each loop answers what waits on Redis
     * (503) and exits; the pool's memory goes last, as loops may still submit
     * (and be refused) until they exit. */
    order_sweeper_stop(sweeper);
    order_writer_stop(writer);
    workers_drain(ws);
    metrics_cache_stop(gauges); /* its last answers, too, reach running loops */
    http_server_stop(internal);
    http_server_stop(http);
    handle_metrics_init(NULL);
    metrics_cache_free(gauges);
    limits_free();
    workers_free(ws);
    /* After everything that may ask it for a pass (writers, workers). */
    reconcile_stop(reconciler);
    /* Every lock is released or cleared by now. */
    txlock_set_watchdog(NULL);
    rlock_notifier_set_default(NULL);
    rlock_watchdog_free(watchdog);
    rlock_notifier_free(notifier);
    redis_conn_follow_stop(); /* after every connection that asked it */
    event_free(sighup);
    event_free(sigint);
    event_free(sigterm);
    event_base_free(base);
    return rc;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
    /* libevent must know about threads before any base exists. */
    if (evthread_use_pthreads() != 0) {
        log_error("libevent has no pthreads support");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    struct cfg c;
    cfg_defaults(&c);
    char err[400];
    int first = argc;
    /* Fatal start-up errors are log records too, escaped onto one line: a
     * refused value is quoted in err, and an environment value may hold a
     * newline that would otherwise forge a record of its own. */
    if (cfg_load(&c, argc, argv, &first, err, sizeof err) != 0) {
        log_error("%s", err);
        cfg_free(&c);
        return 2;
    }
    if (cfg_check(&c, err, sizeof err) != 0) {
        log_error("%s", err);
        cfg_free(&c);
        return 2;
    }
    if (log_set_level(c.log_level) != 0) {
        log_error("log_level must be debug, info, warn or error");
        cfg_free(&c);
        return 2;
    }
    const char *cmd = first < argc ? argv[first] : "serve";
    /* Before any thread starts: every transaction's wait is bounded by it. */
    pgwait_set_default_timeout_ms((int)c.pg_client_timeout_ms);
    pgwait_set_host_timeout_ms((int)c.pg_connect_host_timeout_ms);
    embedded_init();
    int rc;
    if (strcmp(cmd, "migrate") == 0) {
        rc = migrate_run(&c) < 0 ? 1 : 0;
    } else if (strcmp(cmd, "serve") == 0) {
        rc = serve(&c, argc, argv);
    } else {
        log_error("unknown command \"%s\"", cmd);
        usage(stderr);
        rc = 2;
    }
    cfg_free(&c);
    return rc;
}
