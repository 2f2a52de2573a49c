#include "lt_opts.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/http.h>
#include <getopt.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/buyer_token.h"
#include <rlock/url.h>

#define DEFAULT_URL "http://127.0.0.1:8080"
#define DEFAULT_ADMIN_URL "http://127.0.0.1:9464"
#define DEFAULT_STOCK 1000
#define DEFAULT_LIMIT 1
#define DEFAULT_USERS 20000
#define DEFAULT_CONCURRENCY 200
#define DEFAULT_DURATION_S 300
#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_ERROR_PAUSE_MS 100
#define DEFAULT_ADMIN_EVERY_MS 50
#define DEFAULT_ADMIN_MAX_DELTA 5
#define DEFAULT_DRAIN_TIMEOUT_S 120
#define DEFAULT_PROGRESS_MS 1000
#define DEFAULT_SEED 1
#define DEFAULT_LIFECYCLE_TIMEOUT_S 60
#define MAX_LIFECYCLE_TIMEOUT_S 3600
#define MAX_TIMEOUT_MS 600000
#define MAX_ADMIN_EVERY_MS 60000
#define MAX_DRAIN_TIMEOUT_S 3600
#define MAX_PROGRESS_MS 60000
#define MAX_USERS 1000000000000LL
#define MAX_REQUESTS 1000000000LL
#define MAX_STOCK 1000000000000LL /* the service's VALIDATE_STOCK_MAX */
#define MAX_LIMIT 1000000         /* the service's VALIDATE_PER_USER_LIMIT_MAX */
#define MAX_ADMIN_DELTAS 1000000

enum {
    OPT_URL = 256,
    OPT_ADMIN_URL,
    OPT_TOKEN_FILE,
    OPT_BUYER_SECRET_FILE,
    OPT_SKU,
    OPT_CREATE_SKU,
    OPT_SKUS,
    OPT_SKU_PICK,
    OPT_BUCKETS,
    OPT_SOURCE_ADDRS,
    OPT_STOCK,
    OPT_LIMIT,
    OPT_USERS,
    OPT_USER_BASE,
    OPT_USER_PICK,
    OPT_REQUESTS,
    OPT_CONCURRENCY,
    OPT_DURATION,
    OPT_WARMUP,
    OPT_QTY,
    OPT_RETRY_SHARE,
    OPT_SEED,
    OPT_TIMEOUT_MS,
    OPT_ERROR_PAUSE_MS,
    OPT_ADMIN_DELTAS,
    OPT_ADMIN_EVERY_MS,
    OPT_ADMIN_MAX_DELTA,
    OPT_PG_DSN,
    OPT_REDIS_URL,
    OPT_DRAIN_TIMEOUT,
    OPT_PROGRESS_MS,
    OPT_REPORT,
    OPT_JSON,
    OPT_ANSWERS,
    OPT_CHECK_ONLY,
    OPT_LOAD_ONLY,
    OPT_ALLOW_LOST_PENDING,
    OPT_NO_CHECK,
    OPT_LABEL,
    OPT_PAY_SHARE,
    OPT_CANCEL_SHARE,
    OPT_PAYMENT_WINDOW,
    OPT_LIFECYCLE_TIMEOUT,
    OPT_HELP
};

