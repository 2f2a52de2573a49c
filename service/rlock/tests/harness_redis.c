#include "harness_redis.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_rlock.h"

#define START_TRIES 3      /* another process may grab the port we picked */
#define START_WAIT_MS 5000 /* per try, until PING answers */
#define POLL_STEP_MS 20
#define MAX_ARGS 32

/* A loopback port nobody listened on a moment ago. */
static int pick_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ck_assert(fd >= 0);
    ck_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static int answers_ping(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
    }
    redisFree(c);
    return ok;
}

/* Forks and execs redis-server on s->port.  Returns 1 once it answers, 0 if
 * it exited (port taken) or did not answer in time (then killed). */
static int spawn(struct th_redis_server *s, const char *const *extra)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *argv[MAX_ARGS] = {"redis-server", "--port",     port,     "--bind",
                                  "127.0.0.1",    "--save",     "",       "--appendonly",
                                  "no",           "--dir",      s->dir,   "--daemonize",
                                  "no",           "--loglevel", "warning"};
    size_t n = 15;
    for (size_t i = 0; extra && extra[i]; i++) {
        ck_assert(n + 1 < MAX_ARGS);
        argv[n++] = extra[i];
    }
    argv[n] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        /* Die with the test process, whatever way it ends; a process group
         * of its own, so that a kill takes its forks (an RDB for a replica,
         * a rewrite) with it and none writes into its removed directory. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        (void)setpgid(0, 0);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
            close(devnull);
        }
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    for (int waited = 0; waited < START_WAIT_MS; waited += POLL_STEP_MS) {
        if (answers_ping(s->port))
            return 1;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            return 0;
        }
        th_sleep_ms(POLL_STEP_MS);
    }
    th_redis_server_kill(s);
    return 0;
}

void th_redis_server_start(struct th_redis_server *s, const char *const *extra_args)
{
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/seckill-test-redis-XXXXXX");
    ck_assert_msg(mkdtemp(s->dir) != NULL, "mkdtemp: %s", strerror(errno));
    for (int i = 0; i < START_TRIES; i++) {
        s->port = pick_port();
        if (spawn(s, extra_args))
            return;
    }
    ck_abort_msg("redis-server did not start (is it installed?)");
}

void th_redis_server_restart(struct th_redis_server *s, const char *const *extra_args)
{
    ck_assert_int_eq(s->pid, 0);
    /* The port was ours a moment ago; retry briefly while the kernel lets go. */
    for (int i = 0; i < START_TRIES; i++)
        if (spawn(s, extra_args))
            return;
    ck_abort_msg("redis-server did not restart on port %d", s->port);
}

void th_redis_server_kill(struct th_redis_server *s)
{
    if (s->pid <= 0)
        return;
    kill(-s->pid, SIGCONT); /* a stopped process cannot be reaped before it dies */
    kill(-s->pid, SIGKILL); /* the server and the forks of its group */
    kill(s->pid, SIGKILL);  /* before its setpgid(): the server alone */
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    s->pid = 0;
}

void th_redis_server_stop(struct th_redis_server *s)
{
    th_redis_server_kill(s);
    if (s->dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "harness_redis: could not remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
}

redisContext *th_redis_server_connect(const struct th_redis_server *s)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    ck_assert_msg(c && !c->err, "connect to redis-server on port %d failed", s->port);
    redisSetTimeout(c, tv);
    return c;
}

long long th_redis_error_count(redisContext *c, const char *error)
{
    char field[64];
    snprintf(field, sizeof field, "errorstat_%s:count=", error);
    redisReply *r = redisCommand(c, "INFO errorstats");
    ck_assert(r && r->type == REDIS_REPLY_STRING);
    const char *p = strstr(r->str, field);
    long long n = p ? atoll(p + strlen(field)) : 0;
    freeReplyObject(r);
    return n;
}

