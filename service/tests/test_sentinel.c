/*
 * redis-sentinel:// URLs (service/rlock/src/url.c) against a real Sentinel:
 * the test starts one (redis-server --sentinel, on a free port, its config
 * in a directory of its own) watching the test stack's Redis, with the
 * service's ACL user on the Sentinel too, and connects through it as every
 * client of the project does (rlock_url_connect, redis_conn).  Then what
 * must fail closed: a master name no Sentinel knows, no Sentinel answering,
 * wrong credentials.  Last, a failover of the test's own pair of servers:
 * the Sentinel's +switch-master moves every connection that follows it.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "store/redis_conn.h"
#include <rlock/sentinel.h>
#include <rlock/url.h>

#define WAIT_TENTHS 100 /* 10 s for the Sentinel to answer */

static struct {
    char dir[64];
    pid_t pid;
    int port;
    struct rlock_url svc; /* the test Redis as the service's user */
} s;

/* The URL of the service's user through the Sentinel, for master 'name'. */
static void sentinel_url(char *out, size_t cap, const char *user, const char *password,
                         const char *name)
{
    snprintf(out, cap, "redis-sentinel://%s:%s@127.0.0.1:%d/%s/0", user, password, s.port, name);
}

static void sentinel_start(void)
{
    char err[320];
    struct rlock_url admin;
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_URL"), &s.svc, err, sizeof err) == 0);
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_ADMIN_URL"), &admin, err, sizeof err) ==
              0);
    snprintf(s.dir, sizeof s.dir, "/tmp/seckill-sentinel-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s.dir));
    s.port = th_free_port();
    char conf[128];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", s.dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fchmod(fileno(f), 0600), 0);
    /* The Sentinel logs in to the data node as its admin user; its own
     * clients must authenticate (the service's user, as on the data nodes). */
    fprintf(f,
            "bind 127.0.0.1\nport %d\ndaemonize no\ndir \"%s\"\nlogfile \"%s/sentinel.log\"\n"
            "sentinel monitor testmaster %s %d 1\n"
            "sentinel auth-user testmaster %s\nsentinel auth-pass testmaster %s\n"
            "sentinel down-after-milliseconds testmaster 60000\n"
            "user default off\nuser %s on >%s +@all ~* &*\n",
            s.port, s.dir, s.dir, s.svc.host, s.svc.port, admin.user, admin.password, s.svc.user,
            s.svc.password);
    ck_assert_int_eq(fclose(f), 0);
    s.pid = fork();
    ck_assert_int_ge(s.pid, 0);
    if (s.pid == 0) {
        execlp("redis-server", "redis-server", conf, "--sentinel", (char *)NULL);
        _exit(127);
    }
    /* answering, and knowing the master */
    char url[512];
    sentinel_url(url, sizeof url, s.svc.user, s.svc.password, "testmaster");
    struct rlock_url u;
    ck_assert(rlock_url_parse(url, &u, err, sizeof err) == 0);
    for (int i = 0; i < WAIT_TENTHS; i++) {
        ck_assert_msg(waitpid(s.pid, NULL, WNOHANG) == 0, "the Sentinel exited (see %s)", s.dir);
        if (rlock_url_resolve(&u, 200, err, sizeof err) == 0)
            return;
        th_sleep_ms(100);
    }
    ck_abort_msg("the Sentinel did not answer in time: %s", err);
}

static void sentinel_stop(void)
{
    if (s.pid > 0) {
        kill(s.pid, SIGKILL);
        (void)waitpid(s.pid, NULL, 0);
    }
    /* The test Redis is shared with the tests after this one: a replica's
     * full sync left it writing an RDB in a child, which must be over
     * before they run (DEBUG LOADAOF, for one, refuses while it runs). */
    redisContext *a = th_redis_admin();
    for (int i = 0; i < WAIT_TENTHS; i++) {
        redisReply *r = redisCommand(a, "INFO persistence");
        int busy = r && r->type == REDIS_REPLY_STRING &&
                   (strstr(r->str, "rdb_bgsave_in_progress:1") ||
                    strstr(r->str, "aof_rewrite_in_progress:1"));
        freeReplyObject(r);
        if (!busy)
            break;
        th_sleep_ms(100);
    }
    redisFree(a);
    char path[128];
    static const char *const files[] = {"sentinel.conf", "sentinel.log"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", s.dir, files[i]);
        (void)unlink(path);
    }
    (void)rmdir(s.dir);
}