static const struct option long_opts[] = {
    {"url", required_argument, NULL, OPT_URL},
    {"admin-url", required_argument, NULL, OPT_ADMIN_URL},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"buyer-secret-file", required_argument, NULL, OPT_BUYER_SECRET_FILE},
    {"sku", required_argument, NULL, OPT_SKU},
    {"create-sku", no_argument, NULL, OPT_CREATE_SKU},
    {"skus", required_argument, NULL, OPT_SKUS},
    {"sku-pick", required_argument, NULL, OPT_SKU_PICK},
    {"buckets", required_argument, NULL, OPT_BUCKETS},
    {"source-addrs", required_argument, NULL, OPT_SOURCE_ADDRS},
    {"stock", required_argument, NULL, OPT_STOCK},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"users", required_argument, NULL, OPT_USERS},
    {"user-base", required_argument, NULL, OPT_USER_BASE},
    {"user-pick", required_argument, NULL, OPT_USER_PICK},
    {"requests", required_argument, NULL, OPT_REQUESTS},
    {"concurrency", required_argument, NULL, OPT_CONCURRENCY},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"qty", required_argument, NULL, OPT_QTY},
    {"retry-share", required_argument, NULL, OPT_RETRY_SHARE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT_MS},
    {"error-pause-ms", required_argument, NULL, OPT_ERROR_PAUSE_MS},
    {"admin-deltas", required_argument, NULL, OPT_ADMIN_DELTAS},
    {"admin-every-ms", required_argument, NULL, OPT_ADMIN_EVERY_MS},
    {"admin-max-delta", required_argument, NULL, OPT_ADMIN_MAX_DELTA},
    {"pg-dsn", required_argument, NULL, OPT_PG_DSN},
    {"redis-url", required_argument, NULL, OPT_REDIS_URL},
    {"drain-timeout", required_argument, NULL, OPT_DRAIN_TIMEOUT},
    {"progress-ms", required_argument, NULL, OPT_PROGRESS_MS},
    {"report", required_argument, NULL, OPT_REPORT},
    {"json", required_argument, NULL, OPT_JSON},
    {"answers", required_argument, NULL, OPT_ANSWERS},
    {"check-only", no_argument, NULL, OPT_CHECK_ONLY},
    {"load-only", no_argument, NULL, OPT_LOAD_ONLY},
    {"allow-lost-pending", no_argument, NULL, OPT_ALLOW_LOST_PENDING},
    {"no-check", no_argument, NULL, OPT_NO_CHECK},
    {"label", required_argument, NULL, OPT_LABEL},
    {"pay-share", required_argument, NULL, OPT_PAY_SHARE},
    {"cancel-share", required_argument, NULL, OPT_CANCEL_SHARE},
    {"payment-window", required_argument, NULL, OPT_PAYMENT_WINDOW},
    {"lifecycle-timeout", required_argument, NULL, OPT_LIFECYCLE_TIMEOUT},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

