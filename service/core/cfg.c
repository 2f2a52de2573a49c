#include "core/cfg.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum cfg_type { CFG_STR, CFG_INT };

struct cfg_def {
    const char *name;
    enum cfg_type type;
    size_t offset;
    const char *def;
    int64_t min, max;
    const char *help;
};

#define S(f, d, h)                                                                                 \
    {                                                                                              \
#f, CFG_STR, offsetof(struct cfg, f), d, 0, 0, h                                           \
    }
#define I(f, d, lo, hi, h)                                                                         \
    {                                                                                              \
#f, CFG_INT, offsetof(struct cfg, f), #d, lo, hi, h                                        \
    }

/* The one table of settings.  Env name is SECKILL_<NAME upper-cased>. */
static const struct cfg_def defs[] = {
    S(http_addr, "127.0.0.1:8080", "address the HTTP API listens on"),
    I(http_threads, 2, 1, 64, "HTTP event-loop threads"),
    I(http_backlog, 4096, 16, 65535, "listen queue of the HTTP socket (a sale opens many at once)"),
    I(http_timeout_s, 10, 1, 3600, "idle read/write timeout per HTTP connection"),
    I(max_body_bytes, 4096, 64, 1048576, "largest accepted request body"),
    I(max_header_bytes, 8192, 512, 1048576, "largest accepted header block"),
    I(max_idempotency_key_bytes, 128, 8, 200, "longest accepted Idempotency-Key"),
    I(max_qty_per_order, 1000, 1, 1000000, "largest qty in one order"),
    I(rate_buyer_orders_per_min, 60, 0, 60000000,
      "orders one buyer may place on one SKU per minute, across every instance (0: no limit)"),
    I(rate_buyer_orders_burst, 5, 0, 1000000,
      "orders one buyer may place on one SKU at once before rate_buyer_orders_per_min applies (0: "
      "no limit)"),
    I(rate_addr_per_s, 50, 0, 1000000,
      "buyer API requests (orders, lookups) per second from one client address, per instance (0: "
      "no limit; set 0 behind a proxy that hides the buyers' addresses)"),
    I(rate_addr_burst, 100, 0, 10000000,
      "buyer API requests from one client address at once before rate_addr_per_s applies (0: no "
      "limit)"),
    I(rate_addr_buckets, 65536, 8, 16777216,
      "client addresses whose buckets are remembered at most (each table: buyer API, admin "
      "failures)"),
    I(admin_auth_fail_per_min, 6, 0, 60000,
      "failed admin authentications one client address regains per minute (0: no limit)"),
    I(admin_auth_fail_burst, 10, 0, 1000000,
      "failed admin authentications from one client address before every admin request from it "
      "is answered 429 (0: no limit)"),
    S(redis_url, "redis://127.0.0.1:6380/0", "Redis server, redis://[:password@]host:port[/db]"),
    I(redis_timeout_ms, 1000, 10, 60000, "timeout of one Redis command"),
    I(redis_connect_timeout_ms, 1000, 10, 60000, "timeout of a Redis connect"),
    I(redis_reconnect_ms, 200, 10, 60000, "pause between Redis reconnect attempts"),
    S(pg_dsn, "host=127.0.0.1 port=5433 dbname=seckill user=seckill connect_timeout=5",
      "libpq connection string (password via PGPASSFILE, never here)"),
    I(pg_statement_timeout_ms, 5000, 10, 600000, "PostgreSQL statement_timeout"),
    I(pg_client_timeout_ms, 6000, 20, 600000,
      "longest wait for a PostgreSQL answer (connect, statement, COMMIT) before the client gives "
      "up on the connection"),
    I(pg_client_check_interval_ms, 1000, 0, 600000,
      "PostgreSQL client_connection_check_interval: how soon a statement whose client gave up "
      "ends (0: only when it next talks to the client)"),
    I(migrate_lock_wait_ms, 60000, 0, 3600000,
      "how long migrate waits for another migrating instance"),
    I(migrate_statement_timeout_ms, 300000, 1000, 86400000,
      "statement and lock timeout of a migration"),
    S(admin_token, "", "bearer token of the admin API; empty disables it"),
    I(worker_threads, 2, 1, 64, "blocking worker threads (admin, lookups)"),
    I(worker_queue_max, 1000, 1, 1000000, "queued jobs beyond this are refused with 503"),
    I(lock_ttl_ms, 10000, 100, 600000, "lease of a distributed lock"),
    I(lock_wait_ms, 2000, 0, 600000, "how long to wait for a busy lock"),
    I(lock_retry_ms, 20, 1, 10000, "base retry interval while waiting for a lock"),
    I(lock_commit_margin_ms, 500, 0, 600000, "refuse to commit with less lease left"),
    I(lock_min_replicas, 0, 0, 16, "replicas that must acknowledge a new lock (0: do not wait)"),
    I(lock_replica_timeout_ms, 100, 1, 60000, "how long a new lock waits for its replicas"),
    I(idempotency_ttl_s, 86400, 1, 31536000, "how long an Idempotency-Key is remembered"),
    S(order_ack, "durable",
      "durable: answer 201 once the order is committed in PostgreSQL; reserved: 202 once Redis "
      "holds it"),
    I(order_ack_wait_ms, 2000, 10, 60000,
      "durable mode: longest wait for the commit before answering 202 pending"),
    I(reserve_deadline_margin_ms, 250, 1, 30000,
      "the reserve script refuses to take stock this long before the Redis timeout"),
    I(reconcile_interval_ms, 5000, 100, 3600000,
      "how often Redis is compared with PostgreSQL and drift settled"),
    I(reconcile_retry_ms, 1000, 10, 3600000,
      "next reconciliation after a pass that could not finish (a dead process's lock, a store "
      "down)"),
    I(writer_threads, 1, 0, 64, "order writer threads (0: this instance writes no orders)"),
    I(writer_batch, 500, 1, 10000, "stream entries per database transaction"),
    I(writer_block_ms, 200, 1, 60000, "XREADGROUP block time"),
    I(writer_claim_idle_ms, 5000, 100, 3600000, "reclaim stream entries idle this long"),
    I(writer_refresh_ms, 1000, 10, 3600000, "how often the writer re-reads the SKU list"),
    I(writer_retry_ms, 500, 1, 600000, "pause after a failed batch"),
    I(dead_letter_max, 100000, 100, 100000000,
      "entries kept (about) in a SKU's dead-letter stream"),
    S(log_level, "info", "debug, info, warn or error"),
};

