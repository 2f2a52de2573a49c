/*
 * Least privilege, against the test stack (scripts/stack.sh): the service's
 * Redis ACL user and PostgreSQL role can do what the service does and nothing
 * else, Redis's default user is gone, neither server runs as root, a user
 * name in redis_url is used, and secrets never come from the command line.
 * A refused start-up setting is reported as one log record, escaped onto one
 * line, so a value from the environment cannot forge records of its own.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/embedded.h"
#include "harness.h"
#include "store/redis_conn.h"

#define RUN_WAIT_STEPS 1200 /* x 50 ms: a safety bound, not a timing assertion */
#define WRONG_PASSWORD "not-the-password-0123456789abcdef"

/* Asserts that the reply is an ACL refusal (NOPERM); MODULE, disabled for
 * everyone (enable-module-command no), is refused before the ACL is asked. */
static void assert_noperm(redisReply *r, const char *what)
{
    ck_assert_msg(r != NULL, "%s: no reply", what);
    int module_off = strncmp(what, "MODULE", 6) == 0 && r->type == REDIS_REPLY_ERROR &&
                     strstr(r->str, "MODULE command not allowed");
    ck_assert_msg(module_off || (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOPERM", 6) == 0),
                  "%s was not refused with NOPERM (type %d: %s)", what, r->type,
                  r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS ? r->str : "");
    freeReplyObject(r);
}

START_TEST(test_service_user_is_refused_admin_commands)
{
    redisContext *r = th_redis();
    static const char *const refused[] = {
        "FLUSHALL",       "FLUSHDB",       "CONFIG GET *",    "CONFIG SET maxmemory 1",
        "KEYS *",         "DEBUG SLEEP 0", "SHUTDOWN NOSAVE", "REPLICAOF 127.0.0.1 1",
        "SLAVEOF NO ONE", "MODULE LIST",   "ACL WHOAMI",      "ACL SETUSER x on",
        "SCRIPT FLUSH",   "CLIENT LIST",   "SWAPDB 0 1",      "MONITOR",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_noperm(redisCommand(r, refused[i]), refused[i]);
    /* What it may do, it can. */
    redisReply *ok = redisCommand(r, "SET seckill:test:privilege 1");
    ck_assert(ok && ok->type == REDIS_REPLY_STATUS);
    freeReplyObject(ok);
    redisFree(r);
}
END_TEST

START_TEST(test_service_user_is_refused_keys_and_channels_outside_its_patterns)
{
    redisContext *r = th_redis();
    assert_noperm(redisCommand(r, "SET other:key 1"), "SET other:key");
    assert_noperm(redisCommand(r, "GET sess:1"), "GET sess:1");
    assert_noperm(redisCommand(r, "FCALL_RO %s 1 %s", "seckill_sku_state", "other"),
                  "a function given another key");
    assert_noperm(redisCommand(r, "PUBLISH %s 0", "other-channel"), "PUBLISH other-channel");
    /* The lock library's release channel of a seckill lock is allowed. */
    redisReply *p = redisCommand(r, "PUBLISH %s 0", "rlock:release:seckill:{sku:1}:lock:sku");
    ck_assert(p && p->type == REDIS_REPLY_INTEGER);
    freeReplyObject(p);
    redisFree(r);
}
END_TEST

START_TEST(test_default_user_cannot_authenticate)
{
    struct rlock_url u;
    char err[320];
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_URL"), &u, err, sizeof err) == 0);
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(u.host, u.port, tv);
    ck_assert(c && !c->err);
    redisReply *r = redisCommand(c, "PING");
    ck_assert_msg(r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0,
                  "an unauthenticated client was served");
    freeReplyObject(r);
    r = redisCommand(c, "AUTH %s", "anything");
    ck_assert(r && r->type == REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = redisCommand(c, "AUTH default %s", "");
    ck_assert(r && r->type == REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisFree(c);
}
END_TEST

/* The service's user runs the functions the administrator loaded and no
 * code of its own: a leaked password cannot block Redis with an endless
 * script, nor replace or drop the service's functions. */
START_TEST(test_service_user_runs_the_loaded_functions_and_no_code_of_its_own)
{
    redisContext *r = th_redis();
    assert_noperm(redisCommand(r, "EVAL %s 0", "while true do end"), "EVAL");
    assert_noperm(redisCommand(r, "EVAL_RO %s 0", "return 1"), "EVAL_RO");
    assert_noperm(redisCommand(r, "EVALSHA %s 0", script_reserve.sha), "EVALSHA");
    assert_noperm(redisCommand(r, "EVALSHA_RO %s 0", script_reserve.sha), "EVALSHA_RO");
    assert_noperm(redisCommand(r, "SCRIPT LOAD %s", "return 1"), "SCRIPT LOAD");
    static const char *const refused[] = {"SCRIPT KILL",     "SCRIPT FLUSH",
                                          "SCRIPT EXISTS 0", "FUNCTION KILL",
                                          "FUNCTION FLUSH",  "FUNCTION DELETE seckill",
                                          "FUNCTION DUMP",   "FUNCTION RESTORE x",
                                          "FUNCTION LIST",   "FUNCTION STATS"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_noperm(redisCommand(r, refused[i]), refused[i]);
    assert_noperm(redisCommand(r, "FUNCTION LOAD REPLACE %s",
                               "#!lua name=seckill\nredis.register_function('seckill_version', "
                               "function() while true do end end)"),
                  "FUNCTION LOAD");
    /* What it may: call the library's functions, the read-only ones too. */
    redisReply *v = redisCommand(r, "FCALL_RO %s_version 0", EMBEDDED_LIBRARY);
    ck_assert_msg(v && v->type == REDIS_REPLY_STRING, "FCALL_RO refused: %s",
                  v && v->str ? v->str : r->errstr);
    ck_assert_str_eq(v->str, embedded_library_version());
    freeReplyObject(v);
    redisFree(r);
}
END_TEST

/* The self-healing user may load the library and nothing else: no key, no
 * script, no call of what it loaded. */
START_TEST(test_functions_user_may_only_load_functions)
{
    char err[320];
    FILE *f = fopen(th_env("SECKILL_REDIS_FUNCTIONS_URL_FILE"), "r");
    ck_assert(f != NULL);
    char url[512] = "";
    ck_assert(fgets(url, sizeof url, f) != NULL);
    fclose(f);
    url[strcspn(url, "\n")] = '\0';
    struct rlock_url u;
    ck_assert_msg(rlock_url_parse(url, &u, err, sizeof err) == 0, "%s", err);
    redisContext *r = rlock_url_connect(&u, 2000, 2000, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    assert_noperm(redisCommand(r, "GET seckill:x"), "GET as the functions user");
    assert_noperm(redisCommand(r, "EVAL %s 0", "return 1"), "EVAL as the functions user");
    assert_noperm(redisCommand(r, "FCALL_RO %s_version 0", EMBEDDED_LIBRARY),
                  "FCALL_RO as the functions user");
    assert_noperm(redisCommand(r, "FUNCTION FLUSH"), "FUNCTION FLUSH as the functions user");
    size_t len;
    const char *text = embedded_library_text(&len);
    redisReply *l = rlock_library_load(r, text, len);
    ck_assert_msg(l && l->type == REDIS_REPLY_STRING, "FUNCTION LOAD refused: %s",
                  l && l->str ? l->str : r->errstr);
    ck_assert_str_eq(l->str, EMBEDDED_LIBRARY);
    freeReplyObject(l);
    redisFree(r);
}
END_TEST

/* Redis 7.0 replays the AOF as the default user and re-checks the ACL at each
 * EXEC: with a default user without rights, a restart would silently drop
 * what functions wrote (their effects are in the AOF as MULTI/EXEC).  The
 * library itself is in the AOF too, and comes back with it. */
START_TEST(test_function_writes_and_the_library_survive_an_aof_reload)
{
    redisContext *r = th_redis();
    redisContext *admin = th_redis_admin();
    /* A function of the test's own (admin-loaded), writing two keys. */
    redisReply *lt = redisCommand(
        admin, "FUNCTION LOAD REPLACE %s",
        "#!lua name=seckill_test\nredis.register_function('seckill_test_aof_write', "
        "function(KEYS) redis.call('SET', KEYS[1], 'a') redis.call('SET', KEYS[2], 'b') end)");
    ck_assert_msg(lt && lt->type == REDIS_REPLY_STRING, "test library: %s", lt ? lt->str : "");
    freeReplyObject(lt);
    redisReply *w = redisCommand(r, "FCALL %s 2 %s %s", "seckill_test_aof_write",
                                 "seckill:test:aof:1", "seckill:test:aof:2");
    ck_assert_msg(w && w->type != REDIS_REPLY_ERROR, "function refused: %s", w ? w->str : "");
    freeReplyObject(w);
    redisReply *reload = redisCommand(admin, "DEBUG LOADAOF");
    ck_assert_msg(reload && reload->type == REDIS_REPLY_STATUS, "DEBUG LOADAOF: %s",
                  reload ? reload->str : admin->errstr);
    freeReplyObject(reload);
    redisFree(admin);
    redisFree(r);
    r = th_redis();
    redisReply *n = redisCommand(r, "EXISTS seckill:test:aof:1 seckill:test:aof:2");
    ck_assert(n && n->type == REDIS_REPLY_INTEGER);
    ck_assert_msg(n->integer == 2, "the AOF reload lost a function's writes");
    freeReplyObject(n);
    ck_assert_int_eq(rlock_library_check(r, EMBEDDED_LIBRARY, embedded_library_version()),
                     RLOCK_LIBRARY_CURRENT);
    redisFree(r);
    admin = th_redis_admin();
    freeReplyObject(redisCommand(admin, "FUNCTION DELETE seckill_test"));
    redisFree(admin);
}
END_TEST

/* The first number of line "<field>:" of /proc/PID/status (Uid: the real uid). */
static long proc_status(long pid, const char *field)
{
    char path[64], line[256], fmt[32];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    snprintf(fmt, sizeof fmt, "%s: %%ld", field);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s: %s", path, strerror(errno));
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, fmt, &v) == 1)
            break;
    fclose(f);
    ck_assert_msg(v >= 0, "no %s line in %s", field, path);
    return v;
}

/* As root the servers run as another user; as anyone else, as that user. */
static void assert_not_root(long pid, const char *what)
{
    long uid = proc_status(pid, "Uid");
    if (getuid() == 0)
        ck_assert_msg(uid != 0, "%s (pid %ld) runs as root", what, pid);
    else
        ck_assert_msg(uid == (long)getuid(), "%s (pid %ld) runs as uid %ld", what, pid, uid);
}

START_TEST(test_redis_and_postgres_do_not_run_as_root)
{
    redisContext *r = th_redis_admin();
    redisReply *info = redisCommand(r, "INFO server");
    ck_assert(info && info->type == REDIS_REPLY_STRING);
    const char *p = strstr(info->str, "process_id:");
    ck_assert(p != NULL);
    long redis_pid = atol(p + strlen("process_id:"));
    freeReplyObject(info);
    redisFree(r);
    assert_not_root(redis_pid, "redis-server");

    PGconn *c = th_pg();
    long backend = th_pg_int(c, "SELECT pg_backend_pid()");
    /* the backend lives while its connection does: read it first */
    assert_not_root(backend, "a PostgreSQL backend");
    assert_not_root(proc_status(backend, "PPid"), "the postmaster");
    PQfinish(c);
}
END_TEST

#define PG_INSUFFICIENT_PRIVILEGE "42501"

/* Runs 'sql' as the service's role inside a savepoint of the open
 * transaction on 'c' (so that a statement wrongly allowed is rolled back
 * with the test's transaction) and asserts PostgreSQL refused it for want of
 * privilege. */
static void assert_pg_refused(PGconn *c, const char *sql)
{
    PQclear(PQexec(c, "SAVEPOINT probe"));
    PGresult *r = PQexec(c, sql);
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    ck_assert_msg(state && strcmp(state, PG_INSUFFICIENT_PRIVILEGE) == 0,
                  "the service's role was not refused \"%s\" (status %s, sqlstate %s: %s)", sql,
                  PQresStatus(PQresultStatus(r)), state ? state : "none", PQerrorMessage(c));
    PQclear(r);
    r = PQexec(c, "ROLLBACK TO SAVEPOINT probe");
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(r);
}

START_TEST(test_service_role_has_no_role_attributes)
{
    PGconn *c = th_pg();
    PGresult *r = PQexec(c, "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, "
                            "rolreplication, rolbypassrls FROM pg_roles "
                            "WHERE rolname = current_user");
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s",
                  PQerrorMessage(c));
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "seckill_app");
    for (int col = 1; col < PQnfields(r); col++)
        ck_assert_msg(strcmp(PQgetvalue(r, 0, col), "f") == 0, "the service's role has %s",
                      PQfname(r, col));
    PQclear(r);
    /* It owns nothing it could alter or drop. */
    ck_assert_int_eq(th_pg_int(c, "SELECT count(*) FROM pg_class "
                                  "WHERE relowner = (SELECT oid FROM pg_roles "
                                  "WHERE rolname = current_user)"),
                     0);
    PQfinish(c);
}
END_TEST

START_TEST(test_service_role_is_refused_ddl_and_superuser_powers)
{
    PGconn *c = th_pg();
    static const char *const refused[] = {
        "CREATE TABLE privilege_probe (k int)",
        "DROP TABLE orders",
        "TRUNCATE stock_ledger, orders, sku_epochs, skus",
        "ALTER TABLE skus ADD COLUMN privilege_probe int",
        "ALTER TABLE skus DROP CONSTRAINT skus_stock_check",
        "CREATE INDEX ON orders (user_id)",
        "COPY skus TO PROGRAM 'cat >/dev/null'",
        "COPY skus FROM PROGRAM 'true'",
        "COPY skus TO '/tmp/seckill-privilege-probe'",
        "SELECT pg_read_file('/etc/passwd')",
        "CREATE ROLE privilege_probe LOGIN SUPERUSER",
        "SET session_replication_role = replica", /* would switch off triggers and FKs */
        "SELECT rolpassword FROM pg_authid",
        "DELETE FROM orders",
        "UPDATE orders SET qty = qty + 1", /* only the lifecycle's columns change */
        "UPDATE orders SET user_id = 1",
        "DELETE FROM order_cancel_requests",
        "UPDATE skus SET per_user_limit = 1000000",
        "UPDATE stock_ledger SET delta = 0",
        "SELECT * FROM schema_migrations",
    };
    PGresult *r = PQexec(c, "BEGIN");
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(r);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_pg_refused(c, refused[i]);
    PQclear(PQexec(c, "ROLLBACK"));
    /* ALTER SYSTEM cannot run in a transaction; resetting a setting nobody
     * set is harmless if it were allowed. */
    r = PQexec(c, "ALTER SYSTEM RESET work_mem");
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    ck_assert_msg(state && strcmp(state, PG_INSUFFICIENT_PRIVILEGE) == 0,
                  "ALTER SYSTEM was not refused: %s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}
END_TEST

START_TEST(test_service_role_is_what_the_daemon_and_the_suite_use)
{
    /* The suite's DSN (the daemons started by the harness get it too) names
     * the restricted role; the superuser's is another one. */
    PGconn *c = th_pg(), *admin = th_pg_admin();
    ck_assert_str_eq(PQuser(c), "seckill_app");
    ck_assert_str_ne(PQuser(admin), PQuser(c));
    ck_assert_int_eq(th_pg_int(admin, "SELECT count(*) FROM pg_roles "
                                      "WHERE rolname = current_user AND rolsuper"),
                     1);
    PQfinish(admin);
    PQfinish(c);
}
END_TEST

/* docs/operations.md's account of the service role's rights (the paragraph
 * from "logs in as" to "So no"), read into out.  Asserts it was found. */
static void readme_rights(char *out, size_t cap)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/operations.md", th_env("SECKILL_TEST_ROOT"));
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "cannot read %s", path);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *from = strstr(text, "logs in as\n  `seckill_app`");
    const char *to = from ? strstr(from, "So no") : NULL;
    ck_assert_msg(from && to && (size_t)(to - from) < cap,
                  "docs/operations.md lost its paragraph on the service role's rights");
    memcpy(out, from, (size_t)(to - from));
    out[to - from] = '\0';
    /* the paragraph wraps lines: make it one line of single spaces */
    char *w = out;
    for (const char *r = out; *r; r++)
        if (!(*r == '\n' || (*r == ' ' && (w == out || w[-1] == ' '))))
            *w++ = *r;
        else if (w > out && w[-1] != ' ')
            *w++ = ' ';
    *w = '\0';
}

START_TEST(test_readme_names_every_right_the_service_role_has)
{
    char rights[8192];
    readme_rights(rights, sizeof rights);
    PGconn *c = th_pg_admin();
    /* every table, sequence and updatable column the role holds a right on,
     * as PostgreSQL says after the migrations */
    PGresult *r =
        PQexec(c, "SELECT table_name, NULL FROM information_schema.role_table_grants "
                  "WHERE grantee = 'seckill_app' "
                  "UNION SELECT object_name, NULL FROM information_schema.usage_privileges "
                  "WHERE grantee = 'seckill_app' "
                  "UNION SELECT table_name, column_name FROM information_schema.column_privileges "
                  "WHERE grantee = 'seckill_app' AND privilege_type = 'UPDATE' "
                  "AND NOT EXISTS (SELECT 1 FROM information_schema.role_table_grants t "
                  "WHERE t.grantee = 'seckill_app' AND t.table_name = column_privileges.table_name "
                  "AND t.privilege_type = 'UPDATE')");
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0, "%s",
                  PQerrorMessage(c));
    for (int i = 0; i < PQntuples(r); i++) {
        char name[160];
        snprintf(name, sizeof name, "%s", PQgetvalue(r, i, PQgetisnull(r, i, 1) ? 0 : 1));
        /* a name stands in the text as a word: `name`, or (name, ...) in a list */
        int found = 0;
        for (const char *p = rights; (p = strstr(p, name)) && !found; p++) {
            char before = p == rights ? ' ' : p[-1], after = p[strlen(name)];
            found = strchr("`( ", before) && strchr("`,) ", after);
        }
        ck_assert_msg(found,
                      "docs/operations.md's list of the service role's rights leaves out %s%s%s",
                      PQgetvalue(r, i, 0), PQgetisnull(r, i, 1) ? "" : ".", PQgetvalue(r, i, 1));
    }
    PQclear(r);
    PQfinish(c);
}
END_TEST

START_TEST(test_user_name_in_redis_url_is_used)
{
    struct cfg c;
    char err[320];
    th_cfg(&c);
    struct redis_conn rc;
    ck_assert(redis_conn_init(&rc, &c, err, sizeof err) == 0);
    ck_assert_str_ne(rc.target.user, ""); /* the stack's URL names the ACL user */
    ck_assert_int_eq(redis_conn_check_credentials(&rc, err, sizeof err), 0);
    const char *ping[] = {"PING"};
    redisReply *r = redis_conn_cmd(&rc, 1, ping, NULL);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redis_conn_close(&rc);

    /* The same user with a wrong password is refused, and the message says
     * why without the password. */
    snprintf(rc.target.password, sizeof rc.target.password, "%s", WRONG_PASSWORD);
    ck_assert_ptr_null(redis_conn_get(&rc));
    ck_assert_int_eq(redis_conn_check_credentials(&rc, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "WRONGPASS") && strstr(err, rc.target.user), "%s", err);
    ck_assert_ptr_null(strstr(err, WRONG_PASSWORD));
    cfg_free(&c);
}
END_TEST

struct run {
    int status; /* exit status, or 128 + signal */
    char out[8192];
};

/* Runs seckilld with 'args' (NULL-terminated, after the program name) and
 * extra "NAME=value" environment entries ("NAME" alone removes one); its
 * stdout and stderr go to out.  Bounded: SIGKILL after RUN_WAIT_STEPS. */
static void run_daemon(struct run *res, const char *const *env, const char *const *args)
{
    char path[] = "/tmp/seckill-test-run-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    unlink(path);
    const char *bin = th_env("SECKILL_TEST_DAEMON");
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        setenv("SECKILL_HTTP_ADDR", "127.0.0.1:0", 1);
        setenv("SECKILL_REDIS_URL", th_env("SECKILL_TEST_REDIS_URL"), 1);
        setenv("SECKILL_PG_DSN", th_env("SECKILL_TEST_PG_DSN"), 1);
        /* serve refuses to start without it, before it reaches Redis */
        setenv("SECKILL_BUYER_TOKEN_SECRET", TH_BUYER_SECRET, 1);
        unsetenv("SECKILL_ADMIN_TOKEN");
        for (size_t i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        const char *argv[16] = {bin};
        size_t n = 1;
        for (size_t i = 0; args && args[i] && n + 1 < 16; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int st = 0, done = 0;
    for (int i = 0; i < RUN_WAIT_STEPS && !done; i++) {
        done = waitpid(pid, &st, WNOHANG) == pid;
        if (!done)
            usleep(50000);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        ck_abort_msg("seckilld did not stop by itself");
    }
    res->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    ssize_t got = pread(fd, res->out, sizeof res->out - 1, 0);
    res->out[got > 0 ? got : 0] = '\0';
    close(fd);
}

START_TEST(test_daemon_refuses_a_wrong_redis_password)
{
    struct rlock_url u;
    char err[320], url[512];
    ck_assert(rlock_url_parse(th_env("SECKILL_TEST_REDIS_URL"), &u, err, sizeof err) == 0);
    snprintf(url, sizeof url, "SECKILL_REDIS_URL=redis://%s:%s@%s:%d/%d", u.user, WRONG_PASSWORD,
             u.host, u.port, u.db);
    const char *env[] = {url, NULL};
    const char *args[] = {"serve", NULL};
    struct run r;
    run_daemon(&r, env, args);
    ck_assert_msg(r.status != 0, "seckilld started with a wrong Redis password: %s", r.out);
    ck_assert_msg(strstr(r.out, "WRONGPASS"), "no clear reason: %s", r.out);
    ck_assert_msg(!strstr(r.out, WRONG_PASSWORD), "the password was printed: %s", r.out);
}
END_TEST

START_TEST(test_daemon_refuses_a_bad_redis_functions_url)
{
    const char *env[] = {"SECKILL_REDIS_FUNCTIONS_URL_FILE", /* unset (glibc putenv) */
                         "SECKILL_REDIS_FUNCTIONS_URL=redis://seckill-functions:" WRONG_PASSWORD
                         "@127.0.0.1:notaport/0",
                         NULL};
    const char *args[] = {"serve", NULL};
    struct run r;
    run_daemon(&r, env, args);
    ck_assert_msg(r.status != 0, "seckilld started with a bad redis_functions_url: %s", r.out);
    ck_assert_msg(strstr(r.out, "redis_functions_url"), "no clear reason: %s", r.out);
    ck_assert_msg(!strstr(r.out, WRONG_PASSWORD), "the password was printed: %s", r.out);
}
END_TEST

START_TEST(test_secret_flag_is_refused_at_start)
{
    const char *args[] = {"--admin-token=" TH_ADMIN_TOKEN, "serve", NULL};
    struct run r;
    run_daemon(&r, NULL, args);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.out, "SECKILL_ADMIN_TOKEN") && strstr(r.out, "admin_token_file"), "%s",
                  r.out);
    ck_assert_msg(!strstr(r.out, TH_ADMIN_TOKEN), "the token was printed: %s", r.out);
    /* the buyer token secret is a secret of the same kind */
    const char *buyer_args[] = {"--buyer-token-secret=" TH_BUYER_SECRET, "serve", NULL};
    run_daemon(&r, NULL, buyer_args);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.out, "SECKILL_BUYER_TOKEN_SECRET") &&
                      strstr(r.out, "buyer_token_secret_file"),
                  "%s", r.out);
    ck_assert_msg(!strstr(r.out, TH_BUYER_SECRET), "the secret was printed: %s", r.out);
}
END_TEST