START_TEST(test_connects_to_the_master_the_sentinel_names)
{
    sentinel_start();
    char url[512], err[320];
    sentinel_url(url, sizeof url, s.svc.user, s.svc.password, "testmaster");
    struct rlock_url u;
    ck_assert(rlock_url_parse(url, &u, err, sizeof err) == 0);
    redisContext *c = rlock_url_connect(&u, 500, 500, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    redisReply *r = redisCommand(c, "SET seckill:sentinel-probe yes");
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(c, "INFO server");
    char tcp[32];
    snprintf(tcp, sizeof tcp, "tcp_port:%d\r\n", s.svc.port);
    ck_assert(r && r->type == REDIS_REPLY_STRING && strstr(r->str, tcp)); /* the test Redis */
    freeReplyObject(r);
    redisFree(c);
    /* resolving fills in the master's address, which the URL leaves empty */
    ck_assert_str_eq(u.host, "");
    ck_assert_int_eq(rlock_url_resolve(&u, 500, err, sizeof err), 0);
    ck_assert_str_eq(u.host, s.svc.host);
    ck_assert_int_eq(u.port, s.svc.port);

    /* the service's own connection type, through the same URL */
    struct cfg cfg;
    th_cfg(&cfg);
    ck_assert(cfg_set(&cfg, "redis_url", url, err, sizeof err) == 0);
    struct redis_conn rc;
    ck_assert(redis_conn_init(&rc, &cfg, err, sizeof err) == 0);
    ck_assert_int_eq(redis_conn_check_credentials(&rc, err, sizeof err), 0);
    const char *get[] = {"GET", "seckill:sentinel-probe"};
    r = redis_conn_cmd(&rc, 2, get, NULL);
    ck_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "yes") == 0);
    freeReplyObject(r);
    redis_conn_close(&rc);
    cfg_free(&cfg);
    sentinel_stop();
}
END_TEST

START_TEST(test_fails_closed_without_a_master)
{
    sentinel_start();
    char url[512], err[320];
    struct rlock_url u;
    /* a name the Sentinel does not watch: no connection at all */
    sentinel_url(url, sizeof url, s.svc.user, s.svc.password, "nosuchmaster");
    ck_assert(rlock_url_parse(url, &u, err, sizeof err) == 0);
    ck_assert_ptr_null(rlock_url_connect(&u, 500, 500, err, sizeof err));
    ck_assert_msg(strstr(err, "no Sentinel") != NULL, "%s", err);
    ck_assert_str_eq(u.host, "");
    /* credentials the Sentinel refuses; the password never shows */
    sentinel_url(url, sizeof url, s.svc.user, "wrong-password-123", "testmaster");
    ck_assert(rlock_url_parse(url, &u, err, sizeof err) == 0);
    ck_assert_ptr_null(rlock_url_connect(&u, 500, 500, err, sizeof err));
    ck_assert_ptr_null(strstr(err, "wrong-password-123"));
    /* no Sentinel answering (stopped): none to ask, no connection */
    sentinel_url(url, sizeof url, s.svc.user, s.svc.password, "testmaster");
    ck_assert(rlock_url_parse(url, &u, err, sizeof err) == 0);
    kill(s.pid, SIGKILL);
    (void)waitpid(s.pid, NULL, 0);
    s.pid = 0;
    ck_assert_ptr_null(rlock_url_connect(&u, 500, 500, err, sizeof err));
    ck_assert_int_eq(rlock_url_resolve(&u, 500, err, sizeof err), -1);
    sentinel_stop();
}
END_TEST

/* A node that says it is a replica is refused, whatever a Sentinel said
 * (one that has not noticed a failover yet, a demoted master that came
 * back): the test starts a real replica of the test Redis and hands its
 * address to the handshake of a redis-sentinel:// URL. */