void lt_opts_usage(FILE *out)
{
    fprintf(out,
            "usage: seckill-loadtest [flags]\n"
            "\n"
            "Fires buyers at a seckill service, then proves from PostgreSQL and Redis that\n"
            "nothing was oversold, lost or duplicated.  Exit: 0 ok, 1 invariant violated,\n"
            "2 bad flags, 3 could not run or check.  Traffic goes to 127.0.0.0/8 only.\n"
            "\n"
            "target\n"
            "  --url URL              service base URL (default " DEFAULT_URL "); given up to\n"
            "                         %d times, the buyers' connections are split evenly\n"
            "  --admin-url URL        the service's internal listener (metrics_addr) for\n"
            "                         the admin requests (default " DEFAULT_ADMIN_URL ")\n"
            "  --token-file FILE      read the admin bearer token from FILE (default\n"
            "                         $SECKILL_ADMIN_TOKEN; never a flag: ps shows flags)\n"
            "  --buyer-secret-file FILE  the service's buyer_token_secret, which signs a\n"
            "                         token per buyer (default $SECKILL_BUYER_TOKEN_SECRET;\n"
            "                         never a flag: it would show in ps)\n"
            "  --sku ID               SKU to buy; without it a new SKU is created\n"
            "  --create-sku           create the SKU (with --sku: under that id)\n"
            "  --skus N               buy N SKUs at once (default 1, max %d): created ones\n"
            "                         (each with --stock and --limit), or with --sku ID the\n"
            "                         SKUs ID..ID+N-1; the check runs for every one\n"
            "  --sku-pick random|round-robin  which SKU a request buys (default random)\n"
            "  --buckets N            the SKU is the parent of N bucket SKUs (created so, or\n"
            "                         an existing one's; default 1, max %d): buyers order on\n"
            "                         it, a buyer's orders land in bucket user mod N; every\n"
            "                         bucket is checked, the admin ledger on their sum\n"
            "  --stock N              stock of a created SKU (default %d)\n"
            "  --limit N              per-user limit of a created SKU (default %d)\n"
            "buyers\n"
            "  --users N              distinct buyers (default %d)\n"
            "  --user-base N          first user id (default 1)\n"
            "  --user-pick seq|random request i is user base+(i mod users), or a random one\n"
            "  --requests N           request budget, retries not counted (default: --users)\n"
            "  --concurrency N        keep-alive connections, one request each (default %d,\n"
            "                         max %d)\n"
            "  --source-addrs N       connection i binds to 127.0.0.(1 + i mod N) before it\n"
            "                         connects: N client addresses, as a crowd has (default 1,\n"
            "                         max %d)\n"
            "  --duration S           stop issuing after S seconds (default %d, max %d)\n"
            "  --warmup S             leave the first S seconds out of rates and latencies\n"
            "  --qty SPEC             quantities: 1 | 1-3 | 1:80,2:15,5-10:5 (default 1)\n"
            "  --retry-share F        share of requests re-sent with the same Idempotency-Key\n"
            "  --seed N               seed of every random choice (default %d)\n"
            "  --timeout-ms N         per request; no answer by then is 'unknown' (default %d)\n"
            "  --error-pause-ms N     a buyer waits N ms after no answer or a 503 (default %d)\n"
            "admin deltas (while the buyers run)\n"
            "  --admin-deltas N       fire N relative stock adjustments (default 0)\n"
            "  --admin-every-ms N     one every N ms (default %d)\n"
            "  --admin-max-delta N    each a random +/-1..N (default %d)\n"
            "order lifecycle (after the buyers and the stream's drain)\n"
            "  --payment-window S     a created SKU's payment window in seconds, 0..%d\n"
            "                         (default 0: no payment step, confirmed is final); its\n"
            "                         orders not paid by then expire and give their units back\n"
            "  --pay-share F          share of the orders (201/202) the admin pays, each with\n"
            "                         payment_ref lt-SEED-ORDER, 5 %% of them twice (default 0;\n"
            "                         needs --payment-window > 0)\n"
            "  --cancel-share F       share of the orders their buyer cancels (default 0;\n"
            "                         needs --payment-window > 0); pay + cancel <= 1, the\n"
            "                         rest walk away (and expire);\n"
            "                         the pays and cancels spread over half the window, a\n"
            "                         tenth of them sent at their order's deadline instead\n"
            "  --lifecycle-timeout S  the check waits at most the window + S seconds for\n"
            "                         every deadline to pass and every return to reach Redis\n"
            "                         (default %d)\n"
            "checking\n"
            "  --pg-dsn DSN           libpq conninfo of one session (default\n"
            "                         $SECKILL_PG_WRITER_DSN when set, else $SECKILL_PG_DSN)\n"
            "  --redis-url URL        redis://[user:password@]host:port/db, redis-sentinel://...\n"
            "                         or redis-cluster://... (default $SECKILL_REDIS_URL)\n"
            "  --drain-timeout S      wait at most S for the order stream to drain (default %d)\n"
            "  --check-only           no buyers: check the SKU (with --answers: also I4)\n"
            "  --load-only            buyers and --answers only: check later with --check-only\n"
            "  --allow-lost-pending   a 202 without a row is counted as lost, not a violation\n"
            "                         (after injected Redis data loss; a lost 201 still fails)\n"
            "  --no-check             load only: no SKU set-up, no database (HTTP ceiling)\n"
            "output\n"
            "  --progress-ms N        progress line every N ms on stderr, 0 off (default %d)\n"
            "  --report FILE.html     self-contained HTML report with charts\n"
            "  --json FILE            JSON summary (default with --report: FILE.json)\n"
            "  --answers FILE         save the answers naming orders (201/202/409 with an id)\n"
            "                         of a run, or read them (--check-only)\n"
            "  --label TEXT           name of the run in the reports\n"
            "  --help\n",
            LT_MAX_TARGETS, LT_MAX_SKUS, LT_MAX_BUCKETS, DEFAULT_STOCK, DEFAULT_LIMIT,
            DEFAULT_USERS, DEFAULT_CONCURRENCY, LT_MAX_CONCURRENCY, LT_MAX_SOURCE_ADDRS,
            DEFAULT_DURATION_S, LT_MAX_DURATION_S, DEFAULT_SEED, DEFAULT_TIMEOUT_MS,
            DEFAULT_ERROR_PAUSE_MS, DEFAULT_ADMIN_EVERY_MS, DEFAULT_ADMIN_MAX_DELTA,
            LT_MAX_PAYMENT_WINDOW_S, DEFAULT_LIFECYCLE_TIMEOUT_S, DEFAULT_DRAIN_TIMEOUT_S,
            DEFAULT_PROGRESS_MS);
}

int lt_is_loopback(const char *host)
{
    struct in_addr a;
    if (strcmp(host, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, host, &a) != 1)
        return 0;
    return (ntohl(a.s_addr) >> 24) == 127;
}

