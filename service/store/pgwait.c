/*
 * pgwait: bounded PostgreSQL round trips.  See pgwait.h for the contract; the
 * comments here say why the code is shaped the way it is.  The loop is
 * libpq's documented non-blocking pattern (pgbouncer's test/asynctest.c):
 * send, PQflush until done, then PQconsumeInput / PQisBusy / PQgetResult
 * until NULL, never calling a libpq function that could block.
 */
#include "store/pgwait.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/fault.h"
#include <rlock/rlock.h>

/* How often an abort flag is looked at while waiting: the "at once" of a
 * lost lock, at the cost of a few wake-ups a second during a statement. */
#define ABORT_CHECK_MS 20
/* PQconsumeInput calls that may be needed to read the EOF of a connection we
 * closed when the fallback (shutdown) had to be used: data already queued
 * is read first.  Each call empties libpq's buffer of it. */
#define ABANDON_READS 64

static atomic_int default_timeout_ms = PGWAIT_FALLBACK_TIMEOUT_MS;
static atomic_int host_timeout_ms = PGWAIT_FALLBACK_HOST_TIMEOUT_MS;
/* Of a multi-host connection string, the position of the host that last gave
 * a connection: tried first next time.  Only an order hint (every host is
 * still tried, and each is checked by target_session_attrs). */
static atomic_int preferred_host;
/* The deadline of the request the thread works for (0: none). */
static _Thread_local int64_t thread_deadline_ms;

void pgwait_set_default_timeout_ms(int ms)
{
    if (ms > 0)
        atomic_store(&default_timeout_ms, ms);
}

void pgwait_set_host_timeout_ms(int ms)
{
    if (ms > 0)
        atomic_store(&host_timeout_ms, ms);
}

int pgwait_default_timeout_ms(void)
{
    return atomic_load(&default_timeout_ms);
}

void pgwait_set_thread_deadline(int64_t deadline_ms)
{
    thread_deadline_ms = deadline_ms > 0 ? deadline_ms : 0;
}

void pgwait_start(struct pgwait *w, int timeout_ms, const atomic_int *abort)
{
    int64_t now = rlock_mono_ms();
    w->timeout_ms = timeout_ms > 0 ? timeout_ms : pgwait_default_timeout_ms();
    w->deadline_ms = now + w->timeout_ms;
    w->capped = thread_deadline_ms > 0 && thread_deadline_ms < w->deadline_ms;
    if (w->capped) {
        w->deadline_ms = thread_deadline_ms;
        w->timeout_ms = thread_deadline_ms > now ? (int)(thread_deadline_ms - now) : 0;
    }
    w->abort = abort;
    w->err[0] = '\0';
}

int64_t pgwait_left_ms(const struct pgwait *w)
{
    int64_t left = w->deadline_ms - rlock_mono_ms();
    return left > 0 ? left : 0;
}

/* A budget cut to nothing by the thread's deadline: nothing may be sent. */
static int past_deadline(struct pgwait *w)
{
    if (!w->capped || w->deadline_ms > rlock_mono_ms())
        return 0;
    snprintf(w->err, sizeof w->err, "request deadline passed");
    return 1;
}

static void set_err(struct pgwait *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct pgwait *w, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(w->err, sizeof(w->err), fmt, ap);
    va_end(ap);
}

/* libpq messages end in '\n' and a lost connection gives several indented
 * lines; one line with single spaces reads better in logs. */
static void flatten(char *s)
{
    char *out = s;

    for (const char *p = s; *p != '\0'; p++) {
        int space = *p == '\n' || *p == '\r' || *p == '\t' || *p == ' ';

        if (!space)
            *out++ = *p;
        else if (out > s && out[-1] != ' ')
            *out++ = ' ';
    }
    if (out > s && out[-1] == ' ')
        out--;
    *out = '\0';
}

