#include "core/cfg.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/buyer_token.h"

enum cfg_type { CFG_STR, CFG_INT };

/* What a setting's value may hold.  A secret is never taken from a
 * command-line flag (any local user reads /proc/PID/cmdline), never printed,
 * and has a companion "<name>_file" setting that reads it from a file. */
enum cfg_flags {
    CFG_SECRET = 1,        /* the value is a secret */
    CFG_SECRET_IN_URL = 2, /* the value may carry a password (redis_url, the DSNs) */
    /* A reload (SIGHUP) applies a new value to the running process.  Only for
     * settings read at run time with CFG_LIVE (an int) or by the reloading
     * thread alone (a string), never copied at start-up. */
    CFG_RELOAD = 4,
};

struct cfg_def {
    const char *name;
    enum cfg_type type;
    size_t offset;
    const char *def;
    int64_t min, max;
    const char *help;
    unsigned flags; /* enum cfg_flags */
};

#define FILE_SUFFIX "_file"
#define SECRET_FILE_MAX_BYTES 4096

#define S(f, d, h) SF(f, d, 0, h)
/* A string setting with enum cfg_flags, e.g. SF(name, "", CFG_SECRET, "help"). */
#define SF(f, d, fl, h)                                                                            \
    {                                                                                              \
#f, CFG_STR, offsetof(struct cfg, f), d, 0, 0, h, fl                                       \
    }
#define I(f, d, lo, hi, h) IF(f, d, lo, hi, 0, h)
/* An int setting a reload applies (CFG_RELOAD). */
#define IR(f, d, lo, hi, h) IF(f, d, lo, hi, CFG_RELOAD, h)
#define IF(f, d, lo, hi, fl, h)                                                                    \
    {                                                                                              \
#f, CFG_INT, offsetof(struct cfg, f), #d, lo, hi, h, fl                                    \
    }