static int parse_i64(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out,
                     char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        snprintf(err, errlen, "--%s wants an integer in %lld..%lld, not \"%s\"", name,
                 (long long)lo, (long long)hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_int(const char *name, const char *s, int lo, int hi, int *out, char *err,
                     size_t errlen)
{
    int64_t v;
    if (parse_i64(name, s, lo, hi, &v, err, errlen) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_double(const char *name, const char *s, double lo, double hi, double *out,
                        char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        snprintf(err, errlen, "--%s wants a number in %g..%g, not \"%s\"", name, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int copy_str(const char *name, char *dst, size_t cap, const char *s, char *err,
                    size_t errlen)
{
    if (strlen(s) >= cap) {
        snprintf(err, errlen, "--%s is longer than %zu bytes", name, cap - 1);
        return -1;
    }
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

/* Whether a Redis URL given as a flag carries a password (secrets stay out
 * of argv, which every local user can read in /proc).  A URL that does not
 * parse is left to the connect step's own error. */
static int url_has_password(const char *url)
{
    struct rlock_url u;
    char err[128];
    return rlock_url_parse(url, &u, err, sizeof err) == 0 && u.password[0] != '\0';
}

/* Whether a libpq conninfo (key=value or URI) given as a flag holds a password. */
static int dsn_has_password(const char *dsn)
{
    PQconninfoOption *opts = PQconninfoParse(dsn, NULL);
    int has = 0;
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val && o->val[0])
            has = 1;
    PQconninfoFree(opts);
    return has;
}

/* Reads the first word of FILE (a token or secret, given by --flag) into dst
 * of cap bytes. */
static int read_word_file(const char *flag, const char *path, char *dst, size_t cap, char *err,
                          size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "--%s %s: %s", flag, path, strerror(errno));
        return -1;
    }
    char buf[LT_SECRET_MAX + 2];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, " \r\n\t")] = '\0';
    if (!buf[0] || strlen(buf) >= cap) {
        snprintf(err, errlen, "--%s %s: empty or longer than %zu bytes", flag, path, cap - 1);
        return -1;
    }
    memcpy(dst, buf, strlen(buf) + 1);
    return 0;
}

/* Splits http://HOST:PORT[/] into t->host / t->port; loopback only. */
static int parse_url(struct lt_target *t, char *err, size_t errlen)
{
    struct evhttp_uri *u = evhttp_uri_parse(t->url);
    const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL;
    const char *host = u ? evhttp_uri_get_host(u) : NULL;
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    int port = u ? evhttp_uri_get_port(u) : -1;
    int rc = -1;
    if (!scheme || strcmp(scheme, "http") != 0 || !host || !*host) {
        snprintf(err, errlen, "--url must look like http://127.0.0.1:8080, not \"%s\"", t->url);
    } else if (path && *path && strcmp(path, "/") != 0) {
        snprintf(err, errlen, "--url takes no path (\"%s\")", path);
    } else if (!lt_is_loopback(host)) {
        snprintf(err, errlen, "--url host %s is not in 127.0.0.0/8 (this tool only loads loopback)",
                 host);
    } else {
        snprintf(t->host, sizeof t->host, "%s",
                 strcmp(host, "localhost") == 0 ? "127.0.0.1" : host);
        t->port = port > 0 ? port : 80;
        rc = 0;
    }
    if (u)
        evhttp_uri_free(u);
    return rc;
}

/* The database and Redis must be on this machine too. */
static int check_backends(const struct lt_opts *o, char *err, size_t errlen)
{
    struct rlock_url t;
    char rerr[160];
    if (rlock_url_parse(o->redis_url, &t, rerr, sizeof rerr) != 0) {
        snprintf(err, errlen, "--redis-url: %s", rerr);
        return -1;
    }
    for (int i = 0; i < t.nsentinels; i++) /* behind Sentinels: every one on loopback */
        if (!lt_is_loopback(t.sentinel[i].host)) {
            snprintf(err, errlen, "--redis-url Sentinel %s is not in 127.0.0.0/8",
                     t.sentinel[i].host);
            return -1;
        }
    for (int i = 0; i < t.nseeds; i++) /* a cluster: every seed on loopback */
        if (!lt_is_loopback(t.seed[i].host)) {
            snprintf(err, errlen, "--redis-url cluster node %s is not in 127.0.0.0/8",
                     t.seed[i].host);
            return -1;
        }
    if (t.nsentinels == 0 && t.nseeds == 0 && !lt_is_loopback(t.host)) {
        snprintf(err, errlen, "--redis-url host %s is not in 127.0.0.0/8", t.host);
        return -1;
    }
    char *perr = NULL;
    PQconninfoOption *ci = PQconninfoParse(o->pg_dsn, &perr);
    if (!ci) {
        snprintf(err, errlen, "--pg-dsn: %s", perr ? perr : "cannot parse");
        PQfreemem(perr);
        return -1;
    }
    int rc = 0;
    for (PQconninfoOption *c = ci; c->keyword && rc == 0; c++) {
        if (!c->val || !*c->val ||
            (strcmp(c->keyword, "host") != 0 && strcmp(c->keyword, "hostaddr") != 0))
            continue;
        /* a multi-host DSN (a primary and its standbys) names each */
        char one[256];
        for (const char *h = c->val; rc == 0;) {
            size_t n = strcspn(h, ",");
            snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one ? n : sizeof one - 1), h);
            int socket_dir = strcmp(c->keyword, "host") == 0 && one[0] == '/';
            if (!socket_dir && (n >= sizeof one || !lt_is_loopback(one))) {
                snprintf(err, errlen, "--pg-dsn %s %s is not in 127.0.0.0/8", c->keyword, one);
                rc = -1;
            }
            if (!h[n])
                break;
            h += n + 1;
        }
    }
    PQconninfoFree(ci);
    return rc;
}