START_TEST(test_short_admin_token_is_refused_at_start)
{
    const char *env[] = {"SECKILL_ADMIN_TOKEN=short-token", NULL};
    const char *args[] = {"serve", NULL};
    struct run r;
    run_daemon(&r, env, args);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.out, "at least 32"), "%s", r.out);
    ck_assert_msg(!strstr(r.out, "short-token"), "the token was printed: %s", r.out);
}
END_TEST

/* A forged record, as a value with a newline would write it raw. */
#define FORGED "ERROR forged record"

START_TEST(test_a_refused_setting_is_one_escaped_log_record)
{
    const char *env[] = {"SECKILL_HTTP_THREADS=3\n" FORGED, NULL};
    const char *args[] = {"serve", NULL};
    struct run r;
    run_daemon(&r, env, args);
    ck_assert_int_eq(r.status, 2);
    /* exactly one line: the one record, in the log format, the value escaped */
    const char *nl = strchr(r.out, '\n');
    ck_assert_msg(nl && nl[1] == '\0', "not one line: %s", r.out);
    ck_assert_msg(strstr(r.out, " ERROR http_threads: \"3\\n" FORGED "\" is not an integer"),
                  "not an escaped ERROR record: %s", r.out);
    /* the command is echoed too: it is escaped the same way */
    const char *bad_cmd[] = {"serve\n" FORGED, NULL};
    run_daemon(&r, NULL, bad_cmd);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.out, " ERROR unknown command \"serve\\n" FORGED "\"\n"),
                  "not an escaped ERROR record: %s", r.out);
    ck_assert_msg(!strstr(r.out, "\n" FORGED), "a forged line: %s", r.out);
}
END_TEST

