/*
 * seckillctl lock ... run as the built binary (next to SECKILL_TEST_DAEMON)
 * against the test Redis (SECKILL_TEST_REDIS_URL).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/embedded.h"
#include "ctl/ctl_admin.h"
#include "ctl/ctl_args.h"
#include "ctl/ctl_http.h"
#include "ctl/ctl_table.h"
#include "harness.h"
#include <rlock/fence.h>
#include <rlock/rlock.h>

#define RUN_TIMEOUT_MS 20000 /* any single seckillctl run */
#define OUT_MAX 16384

struct run {
    int status; /* exit code, or 128 + signal */
    char out[OUT_MAX];
    char err[OUT_MAX];
};

static void ctl_path(char *out, size_t cap)
{
    char daemon[1024];
    snprintf(daemon, sizeof daemon, "%s", th_env("SECKILL_TEST_DAEMON"));
    snprintf(out, cap, "%s/seckillctl", dirname(daemon));
    ck_assert_msg(access(out, X_OK) == 0, "%s is not built (make all)", out);
}

/* Forks seckillctl with args (NULL-terminated), stdout and stderr piped.
 * Redis comes from SECKILL_REDIS_URL as an operator would set it. */
static pid_t spawn(const char *const *args, int *out_fd, int *err_fd)
{
    char path[1100];
    ctl_path(path, sizeof path);
    const char *url = th_env("SECKILL_TEST_REDIS_URL");
    int o[2], e[2];
    ck_assert_int_eq(pipe(o), 0);
    ck_assert_int_eq(pipe(e), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(o[1], STDOUT_FILENO);
        dup2(e[1], STDERR_FILENO);
        close(o[0]), close(o[1]), close(e[0]), close(e[1]);
        setenv("SECKILL_REDIS_URL", url, 1);
        const char *argv[32] = {path};
        size_t n = 1;
        for (size_t i = 0; args[i] && n + 1 < 32; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(path, (char *const *)argv);
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    *out_fd = o[0];
    *err_fd = e[0];
    return pid;
}

/* Reads both pipes to EOF (bounded) and reaps the process into r. */
static void finish(pid_t pid, int out_fd, int err_fd, struct run *r, size_t out_len)
{
    size_t err_len = strlen(r->err);
    int64_t deadline = rlock_mono_ms() + RUN_TIMEOUT_MS;
    int open_fds = 2;
    while (open_fds > 0) {
        int64_t left = deadline - rlock_mono_ms();
        ck_assert_msg(left > 0, "seckillctl did not finish within %d ms", RUN_TIMEOUT_MS);
        struct pollfd p[2] = {{.fd = out_fd, .events = POLLIN}, {.fd = err_fd, .events = POLLIN}};
        if (poll(p, 2, (int)left) < 0 && errno != EINTR)
            ck_abort_msg("poll: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            char *buf = i == 0 ? r->out : r->err;
            size_t *len = i == 0 ? &out_len : &err_len;
            ssize_t n = read(p[i].fd, buf + *len, OUT_MAX - 1 - *len);
            if (n <= 0) {
                close(p[i].fd);
                if (i == 0)
                    out_fd = -1;
                else
                    err_fd = -1;
                open_fds--;
                continue;
            }
            *len += (size_t)n;
            buf[*len] = '\0';
        }
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs seckillctl args... to completion. */
static void run(struct run *r, ...)
{
    const char *args[32];
    size_t n = 0;
    va_list ap;
    va_start(ap, r);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && n + 1 < 32;)
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    memset(r, 0, sizeof *r);
    int o, e;
    pid_t pid = spawn(args, &o, &e);
    finish(pid, o, e, r, 0);
}

/* A `lock hold` in the background, once it printed its "TOKEN FENCE" line. */
struct holder {
    pid_t pid;
    int out_fd, err_fd;
    char token[RLOCK_TOKEN_LEN + 1];
    int64_t fence;
    struct run r;
};

static void hold_start(struct holder *h, const char *key, const char *ttl)
{
    memset(h, 0, sizeof *h);
    const char *args[] = {"lock", "hold", key, "--ttl", ttl, NULL};
    h->pid = spawn(args, &h->out_fd, &h->err_fd);
    size_t len = 0;
    int64_t deadline = rlock_mono_ms() + RUN_TIMEOUT_MS;
    while (!memchr(h->r.out, '\n', len)) {
        int64_t left = deadline - rlock_mono_ms();
        struct pollfd p = {.fd = h->out_fd, .events = POLLIN};
        ck_assert_msg(left > 0 && poll(&p, 1, (int)left) > 0, "hold printed no token");
        ssize_t n = read(h->out_fd, h->r.out + len, OUT_MAX - 1 - len);
        ck_assert_msg(n > 0, "hold exited before printing its token");
        len += (size_t)n;
        h->r.out[len] = '\0';
    }
    ck_assert_int_eq(sscanf(h->r.out, "%32s %" SCNd64, h->token, &h->fence), 2);
    ck_assert_uint_eq(strlen(h->token), RLOCK_TOKEN_LEN);
    ck_assert_int_gt(h->fence, 0);
    h->r.out[0] = '\0';
}

/* Waits for the holder to exit (after a signal, or by itself). */
static void hold_finish(struct holder *h)
{
    finish(h->pid, h->out_fd, h->err_fd, &h->r, 0);
}

static void test_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "seckill:test_ctl:%d:{%s}:lock", (int)getpid(), name);
}

static void redis_get(redisContext *c, const char *key, char *out, size_t len)
{
    redisReply *r = redisCommand(c, "GET %s", key);
    ck_assert_ptr_nonnull(r);
    snprintf(out, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

static void redis_do(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "redis: %s", r ? r->str : c->errstr);
    freeReplyObject(r);
}

/* ---- tests ---- */

START_TEST(test_hold_prints_token_and_fence_and_releases_on_sigterm)
{
    char key[128], fence_key[160], val[64], want[256];
    test_key(key, sizeof key, "hold");
    ck_assert_int_eq(rlock_fence_key(fence_key, sizeof fence_key, key), 0);
    redisContext *c = th_redis();
    redis_do(c, "DEL %s %s", key, fence_key);

    struct holder h;
    hold_start(&h, key, "30000");
    redis_get(c, key, val, sizeof val);
    ck_assert_str_eq(val, h.token);
    ck_assert_int_eq(th_redis_int(c, fence_key), h.fence);

    /* list and inspect show the owner and its fencing counter. */
    struct run r;
    char match[160];
    snprintf(match, sizeof match, "seckill:test_ctl:%d:*", (int)getpid());
    run(&r, "lock", "list", "--match", match, NULL);
    ck_assert_msg(r.status == 0, "list: %d %s", r.status, r.err);
    snprintf(want, sizeof want, "%" PRId64, h.fence);
    ck_assert_msg(strstr(r.out, key) && strstr(r.out, h.token) && strstr(r.out, want), "list: %s",
                  r.out);
    ck_assert_msg(strstr(r.out, ":fence") == NULL, "fence counters are not locks: %s", r.out);

    run(&r, "lock", "inspect", key, NULL);
    ck_assert_int_eq(r.status, 0);
    snprintf(want, sizeof want, "owner: %s\n", h.token);
    ck_assert_msg(strstr(r.out, want) != NULL, "inspect: %s", r.out);
    snprintf(want, sizeof want, "fence: %" PRId64 "\n", h.fence);
    ck_assert_msg(strstr(r.out, want) != NULL, "inspect: %s", r.out);

    /* Another taker is refused while it holds. */
    run(&r, "lock", "hold", key, "--ttl", "1000", NULL);
    ck_assert_int_eq(r.status, 3);
    ck_assert_msg(strstr(r.err, "held by another owner") != NULL, "stderr: %s", r.err);

    ck_assert_int_eq(kill(h.pid, SIGTERM), 0);
    hold_finish(&h);
    ck_assert_msg(h.r.status == 0, "hold exit %d: %s", h.r.status, h.r.err);
    redis_get(c, key, val, sizeof val);
    ck_assert_str_eq(val, "");

    /* The next holder's token is larger. */
    int64_t first = h.fence;
    hold_start(&h, key, "30000");
    ck_assert_int_gt(h.fence, first);
    ck_assert_int_eq(kill(h.pid, SIGINT), 0);
    hold_finish(&h);
    ck_assert_int_eq(h.r.status, 0);

    redis_do(c, "DEL %s", fence_key);
    redisFree(c);
}
END_TEST

START_TEST(test_hold_releases_by_itself_when_the_lease_ends)
{
    char key[128], val[64];
    test_key(key, sizeof key, "lease");
    redisContext *c = th_redis();
    redis_do(c, "DEL %s", key);

    struct holder h;
    hold_start(&h, key, "300");
    hold_finish(&h); /* no signal: the lease ends it */
    ck_assert_msg(h.r.status == 0, "hold exit %d: %s", h.r.status, h.r.err);
    redis_get(c, key, val, sizeof val);
    ck_assert_str_eq(val, "");
    redisFree(c);
}
END_TEST

START_TEST(test_hold_token_interoperates_with_the_library)
{
    char key[128];
    test_key(key, sizeof key, "interop");
    redisContext *c = th_redis();
    redis_do(c, "DEL %s", key);

    struct holder h;
    hold_start(&h, key, "30000");
    struct rlock l = {0};
    struct rlock_opts o = {.ttl_ms = 1000};
    ck_assert_int_eq(rlock_acquire(c, &l, key, &o), RLOCK_BUSY);

    /* With the printed token, a program releases the tool's lock... */
    const char *keys[] = {key};
    ck_assert_int_eq(rlock_adopt(&l, keys, 1, h.token, 30000, rlock_mono_ms()), 0);
    ck_assert_int_eq(rlock_release(c, &l), RLOCK_OK);
    /* ...and the tool reports, when told to stop, that its lock was lost. */
    ck_assert_int_eq(kill(h.pid, SIGTERM), 0);
    hold_finish(&h);
    ck_assert_int_eq(h.r.status, 1);
    ck_assert_msg(strstr(h.r.err, "RLOCK_NOT_OWNER") != NULL, "stderr: %s", h.r.err);
    redisFree(c);
}
END_TEST

START_TEST(test_force_release_needs_yes_and_is_logged)
{
    char key[128], val[64];
    test_key(key, sizeof key, "stuck");
    redisContext *c = th_redis();
    redis_do(c, "SET %s %s PX %d", key, "stuck-owner-token", 60000);

    struct run r;
    run(&r, "lock", "force-release", key, NULL);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--yes") != NULL, "stderr: %s", r.err);
    redis_get(c, key, val, sizeof val);
    ck_assert_str_eq(val, "stuck-owner-token");

    run(&r, "lock", "force-release", key, "--yes", NULL);
    ck_assert_msg(r.status == 0, "force-release: %d %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, key) && strstr(r.err, "stuck-owner-token"), "stderr: %s", r.err);
    redis_get(c, key, val, sizeof val);
    ck_assert_str_eq(val, "");

    run(&r, "lock", "force-release", key, "--yes", NULL);
    ck_assert_int_eq(r.status, 3);
    redisFree(c);
}
END_TEST

START_TEST(test_list_shows_both_lock_formats_and_inspect_reports_absence)
{
    char simple[128], reentrant[128], match[128];
    test_key(simple, sizeof simple, "simple");
    test_key(reentrant, sizeof reentrant, "reentrant");
    snprintf(match, sizeof match, "seckill:test_ctl:%d:*", (int)getpid());
    redisContext *c = th_redis();
    redis_do(c, "SET %s %s PX %d", simple, "0123456789abcdef0123456789abcdef", 60000);
    /* Redisson's reentrant format: owner -> hold count. */
    redis_do(c, "HSET %s %s %s", reentrant, "uuid-1:7", "2");
    redis_do(c, "PEXPIRE %s %d", reentrant, 60000);

    struct run r;
    run(&r, "lock", "list", "--match", match, NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strncmp(r.out, "KEY", 3) == 0, "header: %s", r.out);
    ck_assert_msg(strstr(r.out, simple) && strstr(r.out, "0123456789abcdef0123456789abcdef"),
                  "list: %s", r.out);
    ck_assert_msg(strstr(r.out, reentrant) && strstr(r.out, "uuid-1:7=2"), "list: %s", r.out);

    redis_do(c, "DEL %s %s", simple, reentrant);
    run(&r, "lock", "inspect", simple, NULL);
    ck_assert_int_eq(r.status, 3);
    ck_assert_msg(strstr(r.out, "type: none") != NULL, "inspect: %s", r.out);
    run(&r, "lock", "list", "--match", match, NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, simple) == NULL, "list: %s", r.out);
    redisFree(c);
}
END_TEST

START_TEST(test_usage_errors_exit_2_and_say_why)
{
    static const struct {
        const char *args[8];
        const char *says;
    } cases[] = {
        {{NULL}, "usage"},
        {{"lock", NULL}, "which command"},
        {{"nope", NULL}, "unknown command group"},
        {{"lock", "frob", NULL}, "unknown command"},
        {{"lock", "inspect", NULL}, "KEY is missing"},
        {{"lock", "list", "extra", NULL}, "unexpected argument"},
        {{"lock", "hold", "k", NULL}, "--ttl MS is required"},
        {{"lock", "hold", "k", "--ttl", "0", NULL}, "--ttl must be"},
        {{"lock", "hold", "k", "--ttl", "100", "--wait", "-1", NULL}, "--wait must be"},
        {{"lock", "hold", "k", "--ttl", NULL}, "needs a value"},
        {{"lock", "inspect", "a", "b", NULL}, "one KEY only"},
        {{"lock", "inspect", "a", "--yes", NULL}, "not valid"},
        {{"lock", "list", "--bogus", NULL}, "unknown flag"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct run r;
        memset(&r, 0, sizeof r);
        int o, e;
        pid_t pid = spawn(cases[i].args, &o, &e);
        finish(pid, o, e, &r, 0);
        ck_assert_msg(r.status == 2, "case %zu: exit %d", i, r.status);
        ck_assert_msg(strstr(r.err, cases[i].says) != NULL, "case %zu: stderr: %s", i, r.err);
    }
    struct run r;
    run(&r, "--help", NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "force-release") != NULL, "help: %s", r.out);
}
END_TEST

/* reconcile reports drift and exits 3; --repair rebuilds the SKU from the
 * database; afterwards everything agrees (exit 0). */
START_TEST(test_reconcile_reports_drift_and_repair_fixes_it)
{
    th_reset();
    struct th_daemon d;
    const char *env[] = {"SECKILL_RECONCILE_INTERVAL_MS=600000", NULL};
    th_daemon_start(&d, env);
    th_create_sku(d.port, 21, 10, 5);
    th_daemon_stop(&d);
    redisContext *rc = th_redis();
    redisReply *rep = redisCommand(rc, "INCRBY seckill:{sku:21}:stock 3"); /* 3 phantom units */
    freeReplyObject(rep);
    struct run r;
    run(&r, "reconcile", "--sku", "21", NULL);
    ck_assert_msg(r.status == 3, "drift must exit 3: %d %s %s", r.status, r.out, r.err);
    ck_assert_msg(strstr(r.out, "redis 13 database 10") && strstr(r.out, "drift 3"), "%s", r.out);
    ck_assert_int_eq(th_redis_int(rc, "seckill:{sku:21}:stock"), 13); /* report only */
    run(&r, "reconcile", "--repair", NULL);
    ck_assert_msg(r.status == 0, "repair: %d %s %s", r.status, r.out, r.err);
    ck_assert_msg(strstr(r.out, "rebuilt"), "%s", r.out);
    ck_assert_int_eq(th_redis_int(rc, "seckill:{sku:21}:stock"), 10);
    run(&r, "reconcile", NULL);
    ck_assert_msg(r.status == 0, "after repair: %d %s", r.status, r.out);
    run(&r, "reconcile", "--sku", "x", NULL);
    ck_assert_int_eq(r.status, 2);
    redisFree(rc);
    th_assert_invariants(21);
}
END_TEST

START_TEST(test_unreachable_redis_is_an_error)
{
    struct run r;
    run(&r, "--redis-url", "redis://127.0.0.1:1/0", "lock", "list", NULL);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "cannot reach Redis") != NULL, "stderr: %s", r.err);
    run(&r, "lock", "inspect", "k", "--redis-url=http://x", NULL);
    ck_assert_int_eq(r.status, 2);
}
END_TEST