static void set_defaults(struct lt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mode = LT_MODE_RUN;
    o->stock = DEFAULT_STOCK;
    o->limit = DEFAULT_LIMIT;
    o->users = DEFAULT_USERS;
    o->user_base = 1;
    o->skus = 1;
    o->buckets = 1;
    o->sku_pick = LT_SKU_RANDOM;
    o->source_addrs = 1;
    o->pick = LT_PICK_SEQ;
    o->requests = -1; /* = users */
    o->concurrency = DEFAULT_CONCURRENCY;
    o->duration_s = DEFAULT_DURATION_S;
    snprintf(o->qty_spec, sizeof o->qty_spec, "1");
    o->seed = DEFAULT_SEED;
    o->timeout_ms = DEFAULT_TIMEOUT_MS;
    o->error_pause_ms = DEFAULT_ERROR_PAUSE_MS;
    o->admin_every_ms = DEFAULT_ADMIN_EVERY_MS;
    o->admin_max_delta = DEFAULT_ADMIN_MAX_DELTA;
    o->drain_timeout_s = DEFAULT_DRAIN_TIMEOUT_S;
    o->progress_ms = DEFAULT_PROGRESS_MS;
    o->lifecycle_timeout_s = DEFAULT_LIFECYCLE_TIMEOUT_S;
    const char *e;
    if ((e = getenv("SECKILL_ADMIN_TOKEN")) && strlen(e) < sizeof o->token)
        snprintf(o->token, sizeof o->token, "%s", e);
    if ((e = getenv("SECKILL_BUYER_TOKEN_SECRET")) && strlen(e) < sizeof o->buyer_secret)
        snprintf(o->buyer_secret, sizeof o->buyer_secret, "%s", e);
    /* The check keeps temporary tables in its session: behind pgbouncer it
     * needs the session-pooled DSN the order writers use, when there is one. */
    if (((e = getenv("SECKILL_PG_WRITER_DSN")) && *e) || (e = getenv("SECKILL_PG_DSN")))
        if (strlen(e) < sizeof o->pg_dsn)
            snprintf(o->pg_dsn, sizeof o->pg_dsn, "%s", e);
    if ((e = getenv("SECKILL_REDIS_URL")) && strlen(e) < sizeof o->redis_url)
        snprintf(o->redis_url, sizeof o->redis_url, "%s", e);
}