void pgwait_message(char *dst, size_t cap, PGconn *conn, const PGresult *res)
{
    const char *msg = res != NULL ? PQresultErrorMessage(res) : "";

    if (dst == NULL || cap == 0)
        return;
    if ((msg == NULL || msg[0] == '\0') && conn != NULL)
        msg = PQerrorMessage(conn);
    if (msg == NULL || msg[0] == '\0')
        msg = "unknown libpq error";
    snprintf(dst, cap, "%s", msg);
    flatten(dst);
}

static int aborted(const struct pgwait *w)
{
    return w->abort != NULL && atomic_load(w->abort) != 0;
}

/*
 * Waits until fd is ready for 'events' (or has an error or hang-up, which
 * libpq then reports).  Returns 0, or -1 with w->err set when the deadline
 * passed, the abort flag was raised, or poll() failed.
 */
static int wait_ready(struct pgwait *w, int fd, short events)
{
    for (;;) {
        if (aborted(w)) {
            set_err(w, "abandoned on request after %d ms",
                    w->timeout_ms - (int)(w->deadline_ms - rlock_mono_ms()));
            return -1;
        }
        int64_t left = w->deadline_ms - rlock_mono_ms();
        if (left <= 0) {
            set_err(w, "no answer within %d ms%s", w->timeout_ms,
                    w->capped ? " (the request's deadline)" : "");
            return -1;
        }
        if (w->abort != NULL && left > ABORT_CHECK_MS)
            left = ABORT_CHECK_MS;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR) {
            set_err(w, "poll: %s", strerror(errno));
            return -1;
        }
    }
}

/*
 * Closes conn's socket under libpq, which owns it, without waiting for the
 * server.  A socket whose peer is already gone is put in its place with
 * dup2(): that closes the server connection (the server sees EOF or a reset
 * when it next looks) and libpq's next read finds EOF, drops the descriptor
 * and marks the connection CONNECTION_BAD, so nothing is closed twice and
 * the owner's PQfinish() stays the one that frees it.
 */
static void abandon(PGconn *conn)
{
    int fd = PQsocket(conn);
    int pair[2];

    if (fd >= 0) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0) {
            close(pair[1]);
            if (dup2(pair[0], fd) < 0)
                (void)shutdown(fd, SHUT_RDWR);
            close(pair[0]);
        } else {
            (void)shutdown(fd, SHUT_RDWR);
        }
    }
    for (int i = 0; i < ABANDON_READS && PQstatus(conn) == CONNECTION_OK; i++)
        (void)PQconsumeInput(conn);
}

void pgwait_close(PGconn *conn)
{
    if (conn != NULL && PQstatus(conn) == CONNECTION_OK)
        abandon(conn);
}

int pgwait_wrong_server(const PGresult *r)
{
    static const char *const states[] = {"25006", "57P01", "57P02", "57P03"};
    const char *st = r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

    for (size_t i = 0; st != NULL && i < sizeof states / sizeof states[0]; i++)
        if (strcmp(st, states[i]) == 0)
            return 1;
    return 0;
}

int pgwait_on_standby(const PGconn *conn)
{
    const char *v = conn != NULL ? PQparameterStatus(conn, "in_hot_standby") : NULL;
    return v != NULL && strcmp(v, "on") == 0;
}