/* The one table of settings.  Env name is SECKILL_<NAME upper-cased>. */
static const struct cfg_def defs[] = {
    S(http_addr, "127.0.0.1:8080", "address the HTTP API listens on"),
    S(http_trusted_proxies, "",
      "comma-separated addresses of load balancers that send the PROXY protocol (v1) header: "
      "from them it is required, and its client address is the one rate limits and logs use; "
      "\"\" none"),
    I(http_threads, 2, 1, 64, "HTTP event-loop threads"),
    I(http_backlog, 4096, 16, 65535, "listen queue of the HTTP socket (a sale opens many at once)"),
    IR(http_request_timeout_ms, 5000, 100, 600000,
       "a request must arrive whole (first byte to last) within this, else 408 and close"),
    IR(http_idle_timeout_ms, 10000, 100, 3600000, "an idle keep-alive connection is closed after"),
    IR(http_write_timeout_ms, 10000, 100, 600000,
       "an answer not written whole within this of its first stalled write closes the "
       "connection (one deadline, not renewed by progress)"),
    I(http_max_connections, 10000, 1, 1000000,
      "open HTTP connections; beyond, new ones are closed at once"),
    I(http_max_connections_per_addr, 1000, 1, 1000000,
      "open HTTP connections per client address (raise it behind a proxy)"),
    IR(request_deadline_ms, 5000, 100, 600000,
       "every wait of one request on Redis and PostgreSQL together, counted from when it was read "
       "whole: past it the request is answered 503 with Retry-After (keep it below the load "
       "balancer's server timeout)"),
    I(health_timeout_ms, 1000, 50, 60000,
      "a health probe waits this long for a store; a store whose last good probe is older than "
      "health_probe_interval_ms plus this is reported down by GET /healthz"),
    I(health_probe_interval_ms, 250, 20, 60000,
      "the probe threads check Redis and PostgreSQL this often in the background; GET /healthz "
      "answers from their latest result at once, never waiting on a store"),
    I(max_body_bytes, 4096, 64, 1048576, "largest accepted request body"),
    I(max_header_bytes, 8192, 512, 1048576, "largest accepted header block"),
    I(max_idempotency_key_bytes, 128, 8, 200, "longest accepted Idempotency-Key"),
    I(max_qty_per_order, 1000, 1, 1000000, "largest qty in one order"),
    IR(rate_buyer_orders_per_min, 60, 0, 60000000,
       "orders one buyer may place on one SKU per minute, across every instance (0: no limit)"),
    IR(rate_buyer_orders_burst, 5, 0, 1000000,
       "orders one buyer may place on one SKU at once before rate_buyer_orders_per_min applies (0: "
       "no limit)"),
    IR(rate_addr_per_s, 50, 0, 1000000,
       "buyer API requests (orders, lookups) per second from one client address, per instance (0: "
       "no limit; set 0 behind a proxy that hides the buyers' addresses)"),
    IR(rate_addr_burst, 100, 0, 10000000,
       "buyer API requests from one client address at once before rate_addr_per_s applies (0: no "
       "limit)"),
    I(rate_addr_buckets, 65536, 8, 16777216,
      "client addresses whose buckets are remembered at most (each table: buyer API, admin "
      "failures)"),
    IR(admin_auth_fail_per_min, 6, 0, 60000,
       "failed admin authentications one client address regains per minute (0: no limit)"),
    IR(admin_auth_fail_burst, 10, 0, 1000000,
       "failed admin authentications from one client address before its wrong tokens are answered "
       "429 (the right token is always served; 0: no limit)"),
    IR(payment_auth_fail_per_min, 6, 0, 60000,
       "failed authentications of the payment callback one client address regains per minute, "
       "apart from the admin ones (0: no limit)"),
    IR(payment_auth_fail_burst, 10, 0, 1000000,
       "failed authentications of the payment callback from one client address before its wrong "
       "tokens are answered 429 (the right token is always served; 0: no limit)"),
    SF(redis_url, "redis://127.0.0.1:6380/0", CFG_SECRET_IN_URL,
       "Redis server, redis://[[user]:password@]host:port[/db] (user and password "
       "percent-encoded); with a password, from SECKILL_REDIS_URL or redis_url_file only"),
    I(redis_timeout_ms, 1000, 10, 60000, "timeout of one Redis command"),
    I(redis_connect_timeout_ms, 1000, 10, 60000, "timeout of a Redis connect"),
    I(redis_reconnect_ms, 200, 10, 60000, "pause between Redis reconnect attempts"),
    I(redis_sentinel_poll_ms, 1000, 50, 60000,
      "with a redis-sentinel:// URL: how often the daemon asks its Sentinel where the master is, "
      "besides following its +switch-master announcements"),
    SF(redis_functions_url, "", CFG_SECRET_IN_URL,
       "the same Redis as redis_url, as a user that may only FUNCTION LOAD (and FUNCTION LIST): "
       "the daemon loads its Redis Functions library again with it when Redis lost it (an empty "
       "restart); empty: it does not, and `seckilld migrate` must (with a password, from "
       "SECKILL_REDIS_FUNCTIONS_URL or redis_functions_url_file only)"),
    SF(migrate_redis_url, "", CFG_SECRET_IN_URL,
       "the same Redis as redis_url, as its administrator: migrate loads the Redis Functions "
       "library with it (empty: redis_url; with a password, from SECKILL_MIGRATE_REDIS_URL or "
       "migrate_redis_url_file only)"),
    SF(pg_dsn, "host=127.0.0.1 port=5433 dbname=seckill user=seckill_app connect_timeout=5",
       CFG_SECRET_IN_URL,
       "libpq connection string of the service's role (best without a password: PGPASSFILE; with "
       "one, from SECKILL_PG_DSN or pg_dsn_file only)"),
    SF(pg_writer_dsn, "", CFG_SECRET_IN_URL,
       "libpq connection string of the order writers' sessions (empty: pg_dsn): behind pgbouncer, "
       "a session-pooled database, since a writer prepares named statements and sets the planner "
       "once per session; pg_dsn may then be transaction-pooled (with a password, from "
       "SECKILL_PG_WRITER_DSN or pg_writer_dsn_file only)"),
    SF(migrate_pg_dsn, "", CFG_SECRET_IN_URL,
       "libpq connection string of the schema's owner, for migrate only (empty: pg_dsn; with a "
       "password, from SECKILL_MIGRATE_PG_DSN or migrate_pg_dsn_file only)"),
    I(pg_statement_timeout_ms, 5000, 10, 600000, "PostgreSQL statement_timeout"),
    I(pg_client_timeout_ms, 6000, 20, 600000,
      "longest wait for a PostgreSQL answer (connect, statement, COMMIT) before the client gives "
      "up on the connection"),
    I(pg_connect_host_timeout_ms, 2000, 10, 600000,
      "with several hosts in pg_dsn (a primary and its standbys): the longest one connect "
      "attempt waits for one host before trying the next, so a frozen old primary does not "
      "hide the new one (the connect as a whole still ends within pg_client_timeout_ms)"),
    I(pg_client_check_interval_ms, 1000, 0, 600000,
      "PostgreSQL client_connection_check_interval: how soon a statement whose client gave up "
      "ends (0: only when it next talks to the client)"),
    I(migrate_lock_wait_ms, 60000, 0, 3600000,
      "how long migrate waits for another migrating instance"),
    I(migrate_statement_timeout_ms, 300000, 1000, 86400000,
      "statement and lock timeout of a migration"),
    SF(admin_token, "", CFG_SECRET,
       "bearer token of the admin API, at least 32 bytes; empty disables it"),
    SF(payment_token, "", CFG_SECRET,
       "bearer token of the payment system, at least 32 bytes: it may call the payment callback "
       "(POST /admin/v1/orders/{id}/payment) and nothing else; empty: only admin_token may"),
    SF(buyer_token_secret, "", CFG_SECRET,
       "HMAC-SHA256 secret that signs buyer tokens, at least 32 bytes; serve refuses to start "
       "without it (environment, config file or buyer_token_secret_file; never a flag)"),
    S(buyer_token_kid, "",
      "key id of buyer_token_secret: a token whose header kid is this is verified with it, as is "
      "one without kid; \"\" none (1-64 of A-Z a-z 0-9 . _ -)"),
    SF(buyer_token_secret_next, "", CFG_SECRET,
       "a second HMAC-SHA256 secret for buyer tokens, during a rotation: tokens whose kid is "
       "buyer_token_kid_next are verified with it (at least 32 bytes; \"\" none)"),
    S(buyer_token_kid_next, "",
      "key id of buyer_token_secret_next, required with it, other than buyer_token_kid"),
    I(buyer_token_max_ttl_s, 86400, 60, 31536000,
      "longest lifetime of a buyer token: one whose exp lies further than this after its iat, or "
      "after now (plus buyer_token_leeway_s), is refused"),
    I(buyer_token_leeway_s, 30, 0, 300, "clock skew tolerated on a buyer token's exp and nbf"),
    I(max_buyer_token_bytes, 1024, 128, 8192, "longest accepted buyer token"),
    I(worker_threads, 2, 1, 64, "blocking worker threads (admin, lookups)"),
    I(worker_queue_max, 1000, 1, 1000000, "queued jobs beyond this are refused with 503"),
    I(lock_ttl_ms, 10000, 100, 600000, "lease of a distributed lock"),
    I(lock_wait_ms, 2000, 0, 600000, "how long to wait for a busy lock"),
    I(lock_retry_ms, 20, 1, 10000, "base retry interval while waiting for a lock"),
    I(lock_commit_margin_ms, 500, 0, 600000, "refuse to commit with less lease left"),
    I(lock_min_replicas, 0, 0, 16, "replicas that must acknowledge a new lock (0: do not wait)"),
    I(lock_replica_timeout_ms, 100, 1, 60000, "how long a new lock waits for its replicas"),
    I(idempotency_ttl_s, 86400, 1, 31536000, "how long an Idempotency-Key is remembered"),
    I(idempotency_auto_ttl_s, 600, 10, 31536000,
      "how long the key the service makes up for an order sent without one is remembered: a "
      "503 whose outcome is open names it, and a retry with it within this is answered once (at "
      "most idempotency_ttl_s)"),
    I(refusal_ttl_s, 60, 1, 31536000,
      "how long a refusal (sold_out, limit_exceeded) is remembered under the buyer's "
      "Idempotency-Key (at most idempotency_ttl_s): each costs Redis memory, and a retry after "
      "this is decided afresh"),
    I(full_retry_after_s, 5, 1, 3600,
      "Retry-After of a 503 store_full: Redis is at its maxmemory and took nothing"),
    S(order_ack, "durable",
      "durable: answer 201 once the order is committed in PostgreSQL; reserved: 202 once Redis "
      "holds it"),
    IR(order_ack_wait_ms, 2000, 10, 60000,
       "durable mode: longest wait for the commit before answering 202 pending"),
    I(reserve_batch_max, 16, 1, 256,
      "orders of one SKU that arrive in one event-loop turn sent to Redis in one reserve script "
      "call, at most (1: a call per order)"),
    I(reserve_deadline_margin_ms, 250, 1, 30000,
      "the reserve script refuses to take stock this long before the Redis timeout"),
    IR(sold_out_flag_ms, 50, 0, 10000,
       "a SKU Redis found sold out (no unit left) is answered sold_out by this process without "
       "Redis for this long after the request that found it was sent; stock that comes back is "
       "sold again within this bound (0: off)"),
    I(bucket_refill_rounds, 3, 1, 20,
      "an order on a SKU split into buckets whose own bucket is empty while others hold units "
      "waits for this many moves of units into it (each followed by a new try) before it is "
      "answered 503 (others bought them first)"),
    I(reconcile_interval_ms, 5000, 100, 3600000,
      "how often Redis is compared with PostgreSQL and drift settled"),
    I(reconcile_retry_ms, 1000, 10, 3600000,
      "next reconciliation after a pass that could not finish (a dead process's lock, a store "
      "down)"),
    I(pending_settle_after_ms, 2000, 0, 3600000,
      "durable orders answered 202 pending are recorded in PostgreSQL; one its writer has not "
      "written this long after it was recorded is looked at by the reconciler, which decides it "
      "itself (confirmed by a guarded stock take, or rejected) when Redis lost its reservation"),
    I(expiry_sweep_interval_ms, 1000, 0, 3600000,
      "how often this instance expires confirmed orders whose payment window passed and settles "
      "returns a dead process left (0: this instance does not sweep)"),
    I(expiry_batch, 1000, 1, 100000, "orders expired per database transaction"),
    I(expiry_sweep_skus, 1000, 1, 1000000,
      "SKUs one sweep works on; the next sweep goes on after the last one"),
    I(writer_threads, 2, 0, 64,
      "order writer threads, each on its share of the SKUs (0: this instance writes no orders)"),
    I(writer_batch, 500, 1, 10000, "stream entries of one SKU per database transaction"),
    I(writer_skus_per_tx, 128, 1, 4096,
      "SKUs whose batches one writer transaction writes together (their locks taken in id "
      "order): many SKUs on sale pay one COMMIT, not one each"),
    I(writer_block_ms, 200, 1, 60000,
      "XREADGROUP block time; on a Redis Cluster, the longest pause between polls while idle"),
    I(writer_claim_idle_ms, 5000, 100, 3600000, "reclaim stream entries idle this long"),
    I(writer_refresh_ms, 1000, 10, 3600000, "how often the writer re-reads the SKU list"),
    I(writer_retry_ms, 500, 1, 600000, "pause after a failed batch"),
    I(dead_letter_max, 100000, 100, 100000000,
      "entries kept (about) in a SKU's dead-letter stream"),
    IR(metrics_max_skus, 1000, 0, 100000,
       "SKUs whose gauges /metrics reads from Redis and PostgreSQL (open sales first, then the "
       "newest; 0: none)"),
    S(metrics_addr, "127.0.0.1:9464",
      "the internal listener (host:port): /metrics, /healthz and the admin API; keep it off the "
      "public network (http_addr answers /metrics 404)"),
    I(metrics_max_connections, 64, 1, 100000,
      "open connections to metrics_addr; beyond, new ones are closed at once"),
    IR(metrics_refresh_ms, 2000, 0, 3600000,
       "the per-SKU gauges of /metrics are read from the stores at most this often, one read at a "
       "time; scrapes in between get the last read (0: every scrape reads, still one at a time)"),
    I(admin_on_public, 0, 0, 1,
      "1: the admin API (with its token) is served on http_addr as well, for a one-port set-up"),
    SF(log_level, "info", CFG_RELOAD, "debug, info, warn or error"),
};