static int apply(struct lt_opts *o, int c, const char *arg, char *err, size_t errlen)
{
    int64_t v;
    switch (c) {
    case OPT_URL:
        if (o->ntargets == LT_MAX_TARGETS) {
            snprintf(err, errlen, "--url given more than %d times", LT_MAX_TARGETS);
            return -1;
        }
        return copy_str("url", o->targets[o->ntargets++].url, LT_URL_MAX, arg, err, errlen);
    case OPT_ADMIN_URL:
        return copy_str("admin-url", o->admin.url, LT_URL_MAX, arg, err, errlen);
    case OPT_TOKEN_FILE:
        return read_word_file("token-file", arg, o->token, sizeof o->token, err, errlen);
    case OPT_BUYER_SECRET_FILE:
        return read_word_file("buyer-secret-file", arg, o->buyer_secret, sizeof o->buyer_secret,
                              err, errlen);
    case OPT_SKU:
        return parse_i64("sku", arg, 1, INT64_MAX, &o->sku, err, errlen);
    case OPT_CREATE_SKU:
        o->create_sku = 1;
        return 0;
    case OPT_SKUS:
        return parse_int("skus", arg, 1, LT_MAX_SKUS, &o->skus, err, errlen);
    case OPT_SKU_PICK:
        if (strcmp(arg, "random") == 0)
            o->sku_pick = LT_SKU_RANDOM;
        else if (strcmp(arg, "round-robin") == 0)
            o->sku_pick = LT_SKU_ROUND_ROBIN;
        else {
            snprintf(err, errlen, "--sku-pick wants random or round-robin, not \"%s\"", arg);
            return -1;
        }
        return 0;
    case OPT_BUCKETS:
        return parse_int("buckets", arg, 1, LT_MAX_BUCKETS, &o->buckets, err, errlen);
    case OPT_SOURCE_ADDRS:
        return parse_int("source-addrs", arg, 1, LT_MAX_SOURCE_ADDRS, &o->source_addrs, err,
                         errlen);
    case OPT_STOCK:
        return parse_i64("stock", arg, 0, MAX_STOCK, &o->stock, err, errlen);
    case OPT_LIMIT:
        return parse_i64("limit", arg, 1, MAX_LIMIT, &o->limit, err, errlen);
    case OPT_USERS:
        return parse_i64("users", arg, 1, MAX_USERS, &o->users, err, errlen);
    case OPT_USER_BASE:
        return parse_i64("user-base", arg, 1, MAX_USERS, &o->user_base, err, errlen);
    case OPT_USER_PICK:
        if (strcmp(arg, "seq") == 0)
            o->pick = LT_PICK_SEQ;
        else if (strcmp(arg, "random") == 0)
            o->pick = LT_PICK_RANDOM;
        else {
            snprintf(err, errlen, "--user-pick wants seq or random, not \"%s\"", arg);
            return -1;
        }
        return 0;
    case OPT_REQUESTS:
        return parse_i64("requests", arg, 1, MAX_REQUESTS, &o->requests, err, errlen);
    case OPT_CONCURRENCY:
        return parse_int("concurrency", arg, 1, LT_MAX_CONCURRENCY, &o->concurrency, err, errlen);
    case OPT_DURATION:
        return parse_double("duration", arg, 0.1, LT_MAX_DURATION_S, &o->duration_s, err, errlen);
    case OPT_WARMUP:
        return parse_double("warmup", arg, 0, LT_MAX_DURATION_S, &o->warmup_s, err, errlen);
    case OPT_QTY:
        return copy_str("qty", o->qty_spec, sizeof o->qty_spec, arg, err, errlen);
    case OPT_RETRY_SHARE:
        return parse_double("retry-share", arg, 0, 1, &o->retry_share, err, errlen);
    case OPT_SEED:
        if (parse_i64("seed", arg, 0, INT64_MAX, &v, err, errlen) != 0)
            return -1;
        o->seed = (uint64_t)v;
        return 0;
    case OPT_TIMEOUT_MS:
        return parse_int("timeout-ms", arg, 1, MAX_TIMEOUT_MS, &o->timeout_ms, err, errlen);
    case OPT_ERROR_PAUSE_MS:
        return parse_int("error-pause-ms", arg, 0, MAX_TIMEOUT_MS, &o->error_pause_ms, err, errlen);
    case OPT_ADMIN_DELTAS:
        return parse_i64("admin-deltas", arg, 0, MAX_ADMIN_DELTAS, &o->admin_deltas, err, errlen);
    case OPT_ADMIN_EVERY_MS:
        return parse_int("admin-every-ms", arg, 1, MAX_ADMIN_EVERY_MS, &o->admin_every_ms, err,
                         errlen);
    case OPT_ADMIN_MAX_DELTA:
        return parse_i64("admin-max-delta", arg, 1, MAX_STOCK, &o->admin_max_delta, err, errlen);
    case OPT_PG_DSN:
        if (dsn_has_password(arg)) {
            snprintf(err, errlen,
                     "--pg-dsn holds a password, which ps would show: give the DSN in "
                     "SECKILL_PG_DSN, or the password in a libpq password file (PGPASSFILE)");
            return -1;
        }
        return copy_str("pg-dsn", o->pg_dsn, sizeof o->pg_dsn, arg, err, errlen);
    case OPT_REDIS_URL:
        if (url_has_password(arg)) {
            snprintf(err, errlen,
                     "--redis-url holds a password, which ps would show: give the URL in "
                     "SECKILL_REDIS_URL");
            return -1;
        }
        return copy_str("redis-url", o->redis_url, sizeof o->redis_url, arg, err, errlen);
    case OPT_DRAIN_TIMEOUT:
        return parse_int("drain-timeout", arg, 1, MAX_DRAIN_TIMEOUT_S, &o->drain_timeout_s, err,
                         errlen);
    case OPT_PROGRESS_MS:
        return parse_int("progress-ms", arg, 0, MAX_PROGRESS_MS, &o->progress_ms, err, errlen);
    case OPT_REPORT:
        o->report_html = arg;
        return 0;
    case OPT_JSON:
        o->json_path = arg;
        return 0;
    case OPT_ANSWERS:
        o->answers_path = arg;
        return 0;
    case OPT_CHECK_ONLY:
    case OPT_NO_CHECK:
    case OPT_LOAD_ONLY: {
        enum lt_mode m = c == OPT_CHECK_ONLY ? LT_MODE_CHECK_ONLY
                         : c == OPT_NO_CHECK ? LT_MODE_RAW
                                             : LT_MODE_LOAD_ONLY;
        if (o->mode != LT_MODE_RUN && o->mode != m) {
            snprintf(err, errlen, "--check-only, --load-only and --no-check exclude each other");
            return -1;
        }
        o->mode = m;
        return 0;
    }
    case OPT_ALLOW_LOST_PENDING:
        o->allow_lost_pending = 1;
        return 0;
    case OPT_LABEL:
        return copy_str("label", o->label, sizeof o->label, arg, err, errlen);
    case OPT_PAY_SHARE:
        return parse_double("pay-share", arg, 0, 1, &o->pay_share, err, errlen);
    case OPT_CANCEL_SHARE:
        return parse_double("cancel-share", arg, 0, 1, &o->cancel_share, err, errlen);
    case OPT_PAYMENT_WINDOW:
        return parse_int("payment-window", arg, 0, LT_MAX_PAYMENT_WINDOW_S, &o->payment_window_s,
                         err, errlen);
    case OPT_LIFECYCLE_TIMEOUT:
        return parse_int("lifecycle-timeout", arg, 1, MAX_LIFECYCLE_TIMEOUT_S,
                         &o->lifecycle_timeout_s, err, errlen);
    default:
        snprintf(err, errlen, "unknown flag (see --help)");
        return -1;
    }
}