/* The token seckillctl mints (secret from the environment, as the daemon's)
 * is one the daemon accepts, for exactly that buyer. */
START_TEST(test_token_is_accepted_by_the_daemon_for_its_user)
{
    struct run r;
    setenv("SECKILL_BUYER_TOKEN_SECRET", TH_BUYER_SECRET, 1);
    run(&r, "token", "--user", "42", "--ttl", "600", NULL);
    ck_assert_msg(r.status == 0, "token: exit %d: %s", r.status, r.err);
    char *nl = strchr(r.out, '\n');
    ck_assert_msg(nl && nl[1] == '\0', "one line expected: %s", r.out);
    *nl = '\0';
    char token[1024];
    snprintf(token, sizeof token, "%.1000s", r.out);

    th_reset();
    struct th_daemon d;
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    char headers[1200];
    snprintf(headers, sizeof headers,
             "Authorization: Bearer %s\r\nContent-Type: application/json\r\n", token);
    struct th_response resp;
    ck_assert_int_eq(
        th_http(d.port, "POST", "/api/v1/skus/1/orders", headers, "{\"qty\":1}", &resp), 0);
    ck_assert_msg(resp.status == 201, "order with the minted token: %d %s", resp.status, resp.body);
    ck_assert_int_eq(th_json_int(resp.body, "user_id", 0), 42);
    /* and it is user 42's, not another's */
    ck_assert_int_eq(th_http(d.port, "POST", "/api/v1/skus/1/orders", headers,
                             "{\"user_id\":43,\"qty\":1}", &resp),
                     0);
    ck_assert_int_eq(resp.status, 403);
    th_wait_drained(1, 15000);
    th_daemon_stop(&d);
}
END_TEST