/* One connection attempt, as libpq makes it, within w's deadline. */
static PGconn *connect_once(struct pgwait *w, const char *const *keys, const char *const *vals)
{
    PGconn *c;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;

    w->err[0] = '\0';
    if (aborted(w)) {
        set_err(w, "abandoned on request before connecting");
        return NULL;
    }
    if (past_deadline(w))
        return NULL;
    c = PQconnectStartParams(keys, vals, 1);
    if (c == NULL) {
        set_err(w, "out of memory");
        return NULL;
    }
    while (PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
        /* The socket may change between calls (several hosts, SSL retry). */
        short events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT;
        if (wait_ready(w, PQsocket(c), events) != 0) {
            char why[sizeof(w->err)];

            snprintf(why, sizeof(why), "%s", w->err);
            set_err(w, "connect: %s", why);
            PQfinish(c); /* sends nothing on a connection still being made */
            return NULL;
        }
        st = PQconnectPoll(c);
    }
    if (PQstatus(c) != CONNECTION_OK) {
        char why[200];

        pgwait_message(why, sizeof(why), c, NULL);
        set_err(w, "connect: %s", why);
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* Elements of a comma-separated libpq list ("" or NULL: none). */
static int list_len(const char *list)
{
    int n = list != NULL && list[0] != '\0';
    for (const char *p = list; n && *p; p++)
        n += *p == ',';
    return n;
}

/* Element i of a comma-separated list into out; 0, or -1 when it is empty
 * (libpq's "the default"), absent or too long. */
static int list_item(const char *list, int i, char *out, size_t cap)
{
    const char *p = list;
    for (; i > 0 && p; i--) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (!p)
        return -1;
    size_t n = strcspn(p, ",");
    if (n == 0 || n >= cap)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

/* The host, hostaddr and port lists keys/vals give a connection (the
 * expanded dbname, later keys, else the environment, as libpq reads them).
 * Each out[i] is allocated or NULL; the caller frees them. */
static void host_lists(const char *const *keys, const char *const *vals, char *out[3])
{
    static const char *const names[3] = {"host", "hostaddr", "port"};
    static const char *const envs[3] = {"PGHOST", "PGHOSTADDR", "PGPORT"};
    int expanded = 0;

    for (int k = 0; k < 3; k++)
        out[k] = NULL;
    for (int i = 0; keys[i] != NULL; i++) {
        if (vals[i] == NULL || vals[i][0] == '\0')
            continue;
        if (strcmp(keys[i], "dbname") == 0 && !expanded) {
            expanded = 1;
            PQconninfoOption *opts = PQconninfoParse(vals[i], NULL);
            for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++)
                for (int k = 0; k < 3; k++)
                    if (o->val != NULL && o->val[0] != '\0' && strcmp(o->keyword, names[k]) == 0) {
                        free(out[k]);
                        out[k] = xstrdup(o->val);
                    }
            PQconninfoFree(opts);
            continue;
        }
        for (int k = 0; k < 3; k++)
            if (strcmp(keys[i], names[k]) == 0) {
                free(out[k]);
                out[k] = xstrdup(vals[i]);
            }
    }
    for (int k = 0; k < 3; k++)
        if (out[k] == NULL && getenv(envs[k]) != NULL)
            out[k] = xstrdup(getenv(envs[k]));
}

#define MAX_HOSTS 16
#define MAX_ITEM 256

PGconn *pgwait_connect(struct pgwait *w, const char *const *keys, const char *const *vals)
{
    char *lists[3];
    int n = 0, nkeys = 0;

    host_lists(keys, vals, lists);
    for (int k = 0; k < 3; k++)
        if (list_len(lists[k]) > n)
            n = list_len(lists[k]);
    while (keys[nkeys] != NULL)
        nkeys++;
    /* One host, or a list this does not split (an empty element means
     * libpq's default): libpq's own order, with the whole budget. */
    char item[3][MAX_ITEM];
    int split = n > 1 && n <= MAX_HOSTS;
    for (int i = 0; split && i < n; i++)
        for (int k = 0; split && k < 3; k++)
            split = list_len(lists[k]) <= 1 ||
                    (list_len(lists[k]) == n && list_item(lists[k], i, item[k], MAX_ITEM) == 0);
    if (!split) {
        for (int k = 0; k < 3; k++)
            free(lists[k]);
        return connect_once(w, keys, vals);
    }
    const char **k2 = xcalloc((size_t)nkeys + 4, sizeof *k2);
    const char **v2 = xcalloc((size_t)nkeys + 4, sizeof *v2);
    PGconn *c = NULL;
    memcpy(k2, keys, (size_t)nkeys * sizeof *k2);
    memcpy(v2, vals, (size_t)nkeys * sizeof *v2);
    static const char *const names[3] = {"host", "hostaddr", "port"};
    int first = atomic_load(&preferred_host);
    char why[sizeof(w->err) + 32] = "";
    for (int j = 0; j < n && c == NULL; j++) {
        int i = (first + j) % n;
        int m = nkeys;
        /* Keys after dbname override what it expands to: this host alone. */
        for (int k = 0; k < 3; k++)
            if (list_len(lists[k]) == n && list_item(lists[k], i, item[k], MAX_ITEM) == 0) {
                k2[m] = names[k];
                v2[m++] = item[k];
            }
        k2[m] = NULL;
        v2[m] = NULL;
        struct pgwait one = *w;
        int64_t share = rlock_mono_ms() + atomic_load(&host_timeout_ms);
        if (share < one.deadline_ms) {
            one.deadline_ms = share;
            one.timeout_ms = atomic_load(&host_timeout_ms);
        }
        c = connect_once(&one, k2, v2);
        if (c != NULL) {
            atomic_store(&preferred_host, i);
            break;
        }
        snprintf(why, sizeof why, "%s (host %d of %d)", one.err, i + 1, n);
        if (aborted(w) || w->deadline_ms <= rlock_mono_ms())
            break;
    }
    if (c == NULL)
        set_err(w, "%s", why[0] ? why : "connect: no host tried");
    free(k2);
    free(v2);
    for (int k = 0; k < 3; k++)
        free(lists[k]);
    return c;
}

/* Reads until a result (or the end of one statement's results, NULL) can be
 * taken without blocking.  Returns 0, or -1 after abandoning conn. */
static int wait_result(struct pgwait *w, PGconn *conn)
{
    while (PQisBusy(conn) && PQstatus(conn) == CONNECTION_OK) {
        if (wait_ready(w, PQsocket(conn), POLLIN) != 0) {
            abandon(conn);
            return -1;
        }
        if (!PQconsumeInput(conn) && PQstatus(conn) == CONNECTION_OK)
            abandon(conn); /* a read error libpq did not count as fatal */
    }
    return 0;
}

/* Sends, then collects every result as PQexec would (see pgwait.h). */
static PGresult *run(struct pgwait *w, PGconn *conn, const char *sql, int simple, int nparams,
                     const char *const *params)
{
    PGresult *last = NULL;
    int was_nonblocking;
    int f;

    w->err[0] = '\0';
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        set_err(w, "connection is not usable");
        return NULL;
    }
    if (aborted(w)) {
        set_err(w, "abandoned on request before sending");
        return NULL;
    }
    if (past_deadline(w))
        return NULL;
    /* Non-blocking, or PQsendQuery could block on a full send buffer. */
    was_nonblocking = PQisnonblocking(conn);
    if (!was_nonblocking && PQsetnonblocking(conn, 1) != 0) {
        pgwait_message(w->err, sizeof(w->err), conn, NULL);
        return NULL;
    }
    if (!(simple ? PQsendQuery(conn, sql)
                 : PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))) {
        pgwait_message(w->err, sizeof(w->err), conn, NULL);
        if (!was_nonblocking && PQstatus(conn) == CONNECTION_OK)
            (void)PQsetnonblocking(conn, 0);
        return NULL;
    }
    /* The server may answer before it read everything (an error): read too. */
    while ((f = PQflush(conn)) == 1) {
        if (wait_ready(w, PQsocket(conn), POLLIN | POLLOUT) != 0)
            goto give_up;
        if (!PQconsumeInput(conn))
            break;
    }
    for (;;) {
        if (wait_result(w, conn) != 0) {
            PQclear(last);
            return NULL;
        }
        /* Not busy, or the connection is gone: PQgetResult cannot block. */
        PGresult *r = PQgetResult(conn);
        if (r == NULL)
            break;
        PQclear(last);
        last = r;
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH ||
            PQstatus(conn) == CONNECTION_BAD)
            break;
    }
    if (!was_nonblocking && PQstatus(conn) == CONNECTION_OK)
        (void)PQsetnonblocking(conn, 0);
    /* A standby or a server going down: this session is of no more use. */
    if (pgwait_wrong_server(last) && PQstatus(conn) == CONNECTION_OK)
        abandon(conn);
    return last;