#undef S
#undef I

static const struct cfg_def *find_def(const char *name)
{
    char norm[64];
    size_t n = strlen(name);
    if (n >= sizeof norm)
        return NULL;
    for (size_t i = 0; i <= n; i++)
        norm[i] = name[i] == '-' ? '_' : (char)tolower((unsigned char)name[i]);
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        if (strcmp(defs[i].name, norm) == 0)
            return &defs[i];
    return NULL;
}

static int set_def(struct cfg *c, const struct cfg_def *d, const char *value, char *err,
                   size_t errlen)
{
    char *p = (char *)c + d->offset;
    if (d->type == CFG_STR) {
        char *copy = strdup(value);
        if (!copy)
            abort();
        free(*(char **)p);
        *(char **)p = copy;
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end != '\0' || v < d->min || v > d->max) {
        snprintf(err, errlen, "%s: \"%s\" is not an integer between %" PRId64 " and %" PRId64,
                 d->name, value, d->min, d->max);
        return -1;
    }
    *(int64_t *)p = v;
    return 0;
}

int cfg_set(struct cfg *c, const char *name, const char *value, char *err, size_t errlen)
{
    const struct cfg_def *d = find_def(name);
    if (!d) {
        snprintf(err, errlen, "unknown setting \"%s\"", name);
        return -1;
    }
    return set_def(c, d, value, err, errlen);
}