/* `token --kid` signs with the secret of that key id, which the daemon
 * verifies with that secret; an unknown kid is a usage error. */
START_TEST(test_token_signs_with_the_secret_of_the_chosen_kid)
{
    struct run r;
    setenv("SECKILL_BUYER_TOKEN_SECRET", TH_BUYER_SECRET, 1);
    setenv("SECKILL_BUYER_TOKEN_SECRET_NEXT", "the-next-buyer-secret-0123456789abcdef", 1);
    setenv("SECKILL_BUYER_TOKEN_KID_NEXT", "k2", 1);
    run(&r, "token", "--user", "44", "--kid", "k2", NULL);
    ck_assert_msg(r.status == 0, "token: exit %d: %s", r.status, r.err);
    char token[1024];
    snprintf(token, sizeof token, "%.*s", (int)strcspn(r.out, "\n"), r.out);
    struct run bad;
    run(&bad, "token", "--user", "44", "--kid", "k3", NULL);
    ck_assert_int_eq(bad.status, 2);
    ck_assert_ptr_nonnull(strstr(bad.err, "k3"));
    ck_assert_ptr_null(strstr(bad.err, "0123456789abcdef"));    /* no secret printed */
    run(&bad, "token", "--user", "44", "--ttl", "86401", NULL); /* buyer_token_max_ttl_s */
    ck_assert_int_eq(bad.status, 2);
    ck_assert_ptr_nonnull(strstr(bad.err, "buyer_token_max_ttl_s"));
    unsetenv("SECKILL_BUYER_TOKEN_SECRET_NEXT");
    unsetenv("SECKILL_BUYER_TOKEN_KID_NEXT");

    th_reset();
    struct th_daemon d;
    char headers[1200];
    snprintf(headers, sizeof headers,
             "Authorization: Bearer %s\r\nContent-Type: application/json\r\n", token);
    struct th_response resp;
    /* a daemon holding only the first secret refuses it ... */
    th_daemon_start(&d, NULL);
    th_create_sku(d.port, 1, 10, 5);
    ck_assert_int_eq(
        th_http(d.port, "POST", "/api/v1/skus/1/orders", headers, "{\"qty\":1}", &resp), 0);
    ck_assert_int_eq(resp.status, 401);
    th_daemon_stop(&d);
    /* ... one holding k2 takes it for user 44 */
    th_daemon_start(&d, (const char *const[]){"SECKILL_BUYER_TOKEN_SECRET_NEXT="
                                              "the-next-buyer-secret-0123456789abcdef",
                                              "SECKILL_BUYER_TOKEN_KID_NEXT=k2", NULL});
    ck_assert_int_eq(
        th_http(d.port, "POST", "/api/v1/skus/1/orders", headers, "{\"qty\":1}", &resp), 0);
    ck_assert_msg(resp.status == 201, "order with the k2 token: %d %s", resp.status, resp.body);
    ck_assert_int_eq(th_json_int(resp.body, "user_id", 0), 44);
    th_wait_drained(1, 15000);
    th_daemon_stop(&d);
}
END_TEST