START_TEST(test_admin_token_file_works)
{
    th_reset();
    char path[] = "/tmp/seckill-test-token-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    ck_assert_int_eq(write(fd, TH_ADMIN_TOKEN "\n", sizeof TH_ADMIN_TOKEN),
                     (ssize_t)sizeof TH_ADMIN_TOKEN);
    close(fd);
    char file_env[96];
    snprintf(file_env, sizeof file_env, "SECKILL_ADMIN_TOKEN_FILE=%s", path);
    const char *env[] = {"SECKILL_ADMIN_TOKEN", file_env, NULL}; /* no token in the environment */
    struct th_daemon d;
    th_daemon_start(&d, env);
    th_create_sku(d.port, 1, 3, 1); /* the admin API took the file's token */
    th_daemon_stop(&d);
    unlink(path);
}
END_TEST

int main(void)
{
    embedded_init();
    Suite *s = suite_create("privilege");
    TCase *tc = tcase_create("stack");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_service_user_is_refused_admin_commands);
    tcase_add_test(tc, test_service_user_is_refused_keys_and_channels_outside_its_patterns);
    tcase_add_test(tc, test_default_user_cannot_authenticate);
    tcase_add_test(tc, test_function_writes_and_the_library_survive_an_aof_reload);
    tcase_add_test(tc, test_service_user_runs_the_loaded_functions_and_no_code_of_its_own);
    tcase_add_test(tc, test_functions_user_may_only_load_functions);
    tcase_add_test(tc, test_redis_and_postgres_do_not_run_as_root);
    tcase_add_test(tc, test_service_role_has_no_role_attributes);
    tcase_add_test(tc, test_service_role_is_refused_ddl_and_superuser_powers);
    tcase_add_test(tc, test_service_role_is_what_the_daemon_and_the_suite_use);
    tcase_add_test(tc, test_user_name_in_redis_url_is_used);
    tcase_add_test(tc, test_daemon_refuses_a_wrong_redis_password);
    tcase_add_test(tc, test_daemon_refuses_a_bad_redis_functions_url);
    tcase_add_test(tc, test_secret_flag_is_refused_at_start);
    tcase_add_test(tc, test_short_admin_token_is_refused_at_start);
    tcase_add_test(tc, test_a_refused_setting_is_one_escaped_log_record);
    tcase_add_test(tc, test_admin_token_file_works);
    tcase_add_test(tc, test_readme_names_every_right_the_service_role_has);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