/* The lifecycle flags: how they combine, and the one mode they fit (a run:
 * its buyers' orders are what gets paid and cancelled). */
static int check_lifecycle(const struct lt_opts *o, char *err, size_t errlen)
{
    /* Shares are decimal fractions: 0.7 + 0.3 may add up to a hair above 1. */
    if (o->pay_share + o->cancel_share > 1.0 + 1e-9) {
        snprintf(err, errlen, "--pay-share (%g) + --cancel-share (%g) is more than 1", o->pay_share,
                 o->cancel_share);
        return -1;
    }
    if ((o->pay_share > 0 || o->cancel_share > 0) && o->payment_window_s == 0) {
        snprintf(err, errlen,
                 "--pay-share and --cancel-share need --payment-window > 0: without a window a "
                 "confirmed order is final, and a payment or a cancel answers 409");
        return -1;
    }
    if ((o->pay_share > 0 || o->cancel_share > 0 || o->payment_window_s > 0) &&
        o->mode != LT_MODE_RUN) {
        snprintf(err, errlen,
                 "--pay-share, --cancel-share and --payment-window act on the orders of a run: "
                 "not with --check-only, --load-only or --no-check");
        return -1;
    }
    return 0;
}

/* --buckets N > 1: the SKU is the parent of N bucket SKUs (created so by
 * the run, or an existing one whose admin view names them), and the run's
 * answers are split by bucket for its own check: one SKU, checked by the
 * run that made the answers. */
static int check_buckets(const struct lt_opts *o, char *err, size_t errlen)
{
    if (o->buckets == 1)
        return 0;
    const char *why = o->skus > 1                     ? "--skus above 1"
                      : o->mode == LT_MODE_CHECK_ONLY ? "--check-only"
                      : o->mode == LT_MODE_LOAD_ONLY  ? "--load-only"
                      : o->mode == LT_MODE_RAW        ? "--no-check"
                      : o->answers_path               ? "--answers"
                                                      : NULL;
    if (why) {
        snprintf(err, errlen,
                 "--buckets %d checks one SKU's buckets with the answers of this run: not with "
                 "%s",
                 o->buckets, why);
        return -1;
    }
    return 0;
}