START_TEST(test_a_replica_is_never_taken_for_the_master)
{
    char err[320];
    struct rlock_url admin;
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_URL"), &s.svc, err, sizeof err) == 0);
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_ADMIN_URL"), &admin, err, sizeof err) ==
              0);
    snprintf(s.dir, sizeof s.dir, "/tmp/seckill-replica-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s.dir));
    int port = th_free_port();
    char conf[128];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", s.dir); /* removed by sentinel_stop */
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fchmod(fileno(f), 0600), 0);
    fprintf(f,
            "bind 127.0.0.1\nport %d\ndaemonize no\ndir \"%s\"\nlogfile \"%s/sentinel.log\"\n"
            "save \"\"\nappendonly no\nreplicaof %s %d\nmasteruser %s\nmasterauth %s\n"
            "user default off\nuser %s on >%s +@all ~* &*\n",
            port, s.dir, s.dir, s.svc.host, s.svc.port, admin.user, admin.password, s.svc.user,
            s.svc.password);
    ck_assert_int_eq(fclose(f), 0);
    s.pid = fork();
    ck_assert_int_ge(s.pid, 0);
    if (s.pid == 0) {
        execlp("redis-server", "redis-server", conf, (char *)NULL);
        _exit(127);
    }
    struct rlock_url plain = s.svc, behind = s.svc;
    plain.port = port;
    /* as if a Sentinel had named it */
    behind.port = port;
    behind.nsentinels = 1;
    snprintf(behind.master, sizeof behind.master, "testmaster");
    redisContext *c = NULL;
    for (int i = 0; i < WAIT_TENTHS && !c; i++) {
        c = rlock_url_connect(&plain, 200, 500, err, sizeof err);
        if (!c)
            th_sleep_ms(100);
    }
    ck_assert_msg(c != NULL, "the replica did not answer: %s", err);
    /* a plain URL takes any node; behind Sentinels, only a master */
    ck_assert_int_eq(rlock_url_handshake(c, &plain, err, sizeof err), 0);
    ck_assert_int_eq(rlock_url_handshake(c, &behind, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not the master") != NULL, "%s", err);
    redisFree(c);

    /* A connection made to a master that a failover then demoted gets
     * READONLY for a write: the service drops it, so that the next call
     * reconnects (through the Sentinels) instead of writing there again. */
    struct cfg cfg;
    th_cfg(&cfg);
    char url[512];
    snprintf(url, sizeof url, "redis://%s:%s@127.0.0.1:%d/0", s.svc.user, s.svc.password, port);
    ck_assert(cfg_set(&cfg, "redis_url", url, err, sizeof err) == 0);
    struct redis_conn rc;
    ck_assert(redis_conn_init(&rc, &cfg, err, sizeof err) == 0);
    const char *set[] = {"SET", "seckill:sentinel-probe", "no"};
    redisReply *r = redis_conn_cmd(&rc, 3, set, NULL);
    ck_assert(r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0);
    freeReplyObject(r);
    ck_assert_ptr_null(rc.ctx);
    const char *get[] = {"GET", "seckill:sentinel-probe"}; /* a read is fine on a replica */
    r = redis_conn_cmd(&rc, 2, get, NULL);
    ck_assert(r && r->type != REDIS_REPLY_ERROR);
    freeReplyObject(r);
    ck_assert_ptr_nonnull(rc.ctx);
    redis_conn_close(&rc);
    cfg_free(&cfg);
    sentinel_stop();
}
END_TEST

/* Starts "redis-server <dir>/<name>.conf [--sentinel]" with the given
 * config text (after bind, port, dir and logfile); returns its pid. */
static pid_t server_start(const char *name, int port, int sentinel, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static pid_t server_start(const char *name, int port, int sentinel, const char *fmt, ...)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/%s.conf", s.dir, name);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fchmod(fileno(f), 0600), 0);
    fprintf(f, "bind 127.0.0.1\nport %d\ndaemonize no\ndir \"%s\"\nlogfile \"%s/%s.log\"\n", port,
            s.dir, s.dir, name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    ck_assert_int_eq(fclose(f), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (sentinel)
            execlp("redis-server", "redis-server", conf, "--sentinel", (char *)NULL);
        else
            execlp("redis-server", "redis-server", conf, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* One command as the test's user on 127.0.0.1:port; the reply (caller frees). */
static redisReply *ask(int port, const char *cmd)
{
    struct rlock_url u = s.svc;
    snprintf(u.host, sizeof u.host, "127.0.0.1");
    u.port = port;
    u.db = 0;
    char err[320];
    redisContext *c = rlock_url_connect(&u, 200, 1000, err, sizeof err);
    if (!c)
        return NULL;
    redisReply *r = redisCommand(c, cmd);
    redisFree(c);
    return r;
}

/*
 * A failover of a pair the test owns (master A, replica B, a Sentinel
 * watching A; the shared test Redis stays out of it), made by SENTINEL
 * FAILOVER while A is still up: the case where nothing breaks the old
 * connections.  The watch hears +switch-master; the service's connection,
 * made to A before, goes to B for its next command (it would otherwise
 * write to A, a master still, or a replica by then: READONLY).
 */
START_TEST(test_a_failover_moves_every_following_connection)
{
    char err[320];
    struct rlock_url admin;
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_URL"), &s.svc, err, sizeof err) == 0);
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_ADMIN_URL"), &admin, err, sizeof err) ==
              0);
    snprintf(s.dir, sizeof s.dir, "/tmp/seckill-failover-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s.dir));
    int pa = th_free_port(), pb, ps;
    do
        pb = th_free_port();
    while (pb == pa);
    do
        ps = th_free_port();
    while (ps == pa || ps == pb);
    /* one user for everything: the test's own servers */
    char users[512];
    snprintf(users, sizeof users, "user default off\nuser %s on >%s +@all ~* &*\n", s.svc.user,
             s.svc.password);
    pid_t a = server_start("a", pa, 0, "save \"\"\nappendonly no\nmasteruser %s\nmasterauth %s\n%s",
                           s.svc.user, s.svc.password, users);
    pid_t b = server_start("b", pb, 0,
                           "save \"\"\nappendonly no\nreplicaof 127.0.0.1 %d\nmasteruser %s\n"
                           "masterauth %s\n%s",
                           pa, s.svc.user, s.svc.password, users);
    s.pid = server_start("sentinel", ps, 1,
                         "sentinel monitor pair 127.0.0.1 %d 1\nsentinel auth-user pair %s\n"
                         "sentinel auth-pass pair %s\nsentinel down-after-milliseconds pair 60000\n"
                         "%s",
                         pa, s.svc.user, s.svc.password, users);
    s.port = ps;

    char url[512];
    sentinel_url(url, sizeof url, s.svc.user, s.svc.password, "pair");
    struct rlock_url u;
    ck_assert(rlock_url_parse(url, &u, err, sizeof err) == 0);
    struct rlock_sentinel_watch_opts o = {.timeout_ms = 500, .poll_ms = 60000, .retry_ms = 100};
    struct rlock_sentinel_watch *w = rlock_sentinel_watch_start(&u, &o, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    struct rlock_url_node m = {.port = 0};
    for (int i = 0; i < WAIT_TENTHS && rlock_sentinel_master(w, &m, NULL) != 0; i++)
        th_sleep_ms(100);
    ck_assert_int_eq(m.port, pa);
    ck_assert_int_eq(rlock_sentinel_generation(w), 1);

    /* the service's connection, made to A through the process's watch */
    struct cfg cfg;
    th_cfg(&cfg);
    ck_assert(cfg_set(&cfg, "redis_url", url, err, sizeof err) == 0);
    ck_assert(redis_conn_follow_start(&cfg, err, sizeof err) == 0);
    struct redis_conn rc;
    ck_assert(redis_conn_init(&rc, &cfg, err, sizeof err) == 0);
    const char *set[] = {"SET", "probe", "before"};
    redisReply *r = NULL;
    for (int i = 0; i < WAIT_TENTHS; i++) { /* until the process's watch knows A */
        freeReplyObject(r);
        r = redis_conn_cmd(&rc, 3, set, NULL);
        if (r && r->type == REDIS_REPLY_STATUS)
            break;
        th_sleep_ms(100);
    }
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);

    /* The failover, once the Sentinel has seen B in sync. */
    int asked = 0;
    for (int i = 0; i < 2 * WAIT_TENTHS && !asked; i++) {
        r = ask(ps, "SENTINEL FAILOVER pair");
        asked = r && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        if (!asked)
            th_sleep_ms(100);
    }
    ck_assert_msg(asked, "the Sentinel never accepted SENTINEL FAILOVER (see %s)", s.dir);
    for (int i = 0; i < 2 * WAIT_TENTHS && rlock_sentinel_generation(w) < 2; i++)
        th_sleep_ms(100);
    ck_assert_int_eq(rlock_sentinel_generation(w), 2);
    ck_assert_int_eq(rlock_sentinel_master(w, &m, NULL), 0);
    ck_assert_int_eq(m.port, pb);
    ck_assert_uint_ge(rlock_sentinel_switches(w), 1);
    for (int i = 0; i < WAIT_TENTHS && !rlock_sentinel_moved(&rc.target, 1); i++)
        th_sleep_ms(100); /* the process's watch hears it too */

    /* The next command of the connection made to A goes to B, first time. */
    const char *after[] = {"SET", "probe", "after"};
    r = redis_conn_cmd(&rc, 3, after, NULL);
    ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "%s", r ? r->str : "no reply");
    freeReplyObject(r);
    r = ask(pb, "GET probe");
    ck_assert(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "after") == 0);
    freeReplyObject(r);
    redis_conn_close(&rc);
    redis_conn_follow_stop();
    rlock_sentinel_watch_stop(w);
    cfg_free(&cfg);

    kill(a, SIGKILL);
    kill(b, SIGKILL);
    (void)waitpid(a, NULL, 0);
    (void)waitpid(b, NULL, 0);
    static const char *const files[] = {"a.conf", "a.log", "b.conf", "b.log", "dump.rdb"};
    char path[128];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", s.dir, files[i]);
        (void)unlink(path);
    }
    sentinel_stop();
}
END_TEST

static Suite *suite(void)
{
    Suite *su = suite_create("sentinel");
    TCase *tc = tcase_create("sentinel");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_connects_to_the_master_the_sentinel_names);
    tcase_add_test(tc, test_fails_closed_without_a_master);
    tcase_add_test(tc, test_a_replica_is_never_taken_for_the_master);
    tcase_add_test(tc, test_a_failover_moves_every_following_connection);
    suite_add_tcase(su, tc);
    return su;
}

int main(void)
{
    return th_run(suite());
}