#undef S
#undef SF
#undef I
#undef IR
#undef IF

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
        char *copy = xstrdup(value);
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

/* The secret setting whose companion "<name>_file" is 'name', or NULL. */
static const struct cfg_def *find_file_def(const char *name)
{
    size_t n = strlen(name), sl = strlen(FILE_SUFFIX);
    char base[80];
    if (n <= sl || n >= sizeof base)
        return NULL;
    for (size_t i = 0; i <= n; i++)
        base[i] = name[i] == '-' ? '_' : name[i];
    if (strcmp(base + n - sl, FILE_SUFFIX) != 0)
        return NULL;
    base[n - sl] = '\0';
    const struct cfg_def *d = find_def(base);
    return d && (d->flags & (CFG_SECRET | CFG_SECRET_IN_URL)) ? d : NULL;
}

/* Sets d from the first line of the file at 'path' (trailing CR/LF and
 * blanks dropped).  Messages name the file, never its content. */
static int set_from_file(struct cfg *c, const struct cfg_def *d, const char *path, char *err,
                         size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s%s: cannot open %s: %s", d->name, FILE_SUFFIX, path,
                 strerror(errno));
        return -1;
    }
    char buf[SECRET_FILE_MAX_BYTES + 2];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > SECRET_FILE_MAX_BYTES) {
        snprintf(err, errlen, "%s%s: %s is unreadable or longer than %d bytes", d->name,
                 FILE_SUFFIX, path, SECRET_FILE_MAX_BYTES);
        return -1;
    }
    buf[n] = '\0';
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    if (strlen(buf) != n || strpbrk(buf, "\r\n")) {
        snprintf(err, errlen, "%s%s: %s must hold one line of text", d->name, FILE_SUFFIX, path);
        return -1;
    }
    int rc = set_def(c, d, buf, err, errlen);
    memset(buf, 0, sizeof buf);
    return rc;
}