give_up:
    PQclear(last);
    abandon(conn);
    return NULL;
}

PGresult *pgwait_query(struct pgwait *w, PGconn *conn, const char *sql)
{
    return run(w, conn, sql, 1, 0, NULL);
}

PGresult *pgwait_params(struct pgwait *w, PGconn *conn, const char *sql, int nparams,
                        const char *const *params)
{
    return run(w, conn, sql, 0, nparams, params);
}

int pgwait_pipeline(struct pgwait *w, PGconn *conn, size_t n, const struct pgwait_stmt *stmts,
                    PGresult **res)
{
    int was_nonblocking, f;
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        res[i] = NULL;
    w->err[0] = '\0';
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK || n == 0) {
        set_err(w, "connection is not usable");
        return -1;
    }
    if (aborted(w)) {
        set_err(w, "abandoned on request before sending");
        return -1;
    }
    if (past_deadline(w))
        return -1;
    /* The paused time is not PostgreSQL's: the budget restarts. */
    if (w->abort && fault_pause("pg_send_under_lock"))
        w->deadline_ms = rlock_mono_ms() + w->timeout_ms;
    was_nonblocking = PQisnonblocking(conn);
    if ((!was_nonblocking && PQsetnonblocking(conn, 1) != 0) || !PQenterPipelineMode(conn)) {
        pgwait_message(w->err, sizeof(w->err), conn, NULL);
        if (!was_nonblocking && PQstatus(conn) == CONNECTION_OK)
            (void)PQsetnonblocking(conn, 0);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const struct pgwait_stmt *q = &stmts[i];
        int sent =
            q->name && q->prepare ? PQsendPrepare(conn, q->name, q->sql, q->nparams, NULL)
            : q->name ? PQsendQueryPrepared(conn, q->name, q->nparams, q->params, NULL, NULL, 0)
                      : PQsendQueryParams(conn, q->sql, q->nparams, NULL, q->params, NULL, NULL, 0);
        if (!sent) {
            /* Part of the pipeline may be queued: the session cannot be
             * trusted to be where the caller thinks. */
            pgwait_message(w->err, sizeof(w->err), conn, NULL);
            abandon(conn);
            return -1;
        }
    }
    if (!PQpipelineSync(conn)) {
        pgwait_message(w->err, sizeof(w->err), conn, NULL);
        abandon(conn);
        return -1;
    }
    while ((f = PQflush(conn)) == 1) {
        if (wait_ready(w, PQsocket(conn), POLLIN | POLLOUT) != 0) {
            abandon(conn);
            goto failed;
        }
        if (!PQconsumeInput(conn))
            break;
    }
    /* Each statement's result, then NULL; after the last, the Sync. */
    for (;;) {
        if (wait_result(w, conn) != 0)
            goto failed;
        if (PQstatus(conn) == CONNECTION_BAD) {
            pgwait_message(w->err, sizeof(w->err), conn, NULL);
            goto failed;
        }
        PGresult *r = PQgetResult(conn);
        if (r == NULL) {
            if (k < n && res[k] != NULL)
                k++;
            continue;
        }
        if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            break;
        }
        if (k < n && res[k] == NULL)
            res[k] = r;
        else
            PQclear(r);
    }
    if (k != n) {
        set_err(w, "pipeline: %zu results for %zu statements", k, n);
        goto failed;
    }
    (void)PQexitPipelineMode(conn);
    if (!was_nonblocking && PQstatus(conn) == CONNECTION_OK)
        (void)PQsetnonblocking(conn, 0);
    for (size_t i = 0; i < n && PQstatus(conn) == CONNECTION_OK; i++)
        if (pgwait_wrong_server(res[i]))
            abandon(conn); /* as in run() */
    return 0;

failed:
    if (w->err[0] == '\0')
        set_err(w, "pipeline: connection lost");
    for (size_t i = 0; i < n; i++) {
        PQclear(res[i]);
        res[i] = NULL;
    }
    if (PQstatus(conn) == CONNECTION_OK)
        abandon(conn);
    return -1;
}