void th_redis_server_wait_replica(const struct th_redis_server *replica, int timeout_ms)
{
    redisContext *c = th_redis_server_connect(replica);
    for (int waited = 0; waited < timeout_ms; waited += POLL_STEP_MS) {
        redisReply *r = redisCommand(c, "INFO replication");
        int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
        freeReplyObject(r);
        if (up) {
            redisFree(c);
            return;
        }
        th_sleep_ms(POLL_STEP_MS);
    }
    redisFree(c);
    ck_abort_msg("replica on port %d did not connect within %d ms", replica->port, timeout_ms);
}

void th_redis_pair_start(struct th_redis_server *master, struct th_redis_server *replica)
{
    th_redis_server_start(master, NULL);
    char port[16];
    snprintf(port, sizeof port, "%d", master->port);
    const char *args[] = {"--replicaof", "127.0.0.1", port, NULL};
    th_redis_server_start(replica, args);
    th_redis_server_wait_replica(replica, 10000);
}

static int cluster_node_ok(redisContext *c, int n)
{
    char known[40];
    snprintf(known, sizeof known, "cluster_known_nodes:%d\r\n", n);
    redisReply *r = redisCommand(c, "CLUSTER INFO");
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") &&
             strstr(r->str, known);
    freeReplyObject(r);
    return ok;
}

void th_redis_cluster_start(struct th_redis_cluster *c, int n)
{
    ck_assert(n >= 1 && n <= TH_CLUSTER_MAX);
    memset(c, 0, sizeof *c);
    c->n = n;
    redisContext *ctx[TH_CLUSTER_MAX];
    for (int i = 0; i < n; i++) {
        char bus[16];
        c->bus[i] = pick_port(); /* port + 10000 may be out of range */
        snprintf(bus, sizeof bus, "%d", c->bus[i]);
        const char *extra[] = {"--cluster-enabled",
                               "yes",
                               "--cluster-config-file",
                               "nodes.conf",
                               "--cluster-node-timeout",
                               "2000",
                               "--cluster-port",
                               bus,
                               NULL};
        th_redis_server_start(&c->node[i], extra);
        ctx[i] = th_redis_server_connect(&c->node[i]);
        c->first[i] = (unsigned)(16384L * i / n);
        c->last[i] = (unsigned)(16384L * (i + 1) / n - 1);
        redisReply *r =
            redisCommand(ctx[i], "CLUSTER ADDSLOTSRANGE %u %u", c->first[i], c->last[i]);
        ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "ADDSLOTSRANGE: %s", r ? r->str : "");
        freeReplyObject(r);
        r = redisCommand(ctx[i], "CLUSTER MYID");
        ck_assert(r && r->type == REDIS_REPLY_STRING);
        snprintf(c->id[i], sizeof c->id[i], "%s", r->str);
        freeReplyObject(r);
    }
    for (int i = 1; i < n; i++) {
        redisReply *r =
            redisCommand(ctx[0], "CLUSTER MEET 127.0.0.1 %d %d", c->node[i].port, c->bus[i]);
        ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "MEET: %s", r ? r->str : "");
        freeReplyObject(r);
    }
    int ok = 0;
    for (int waited = 0; waited < 20000 && !ok; waited += POLL_STEP_MS) {
        ok = 1;
        for (int i = 0; i < n; i++)
            ok = ok && cluster_node_ok(ctx[i], n);
        if (!ok)
            th_sleep_ms(POLL_STEP_MS);
    }
    for (int i = 0; i < n; i++)
        redisFree(ctx[i]);
    ck_assert_msg(ok, "the test cluster did not become ok");
}

void th_redis_cluster_stop(struct th_redis_cluster *c)
{
    for (int i = 0; i < c->n; i++)
        th_redis_server_stop(&c->node[i]);
    c->n = 0;
}

int th_redis_cluster_owner(const struct th_redis_cluster *c, unsigned slot)
{
    for (int i = 0; i < c->n; i++)
        if (slot >= c->first[i] && slot <= c->last[i])
            return i;
    return -1;
}