int cfg_set(struct cfg *c, const char *name, const char *value, char *err, size_t errlen)
{
    const struct cfg_def *d = find_def(name);
    if (d)
        return set_def(c, d, value, err, errlen);
    if ((d = find_file_def(name)))
        return set_from_file(c, d, value, err, errlen);
    snprintf(err, errlen, "unknown setting \"%s\"", name);
    return -1;
}

/* True when a redis:// URL or a libpq conninfo (keywords or URI) carries a
 * password.  A conninfo libpq cannot parse counts when it mentions one. */
static int holds_password(const char *v)
{
    if (strncmp(v, "redis", 5) == 0) {
        const char *p = strstr(v, "://");
        return p && strchr(p, '@') != NULL; /* any userinfo: "redis://pw@h" is a typo'd secret */
    }
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(v, &perr);
    if (!opts) {
        PQfreemem(perr);
        return strstr(v, "password") != NULL || strchr(v, '@') != NULL;
    }
    int found = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val && o->val[0])
            found = 1;
    PQconninfoFree(opts);
    return found;
}

int cfg_set_flag(struct cfg *c, const char *name, const char *value, char *err, size_t errlen)
{
    const struct cfg_def *d = find_def(name);
    if (d &&
        ((d->flags & CFG_SECRET) || ((d->flags & CFG_SECRET_IN_URL) && holds_password(value)))) {
        char env[80];
        cfg_env_name(env, sizeof env, d->name);
        snprintf(err, errlen,
                 "%s%s is not taken from the command line, where any local user can read it "
                 "(ps, /proc/PID/cmdline); set %s, or %s%s=FILE (--%s%s, %s%s, or in the "
                 "config file)",
                 d->name, (d->flags & CFG_SECRET) ? "" : " with a password", env, d->name,
                 FILE_SUFFIX, d->name, FILE_SUFFIX, env, "_FILE");
        return -1;
    }
    return cfg_set(c, name, value, err, errlen);
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

void cfg_env_name(char *out, size_t cap, const char *name)
{
    size_t n = (size_t)snprintf(out, cap, "SECKILL_");
    for (const char *p = name; *p && n + 1 < cap; p++)
        out[n++] = (char)toupper((unsigned char)*p);
    out[n < cap ? n : cap - 1] = '\0';
}

static int load_env(struct cfg *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        char env[80], env_file[96];
        cfg_env_name(env, sizeof env, defs[i].name);
        snprintf(env_file, sizeof env_file, "%s_FILE", env);
        const char *v = getenv(env);
        const char *path =
            (defs[i].flags & (CFG_SECRET | CFG_SECRET_IN_URL)) ? getenv(env_file) : NULL;
        if (v && path) {
            snprintf(err, errlen, "both %s and %s are set; set one", env, env_file);
            return -1;
        }
        if (v && set_def(c, &defs[i], v, err, errlen) != 0)
            return -1;
        if (path && set_from_file(c, &defs[i], path, err, errlen) != 0)
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
        if (cfg_set_flag(c, name, val, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* The buyer token keys of a rotation: each kid well formed, a next secret
 * long, with a kid of its own, and unlike the primary (equal secrets or kids
 * would make a kid name two keys, or a rotation rotate nothing). */
static int cfg_check_buyer_keys(const struct cfg *c, char *err, size_t errlen)
{
    const char *kid = c->buyer_token_kid, *next = c->buyer_token_secret_next,
               *kid_next = c->buyer_token_kid_next;
    const char *bad = kid[0] && !buyer_token_kid_valid(kid)             ? "buyer_token_kid"
                      : kid_next[0] && !buyer_token_kid_valid(kid_next) ? "buyer_token_kid_next"
                                                                        : NULL;
    if (bad) {
        snprintf(err, errlen, "%s must be 1-%d characters of A-Z a-z 0-9 . _ -", bad,
                 BUYER_TOKEN_KID_MAX);
        return -1;
    }
    if (!next[0]) {
        if (kid_next[0]) {
            snprintf(err, errlen, "buyer_token_kid_next is set without buyer_token_secret_next");
            return -1;
        }
        return 0;
    }
    if (!c->buyer_token_secret[0]) {
        snprintf(err, errlen, "buyer_token_secret_next needs buyer_token_secret");
        return -1;
    }
    if (strlen(next) < BUYER_TOKEN_SECRET_MIN_BYTES) {
        snprintf(err, errlen, "buyer_token_secret_next must be at least %d bytes long",
                 BUYER_TOKEN_SECRET_MIN_BYTES);
        return -1;
    }
    if (strcmp(next, c->buyer_token_secret) == 0) {
        snprintf(err, errlen, "buyer_token_secret_next must differ from buyer_token_secret");
        return -1;
    }
    if (!kid_next[0] || strcmp(kid_next, kid) == 0) {
        snprintf(err, errlen,
                 "buyer_token_secret_next needs a buyer_token_kid_next of its own (not \"%s\", "
                 "buyer_token_kid's): tokens name the key that signed them",
                 kid);
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
    /* Two listeners on one address would split its connections between the
     * public and the internal API at random. */
    if (!c->metrics_addr[0] || strcmp(c->metrics_addr, c->http_addr) == 0) {
        snprintf(err, errlen,
                 "metrics_addr (\"%s\") must be a host:port other than http_addr (\"%s\"): the "
                 "internal listener serves /metrics and the admin API apart from the public one",
                 c->metrics_addr, c->http_addr);
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
    /* A short token can be guessed over the network; an empty one means no admin API. */
    if (c->admin_token[0] && strlen(c->admin_token) < CFG_ADMIN_TOKEN_MIN_BYTES) {
        snprintf(err, errlen,
                 "admin_token is %zu bytes; it must be at least %d (e.g. the 64 hex digits of "
                 "`od -An -N32 -tx1 /dev/urandom | tr -d ' \\n'`), or empty to disable the "
                 "admin API",
                 strlen(c->admin_token), CFG_ADMIN_TOKEN_MIN_BYTES);
        return -1;
    }
    if (c->payment_token[0] && strlen(c->payment_token) < CFG_ADMIN_TOKEN_MIN_BYTES) {
        snprintf(err, errlen, "payment_token is %zu bytes; it must be at least %d, or empty",
                 strlen(c->payment_token), CFG_ADMIN_TOKEN_MIN_BYTES);
        return -1;
    }
    if (c->payment_token[0] && c->admin_token[0] && strcmp(c->payment_token, c->admin_token) == 0) {
        snprintf(err, errlen, "payment_token must differ from admin_token");
        return -1;
    }
    if (c->buyer_token_secret[0] && strlen(c->buyer_token_secret) < BUYER_TOKEN_SECRET_MIN_BYTES) {
        snprintf(err, errlen, "buyer_token_secret must be at least %d bytes long",
                 BUYER_TOKEN_SECRET_MIN_BYTES);
        return -1;
    }
    if (cfg_check_buyer_keys(c, err, errlen) != 0)
        return -1;
    /* An order's own waits (its reservation, then its commit) are bounded by
     * these two; the request's deadline must leave room for both, or a
     * durable order would be cut short into a 503 after it took stock. */
    /* what is left after an order's own waits records a 202 in PostgreSQL */
    if (c->redis_timeout_ms + c->order_ack_wait_ms + CFG_PENDING_RECORD_MIN_MS >
        c->request_deadline_ms) {
        snprintf(err, errlen,
                 "request_deadline_ms (%" PRId64 ") must be at least redis_timeout_ms (%" PRId64
                 ") + order_ack_wait_ms (%" PRId64 ") + %d: an order waits that long by itself, "
                 "then records a 202",
                 c->request_deadline_ms, c->redis_timeout_ms, c->order_ack_wait_ms,
                 CFG_PENDING_RECORD_MIN_MS);
        return -1;
    }
    if (strcmp(c->log_level, "debug") != 0 && strcmp(c->log_level, "info") != 0 &&
        strcmp(c->log_level, "warn") != 0 && strcmp(c->log_level, "error") != 0) {
        snprintf(err, errlen, "log_level must be debug, info, warn or error, not \"%s\"",
                 c->log_level);
        return -1;
    }
    if (c->lock_min_replicas > 0 && c->lock_replica_timeout_ms >= c->redis_timeout_ms) {
        snprintf(err, errlen, "lock_replica_timeout_ms must be below redis_timeout_ms");
        return -1;
    }
    return 0;
}

int cfg_reread(struct cfg *next, int argc, char **argv, char *err, size_t errlen)
{
    int args;
    cfg_defaults(next);
    if (cfg_load(next, argc, argv, &args, err, errlen) == 0 && cfg_check(next, err, errlen) == 0)
        return 0;
    cfg_free(next);
    return -1;
}

/* A deep copy of src into dst (dst's strings are its own). */
static void cfg_copy(struct cfg *dst, const struct cfg *src)
{
    memcpy(dst, src, sizeof *dst);
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        if (defs[i].type == CFG_STR) {
            char **p = (char **)((char *)dst + defs[i].offset);
            *p = xstrdup(*p);
        }
}

static int same_value(const struct cfg_def *d, const struct cfg *a, const struct cfg *b)
{
    const char *pa = (const char *)a + d->offset, *pb = (const char *)b + d->offset;
    return d->type == CFG_STR ? strcmp(*(char *const *)pa, *(char *const *)pb) == 0
                              : *(const int64_t *)pa == *(const int64_t *)pb;
}

/* Sets d in c to its value in from: an int by a relaxed atomic store (other
 * threads read it with CFG_LIVE), a string by a swap (read by this thread
 * alone). */
static void take_value(const struct cfg_def *d, struct cfg *c, const struct cfg *from)
{
    char *p = (char *)c + d->offset;
    const char *q = (const char *)from + d->offset;
    if (d->type == CFG_INT) {
        __atomic_store_n((int64_t *)p, *(const int64_t *)q, __ATOMIC_RELAXED);
        return;
    }
    char *copy = xstrdup(*(char *const *)q);
    free(*(char **)p);
    *(char **)p = copy;
}

/* Appends text to out (cap bytes, *len used); a summary too long for out
 * ends in "..." rather than a cut word. */
static void append(char *out, size_t cap, size_t *len, const char *text)
{
    size_t n = strlen(text);
    if (*len + n + 4 > cap) {
        if (*len + 4 <= cap && (*len < 3 || strcmp(out + *len - 3, "...") != 0))
            *len += (size_t)snprintf(out + *len, cap - *len, "...");
        return;
    }
    memcpy(out + *len, text, n + 1);
    *len += n;
}

/* Appends d's change from a to b: "name=old->new", or "name" alone for a
 * secret (its values are never printed). */
static void append_change(char *out, size_t cap, size_t *len, const struct cfg_def *d,
                          const struct cfg *a, const struct cfg *b, int first)
{
    char item[256];
    const char *pa = (const char *)a + d->offset, *pb = (const char *)b + d->offset;
    const char *sep = first ? "" : ", ";
    if (d->flags & (CFG_SECRET | CFG_SECRET_IN_URL))
        snprintf(item, sizeof item, "%s%s", sep, d->name);
    else if (d->type == CFG_INT)
        snprintf(item, sizeof item, "%s%s=%" PRId64 "->%" PRId64, sep, d->name,
                 *(const int64_t *)pa, *(const int64_t *)pb);
    else
        snprintf(item, sizeof item, "%s%s=%s->%s", sep, d->name, *(char *const *)pa,
                 *(char *const *)pb);
    append(out, cap, len, item);
}

int cfg_reload(struct cfg *cur, const struct cfg *next, char *summary, size_t cap, char *err,
               size_t errlen)
{
    const size_t ndefs = sizeof defs / sizeof defs[0];
    /* What would run: the reloadable settings from next, the rest as they
     * are.  Checked as one, since the checks tie settings of both kinds
     * (request_deadline_ms against redis_timeout_ms). */
    struct cfg run;
    cfg_copy(&run, cur);
    for (size_t i = 0; i < ndefs; i++)
        if (defs[i].flags & CFG_RELOAD)
            take_value(&defs[i], &run, next);
    int bad = cfg_check(&run, err, errlen);
    cfg_free(&run);
    if (bad)
        return -1;
    size_t len = 0;
    int changed = 0, restart = 0;
    summary[0] = '\0';
    for (size_t i = 0; i < ndefs; i++)
        if ((defs[i].flags & CFG_RELOAD) && !same_value(&defs[i], cur, next)) {
            if (changed++ == 0)
                append(summary, cap, &len, "changed ");
            append_change(summary, cap, &len, &defs[i], cur, next, changed == 1);
            take_value(&defs[i], cur, next);
        }
    if (!changed)
        append(summary, cap, &len, "changed nothing");
    for (size_t i = 0; i < ndefs; i++)
        if (!(defs[i].flags & CFG_RELOAD) && !same_value(&defs[i], cur, next)) {
            append(summary, cap, &len, restart++ == 0 ? "; needs restart: " : ", ");
            append(summary, cap, &len, defs[i].name);
        }
    return changed;
}

void cfg_print_help(FILE *out)
{
    fprintf(
        out,
        "settings (flag --name=value, env SECKILL_NAME, or `name = value` in --config FILE):\n");
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        const struct cfg_def *d = &defs[i];
        fprintf(out, "  %-28s %s (default: %s)%s\n", d->name, d->help,
                (d->flags & CFG_SECRET) || d->def[0] == '\0' ? "none" : d->def,
                (d->flags & CFG_RELOAD) ? " [reloadable: SIGHUP]" : "");
        if (d->flags & (CFG_SECRET | CFG_SECRET_IN_URL))
            fprintf(out, "  %s%-*s read %s from this file (not a secret itself)\n", d->name,
                    (int)(28 - strlen(d->name)), FILE_SUFFIX, d->name);
    }
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