int lt_opts_parse(struct lt_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    set_defaults(o);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        if (c == OPT_HELP) {
            lt_opts_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':') {
            snprintf(err, errlen, "unknown flag or missing value: %s (see --help)",
                     argv[optind - 1]);
            return -1;
        }
        if (apply(o, c, optarg, err, errlen) != 0)
            return -1;
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", argv[optind]);
        return -1;
    }
    if (o->ntargets == 0)
        snprintf(o->targets[o->ntargets++].url, LT_URL_MAX, "%s", DEFAULT_URL);
    for (int i = 0; i < o->ntargets; i++)
        if (parse_url(&o->targets[i], err, errlen) != 0)
            return -1;
    if (!o->admin.url[0])
        snprintf(o->admin.url, LT_URL_MAX, "%s", DEFAULT_ADMIN_URL);
    if (parse_url(&o->admin, err, errlen) != 0)
        return -1;
    snprintf(o->url, sizeof o->url, "%s", o->targets[0].url);
    snprintf(o->host, sizeof o->host, "%s", o->targets[0].host);
    o->port = o->targets[0].port;
    if (lt_dist_parse(&o->qty, o->qty_spec, LT_MAX_QTY, err, errlen) != 0)
        return -1;
    if (o->requests < 0)
        o->requests = o->users;
    if (o->sku && o->skus > 1 && o->sku > INT64_MAX - o->skus) {
        snprintf(err, errlen, "--sku %" PRId64 " + --skus %d is beyond the largest id", o->sku,
                 o->skus);
        return -1;
    }
    if (o->skus > 1 && (o->answers_path || o->admin_deltas)) {
        snprintf(err, errlen,
                 "--skus above 1 takes no --answers (nor --load-only) or --admin-deltas: "
                 "those record one SKU");
        return -1;
    }
    if (o->warmup_s >= o->duration_s) {
        snprintf(err, errlen, "--warmup (%g s) must be shorter than --duration (%g s)", o->warmup_s,
                 o->duration_s);
        return -1;
    }
    if (check_lifecycle(o, err, errlen) != 0 || check_buckets(o, err, errlen) != 0)
        return -1;
    if (!o->label[0])
        snprintf(o->label, sizeof o->label, "%s",
                 o->mode == LT_MODE_RAW          ? "raw load"
                 : o->mode == LT_MODE_CHECK_ONLY ? "check"
                                                 : "flash sale");
    if (o->mode == LT_MODE_LOAD_ONLY && !o->answers_path) {
        snprintf(err, errlen, "--load-only needs --answers (what --check-only will judge)");
        return -1;
    }
    if (o->mode == LT_MODE_RAW) {
        if (!o->sku)
            o->sku = 1; /* only names the path */
        if (o->admin_deltas || o->create_sku || o->answers_path || o->retry_share > 0) {
            snprintf(
                err, errlen,
                "--no-check takes no --admin-deltas, --create-sku, --answers or --retry-share");
            return -1;
        }
        return 0;
    }
    if (!o->pg_dsn[0] || !o->redis_url[0]) {
        snprintf(err, errlen,
                 "the check needs --pg-dsn and --redis-url (or SECKILL_PG_DSN and "
                 "SECKILL_REDIS_URL)");
        return -1;
    }
    if (check_backends(o, err, errlen) != 0)
        return -1;
    if (o->mode == LT_MODE_CHECK_ONLY) {
        if (!o->sku) {
            snprintf(err, errlen, "--check-only needs --sku");
            return -1;
        }
        if (o->create_sku || o->admin_deltas) {
            snprintf(err, errlen, "--check-only takes no --create-sku or --admin-deltas");
            return -1;
        }
        return 0;
    }
    if (!o->sku)
        o->create_sku = 1;
    if (o->payment_window_s > 0 && !o->create_sku) {
        snprintf(err, errlen,
                 "--payment-window is sent when the SKU is created: not with --sku of an existing "
                 "SKU (add --create-sku, or leave --sku out)");
        return -1;
    }
    if (strlen(o->buyer_secret) < BUYER_TOKEN_SECRET_MIN_BYTES) {
        snprintf(err, errlen,
                 "buyers need tokens signed with the service's buyer_token_secret: "
                 "--buyer-secret-file or SECKILL_BUYER_TOKEN_SECRET (at least %d bytes)",
                 BUYER_TOKEN_SECRET_MIN_BYTES);
        return -1;
    }
    if ((o->create_sku || o->admin_deltas) && !o->token[0]) {
        snprintf(err, errlen,
                 "creating a SKU and admin deltas need --token-file or "
                 "SECKILL_ADMIN_TOKEN");
        return -1;
    }
    return 0;
}