START_TEST(test_token_refuses_bad_input_and_a_missing_secret)
{
    struct run r;
    setenv("SECKILL_BUYER_TOKEN_SECRET", TH_BUYER_SECRET, 1);
    const char *const bad[][5] = {
        {"token", NULL},                /* no user */
        {"token", "--user", "0", NULL}, /* not a user */
        {"token", "--user", "-1", NULL},
        {"token", "--user", "abc", NULL},
        {"token", "--user", "1", "--ttl", "0"},      /* no lifetime */
        {"token", "--user", "1", "--ttl", "604801"}, /* beyond buyer_token_max_ttl_s */
        {"token", "--user", "1", "--kid", "k 1"},    /* not a kid */
        {"token", "--user", "1", "--ttl", "1e3"},
        {"token", "--user", "1", "--buyer-token-secret", "x"}, /* never a flag */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run(&r, bad[i][0], bad[i][1], bad[i][2], bad[i][3], bad[i][4], NULL);
        ck_assert_msg(r.status == 2 && r.out[0] == '\0' && r.err[0] != '\0',
                      "case %zu: exit %d, out '%s'", i, r.status, r.out);
    }
    setenv("SECKILL_BUYER_TOKEN_SECRET", "too-short", 1);
    run(&r, "token", "--user", "1", NULL);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "buyer_token_secret"));
    ck_assert_ptr_null(strstr(r.err, "too-short")); /* the secret is never printed */
    unsetenv("SECKILL_BUYER_TOKEN_SECRET");
    run(&r, "token", "--user", "1", NULL);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "not set"));
}
END_TEST