void cfg_defaults(struct cfg *c)
{
    char err[160];
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        if (set_def(c, &defs[i], defs[i].def, err, sizeof err) != 0)
            abort(); /* a bad built-in default is a programming error */
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int load_file(struct cfg *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected name = value", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        char sub[160];
        if (cfg_set(c, trim(s), trim(eq + 1), sub, sizeof sub) != 0) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, sub);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

static int load_env(struct cfg *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        char env[80] = "SECKILL_";
        size_t n = strlen(env);
        for (const char *p = defs[i].name; *p && n + 1 < sizeof env; p++)
            env[n++] = (char)toupper((unsigned char)*p);
        env[n] = '\0';
        const char *v = getenv(env);
        if (v && set_def(c, &defs[i], v, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int cfg_load(struct cfg *c, int argc, char **argv, int *args, char *err, size_t errlen)
{
    /* The config file comes first so that env and flags override it. */
    int i;
    const char *file = getenv("SECKILL_CONFIG");
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
    }
    if (file && load_file(c, file, err, errlen) != 0)
        return -1;
    if (load_env(c, err, errlen) != 0)
        return -1;
    *args = argc;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (*args == argc)
                *args = i;
            continue;
        }
        char name[64];
        const char *val = strchr(a, '=');
        size_t n = val ? (size_t)(val - a - 2) : strlen(a + 2);
        if (n >= sizeof name) {
            snprintf(err, errlen, "unknown flag %s", a);
            return -1;
        }
        memcpy(name, a + 2, n);
        name[n] = '\0';
        if (val)
            val++;
        else if (i + 1 < argc)
            val = argv[++i];
        else {
            snprintf(err, errlen, "flag %s needs a value", a);
            return -1;
        }
        if (strcmp(name, "config") == 0)
            continue;
        if (cfg_set(c, name, val, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int cfg_check(const struct cfg *c, char *err, size_t errlen)
{
    if (c->lock_commit_margin_ms >= c->lock_ttl_ms) {
        snprintf(err, errlen,
                 "lock_commit_margin_ms (%" PRId64 ") must be below lock_ttl_ms (%" PRId64 ")",
                 c->lock_commit_margin_ms, c->lock_ttl_ms);
        return -1;
    }
    if (c->pg_statement_timeout_ms >= c->lock_ttl_ms) {
        snprintf(err, errlen,
                 "pg_statement_timeout_ms (%" PRId64 ") must be below lock_ttl_ms (%" PRId64
                 "): a statement may not outlast the lock that guards it",
                 c->pg_statement_timeout_ms, c->lock_ttl_ms);
        return -1;
    }
    /* Above the server's bound, so a slow statement normally ends with the
     * server's clean error and the connection survives; below the lease, so
     * a writer that stops waiting still holds its lock and can roll back. */
    if (c->pg_client_timeout_ms <= c->pg_statement_timeout_ms ||
        c->pg_client_timeout_ms >= c->lock_ttl_ms) {
        snprintf(err, errlen,
                 "pg_client_timeout_ms (%" PRId64
                 ") must be above pg_statement_timeout_ms (%" PRId64
                 ") and below lock_ttl_ms (%" PRId64 ")",
                 c->pg_client_timeout_ms, c->pg_statement_timeout_ms, c->lock_ttl_ms);
        return -1;
    }
    if (c->redis_timeout_ms * 3 >= c->lock_ttl_ms) {
        snprintf(err, errlen,
                 "redis_timeout_ms (%" PRId64 ") must be below a third of lock_ttl_ms (%" PRId64
                 "): the watchdog renews every third of a lease, one command at a time",
                 c->redis_timeout_ms, c->lock_ttl_ms);
        return -1;
    }
    if (strcmp(c->order_ack, "durable") != 0 && strcmp(c->order_ack, "reserved") != 0) {
        snprintf(err, errlen, "order_ack must be durable or reserved, not \"%s\"", c->order_ack);
        return -1;
    }
    if (c->reserve_deadline_margin_ms >= c->redis_timeout_ms) {
        snprintf(err, errlen,
                 "reserve_deadline_margin_ms (%" PRId64 ") must be below redis_timeout_ms (%" PRId64
                 "): the reserve script would never have time to run",
                 c->reserve_deadline_margin_ms, c->redis_timeout_ms);
        return -1;
    }
    if (c->lock_min_replicas > 0 && c->lock_replica_timeout_ms >= c->redis_timeout_ms) {
        snprintf(err, errlen, "lock_replica_timeout_ms must be below redis_timeout_ms");
        return -1;
    }
    return 0;
}

void cfg_print_help(FILE *out)
{
    fprintf(
        out,
        "settings (flag --name=value, env SECKILL_NAME, or `name = value` in --config FILE):\n");
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        fprintf(out, "  %-28s %s (default: %s)\n", defs[i].name, defs[i].help,
                strcmp(defs[i].name, "admin_token") == 0 ? "none" : defs[i].def);
}

void cfg_free(struct cfg *c)
{
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        if (defs[i].type == CFG_STR) {
            char **p = (char **)((char *)c + defs[i].offset);
            free(*p);
            *p = NULL;
        }
}