/* ---- the pure parts of the admin groups ------------------------------- */

START_TEST(test_delta_takes_a_sign_and_refuses_junk)
{
    int64_t v;
    ck_assert_int_eq(ctl_arg_i64("+10", CTL_SIGNED, &v), 0);
    ck_assert_int_eq(v, 10);
    ck_assert_int_eq(ctl_arg_i64("-5", CTL_SIGNED, &v), 0);
    ck_assert_int_eq(v, -5);
    ck_assert_int_eq(ctl_arg_i64("7", CTL_SIGNED, &v), 0);
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(ctl_arg_i64("-9223372036854775808", CTL_SIGNED, &v), 0);
    ck_assert(v == INT64_MIN);
    ck_assert_int_eq(ctl_arg_i64("9223372036854775807", CTL_UNSIGNED, &v), 0);
    ck_assert(v == INT64_MAX);
    static const char *const bad[] = {
        "", "+", "-", "++1", "+-1", "1x", " 1", "1 ", "0x10", "1e3", "9223372036854775808"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(ctl_arg_i64(bad[i], CTL_SIGNED, &v) != 0, "took \"%s\"", bad[i]);
    ck_assert_int_ne(ctl_arg_i64("+1", CTL_UNSIGNED, &v), 0);
    ck_assert_int_ne(ctl_arg_i64("-1", CTL_UNSIGNED, &v), 0);
    ck_assert_int_ne(ctl_arg_i64(NULL, CTL_SIGNED, &v), 0);
}
END_TEST

/* What ctl_table_print writes. */
static char *printed(const struct ctl_table *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ctl_table_print(t, f);
    fclose(f);
    return buf;
}

START_TEST(test_table_aligns_columns_by_characters)
{
    struct ctl_table t;
    ctl_table_init(&t, 3, (const char *[]){"id", "name", "available"});
    ctl_table_add(&t, (const char *[]){"7", "caf\xc3\xa9", "10"});
    ctl_table_add(&t, (const char *[]){"1234", "phone", NULL});
    char *out = printed(&t);
    ck_assert_str_eq(out, "id    name   available\n"
                          "7     caf\xc3\xa9   10\n"
                          "1234  phone  -\n");
    free(out);
    ctl_table_free(&t);
}
END_TEST

START_TEST(test_cell_shows_nulls_booleans_and_no_control_characters)
{
    char buf[CTL_CELL_MAX];
    json_t *v = json_null();
    ck_assert_str_eq(ctl_cell(v, buf, sizeof buf), "-");
    ck_assert_str_eq(ctl_cell(NULL, buf, sizeof buf), "-");
    ck_assert_str_eq(ctl_cell(json_true(), buf, sizeof buf), "yes");
    ck_assert_str_eq(ctl_cell(json_false(), buf, sizeof buf), "no");
    v = json_integer(-42);
    ck_assert_str_eq(ctl_cell(v, buf, sizeof buf), "-42");
    json_decref(v);
    v = json_string("two\nlines\tand a tab");
    ck_assert_str_eq(ctl_cell(v, buf, sizeof buf), "two?lines?and a tab");
    json_decref(v);
    v = json_string("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"); /* 8 bytes: cut on a character */
    char small[8];
    ck_assert_str_eq(ctl_cell(v, small, sizeof small), "\xc3\xa9\xc3\xa9...");
    json_decref(v);
}
END_TEST

START_TEST(test_http_parse_waits_for_the_whole_body)
{
    static const char whole[] = "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\n"
                                "content-length: 7\r\n\r\n{\"a\":1}";
    int status = 0;
    size_t off = 0, len = 0;
    ck_assert_int_eq(ctl_http_parse(whole, sizeof whole - 1, 0, &status, &off, &len), 0);
    ck_assert_int_eq(status, 409);
    ck_assert_int_eq(len, 7);
    ck_assert(memcmp(whole + off, "{\"a\":1}", 7) == 0);
    /* a body short of its Content-Length, or a head not complete: read on */
    ck_assert_int_eq(ctl_http_parse(whole, sizeof whole - 2, 0, &status, &off, &len), 1);
    ck_assert_int_eq(ctl_http_parse(whole, 30, 0, &status, &off, &len), 1);
    /* without a Content-Length the body ends where the connection does */
    static const char open_ended[] = "HTTP/1.0 200 OK\r\n\r\nabc";
    ck_assert_int_eq(ctl_http_parse(open_ended, sizeof open_ended - 1, 0, &status, &off, &len), 1);
    ck_assert_int_eq(ctl_http_parse(open_ended, sizeof open_ended - 1, 1, &status, &off, &len), 0);
    ck_assert_int_eq(len, 3);
    static const char *const bad[] = {"SMTP/1.1 200 OK\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
                                      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                                      "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(ctl_http_parse(bad[i], strlen(bad[i]), 1, &status, &off, &len) == -1,
                      "took %s", bad[i]);
}
END_TEST

START_TEST(test_url_is_http_host_and_port_only)
{
    struct ctl_url u;
    char err[200];
    ck_assert_int_eq(ctl_url_parse("http://127.0.0.1:9464", &u, err, sizeof err), 0);
    ck_assert_str_eq(u.host, "127.0.0.1");
    ck_assert_int_eq(u.port, 9464);
    ck_assert_int_eq(ctl_url_parse("HTTP://[::1]:80/", &u, err, sizeof err), 0);
    ck_assert_str_eq(u.host, "::1");
    ck_assert_int_eq(u.v6, 1);
    ck_assert_int_eq(ctl_url_parse("http://seckill.internal", &u, err, sizeof err), 0);
    ck_assert_int_eq(u.port, 80);
    static const char *const bad[] = {"127.0.0.1:9464",  "https://h:1",      "http://",
                                      "http://h:0",      "http://h:65536",   "http://h:x",
                                      "http://u:pw@h:1", "http://h:1/admin", "http://[::1:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(ctl_url_parse(bad[i], &u, err, sizeof err) != 0, "took %s", bad[i]);
        ck_assert_msg(err[0], "no reason for %s", bad[i]);
    }
}
END_TEST

START_TEST(test_exit_codes_follow_the_answer)
{
    ck_assert_int_eq(ctl_admin_exit_of(200, NULL), CTL_EXIT_OK);
    ck_assert_int_eq(ctl_admin_exit_of(201, NULL), CTL_EXIT_OK);
    ck_assert_int_eq(ctl_admin_exit_of(404, "unknown_sku"), CTL_EXIT_NOT_FOUND);
    ck_assert_int_eq(ctl_admin_exit_of(404, "unknown_order"), CTL_EXIT_NOT_FOUND);
    /* the public listener's 404 for /admin/ is a wrong URL, not a missing SKU */
    ck_assert_int_eq(ctl_admin_exit_of(404, "not_found"), CTL_EXIT_ERROR);
    ck_assert_int_eq(ctl_admin_exit_of(401, "unauthorized"), CTL_EXIT_AUTH);
    ck_assert_int_eq(ctl_admin_exit_of(409, "insufficient_stock"), CTL_EXIT_REFUSED);
    ck_assert_int_eq(ctl_admin_exit_of(422, "idempotency_key_reused"), CTL_EXIT_REFUSED);
    ck_assert_int_eq(ctl_admin_exit_of(400, "invalid_request"), CTL_EXIT_REFUSED);
    ck_assert_int_eq(ctl_admin_exit_of(429, "rate_limited"), CTL_EXIT_REFUSED);
    ck_assert_int_eq(ctl_admin_exit_of(503, "unavailable"), CTL_EXIT_ERROR);
    ck_assert_int_eq(ctl_admin_exit_of(302, NULL), CTL_EXIT_ERROR);
}
END_TEST

/* `health` of a URL where something else than seckilld answers 200 (another
 * web server on that port): a row "unexpected", and not a healthy exit. */
START_TEST(test_health_of_an_answer_not_seckilld_is_not_ok)
{
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(ls, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    ck_assert_int_eq(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(ls, 1), 0);
    ck_assert_int_eq(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(sa.sin_port));
    const char *args[] = {"--url", url, "health", NULL};
    struct run r;
    memset(&r, 0, sizeof r);
    int o, e;
    pid_t pid = spawn(args, &o, &e);
    struct pollfd p = {.fd = ls, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, RUN_TIMEOUT_MS), 1);
    int c = accept(ls, NULL, NULL);
    ck_assert_int_ge(c, 0);
    char req[2048] = "";
    size_t got = 0;
    while (got < sizeof req - 1 && !strstr(req, "\r\n\r\n")) {
        ssize_t n = read(c, req + got, sizeof req - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        req[got] = '\0';
    }
    static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                 "Content-Length: 3\r\n\r\nok\n";
    ck_assert_int_eq(write(c, answer, sizeof answer - 1), (ssize_t)(sizeof answer - 1));
    close(c);
    close(ls);
    finish(pid, o, e, &r, 0);
    ck_assert_msg(strstr(r.out, "unexpected"), "health: %s", r.out);
    ck_assert_int_eq(r.status, CTL_EXIT_ERROR);
}
END_TEST

static Suite *ctl_suite(void)
{
    Suite *s = suite_create("seckillctl");
    TCase *tc = tcase_create("lock");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_hold_prints_token_and_fence_and_releases_on_sigterm);
    tcase_add_test(tc, test_hold_releases_by_itself_when_the_lease_ends);
    tcase_add_test(tc, test_hold_token_interoperates_with_the_library);
    tcase_add_test(tc, test_force_release_needs_yes_and_is_logged);
    tcase_add_test(tc, test_list_shows_both_lock_formats_and_inspect_reports_absence);
    tcase_add_test(tc, test_usage_errors_exit_2_and_say_why);
    tcase_add_test(tc, test_unreachable_redis_is_an_error);
    tcase_add_test(tc, test_reconcile_reports_drift_and_repair_fixes_it);
    tcase_add_test(tc, test_token_is_accepted_by_the_daemon_for_its_user);
    tcase_add_test(tc, test_token_refuses_bad_input_and_a_missing_secret);
    tcase_add_test(tc, test_token_signs_with_the_secret_of_the_chosen_kid);
    tcase_add_test(tc, test_health_of_an_answer_not_seckilld_is_not_ok);
    suite_add_tcase(s, tc);
    TCase *pure = tcase_create("admin groups, pure parts");
    tcase_add_test(pure, test_delta_takes_a_sign_and_refuses_junk);
    tcase_add_test(pure, test_table_aligns_columns_by_characters);
    tcase_add_test(pure, test_cell_shows_nulls_booleans_and_no_control_characters);
    tcase_add_test(pure, test_http_parse_waits_for_the_whole_body);
    tcase_add_test(pure, test_url_is_http_host_and_port_only);
    tcase_add_test(pure, test_exit_codes_follow_the_answer);
    suite_add_tcase(s, pure);
    return s;
}

int main(void)
{
    embedded_init(); /* the lock library as the service runs it: by FCALL */
    SRunner *sr = srunner_create(ctl_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
