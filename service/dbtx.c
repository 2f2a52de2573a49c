/*
 * dbtx: PostgreSQL transaction with completion hooks.  See dbtx.h for the
 * contract; the comments here say why the code is shaped the way it is.
 */
#include "dbtx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * How long a lost COMMIT is looked up while the server still reports the
 * transaction as 'in progress'.  A backend whose client went away aborts
 * within milliseconds once it notices; if it has not after this, the client
 * side is partitioned from a backend that is still alive, and the honest
 * answer is "unknown".
 */
#define RECONCILE_ATTEMPTS 30
#define RECONCILE_SLEEP_MS 100
/* Used only for the reconciliation connection, unless conninfo sets its own. */
#define RECONCILE_CONNECT_TIMEOUT "3"

struct dbtx_hook {
    struct dbtx_hook *next;
    dbtx_hook_fn *fn;
    void *arg;
};

struct dbtx {
    PGconn *conn;   /* borrowed from the caller */
    char *conninfo; /* own copy, NULL if none was given */
    long long txid; /* txid_current() of this transaction */
    char txid_text[24];
    int failed;              /* a statement failed: COMMIT would only roll back */
    int escaped;             /* a statement ended the transaction block behind our back */
    struct dbtx_hook *hooks; /* newest first, which is the order they run in */
    char err[512];
    char sqlstate[6];
};

static void copy_text(char *dst, size_t cap, const char *src)
{
    if (dst == NULL || cap == 0)
        return;
    snprintf(dst, cap, "%s", src != NULL ? src : "");
}

static void set_err(struct dbtx *tx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct dbtx *tx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(tx->err, sizeof(tx->err), fmt, ap);
    va_end(ap);
}

/*
 * libpq messages end in '\n' and a lost connection gives several indented
 * lines; one line with single spaces reads better in logs.
 */
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

/* Message of a failed result, falling back to the connection's message. */
static void pg_message(char *dst, size_t cap, PGconn *conn, const PGresult *res)
{
    const char *msg = res != NULL ? PQresultErrorMessage(res) : "";

    if (msg == NULL || msg[0] == '\0')
        msg = PQerrorMessage(conn);
    if (msg == NULL || msg[0] == '\0')
        msg = "unknown libpq error";
    copy_text(dst, cap, msg);
    flatten(dst);
}

static void set_sqlstate(struct dbtx *tx, const PGresult *res)
{
    const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

    copy_text(tx->sqlstate, sizeof(tx->sqlstate), state);
}

static const char *begin_sql(enum dbtx_isolation iso)
{
    /*
     * txid_current() in the same simple-query string as BEGIN: one round trip,
     * and it runs inside the block BEGIN just opened.  It also forces an xid
     * to be assigned now, which txid_status() needs later.
     */
    switch (iso) {
    case DBTX_ISO_READ_COMMITTED:
        return "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT txid_current()";
    case DBTX_ISO_REPEATABLE_READ:
        return "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current()";
    case DBTX_ISO_SERIALIZABLE:
        return "BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT txid_current()";
    case DBTX_ISO_DEFAULT:
        break;
    }
    return "BEGIN; SELECT txid_current()";
}

struct dbtx *dbtx_begin(PGconn *conn, const char *conninfo, enum dbtx_isolation iso, char *err,
                        size_t errcap)
{
    struct dbtx *tx;
    PGresult *res;
    char *end;

    copy_text(err, errcap, "");
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        copy_text(err, errcap, "dbtx_begin: connection is not usable");
        return NULL;
    }
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        /* Nesting would make our COMMIT end someone else's transaction. */
        copy_text(err, errcap, "dbtx_begin: connection is already in a transaction");
        return NULL;
    }
    /* Allocate before BEGIN so that running out of memory leaves nothing open. */
    tx = calloc(1, sizeof(*tx));
    if (tx == NULL) {
        copy_text(err, errcap, "dbtx_begin: out of memory");
        return NULL;
    }
    if (conninfo != NULL) {
        tx->conninfo = strdup(conninfo);
        if (tx->conninfo == NULL) {
            free(tx);
            copy_text(err, errcap, "dbtx_begin: out of memory");
            return NULL;
        }
    }
    tx->conn = conn;

    res = PQexec(conn, begin_sql(iso));
    if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        PQgetisnull(res, 0, 0)) {
        char msg[400];

        pg_message(msg, sizeof(msg), conn, res);
        if (err != NULL && errcap > 0)
            snprintf(err, errcap, "BEGIN failed: %s", msg);
        PQclear(res);
        goto undo;
    }
    errno = 0;
    tx->txid = strtoll(PQgetvalue(res, 0, 0), &end, 10);
    if (errno != 0 || *end != '\0' || tx->txid <= 0) {
        if (err != NULL && errcap > 0)
            snprintf(err, errcap, "BEGIN failed: bad txid_current() value '%s'",
                     PQgetvalue(res, 0, 0));
        PQclear(res);
        goto undo;
    }
    PQclear(res);
    snprintf(tx->txid_text, sizeof(tx->txid_text), "%lld", tx->txid);
    return tx;

undo:
    /* BEGIN may have worked while the SELECT failed: do not leave it open. */
    if (PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) != PQTRANS_IDLE)
        PQclear(PQexec(conn, "ROLLBACK"));
    free(tx->conninfo);
    free(tx);
    return NULL;
}

int dbtx_on_complete(struct dbtx *tx, dbtx_hook_fn *fn, void *arg)
{
    struct dbtx_hook *h;

    if (tx == NULL || fn == NULL)
        return -1;
    h = malloc(sizeof(*h));
    if (h == NULL)
        return -1;
    h->fn = fn;
    h->arg = arg;
    h->next = tx->hooks;
    tx->hooks = h;
    return 0;
}

PGresult *dbtx_exec(struct dbtx *tx, const char *sql, int nparams, const char *const *params)
{
    PGresult *res;
    ExecStatusType st;

    if (tx->failed) {
        /* Keep the first message: it says why; the server would only say "aborted". */
        if (tx->err[0] == '\0')
            set_err(tx, "transaction has already failed");
        return NULL;
    }
    res = PQexecParams(tx->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    st = res != NULL ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        if (PQtransactionStatus(tx->conn) == PQTRANS_IDLE) {
            /*
             * The statement was COMMIT, ROLLBACK or the like.  We no longer
             * know the outcome from here; it is looked up at the end so the
             * hooks still get the truth.
             */
            PQclear(res);
            tx->failed = 1;
            tx->escaped = 1;
            tx->sqlstate[0] = '\0';
            set_err(tx, "statement ended the transaction block; use dbtx_commit/dbtx_rollback");
            return NULL;
        }
        return res;
    }
    if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR || st == PGRES_BAD_RESPONSE)
        pg_message(tx->err, sizeof(tx->err), tx->conn, res);
    else
        set_err(tx, "unexpected result status %s", PQresStatus(st));
    set_sqlstate(tx, res);
    tx->failed = 1;
    PQclear(res);
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/*
 * Asks the server how transaction tx->txid ended, over a fresh connection:
 * the one the transaction ran on is broken or in an unknown state.
 * txid_status() answers from the commit log, so it is right even after the
 * backend that ran the transaction is gone.
 */
static enum dbtx_outcome reconcile(struct dbtx *tx)
{
    const char *keys[] = {"connect_timeout", "dbname", NULL};
    const char *vals[] = {RECONCILE_CONNECT_TIMEOUT, tx->conninfo, NULL};
    const char *params[1] = {tx->txid_text};
    enum dbtx_outcome outcome = DBTX_UNKNOWN;
    char why[400] = "";
    PGconn *c;

    if (tx->conninfo == NULL) {
        copy_text(why, sizeof(why), "no conninfo to look it up");
        c = NULL;
        goto out;
    }
    /* connect_timeout first: a timeout in the caller's conninfo overrides ours. */
    c = PQconnectdbParams(keys, vals, 1);
    if (c == NULL || PQstatus(c) != CONNECTION_OK) {
        if (c != NULL)
            pg_message(why, sizeof(why), c, NULL);
        else
            copy_text(why, sizeof(why), "out of memory");
        goto out;
    }
    for (int attempt = 0; attempt < RECONCILE_ATTEMPTS; attempt++) {
        PGresult *res =
            PQexecParams(c, "SELECT txid_status($1::bigint)", 1, NULL, params, NULL, NULL, 0);
        const char *status;

        if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
            pg_message(why, sizeof(why), c, res);
            PQclear(res);
            break;
        }
        if (PQgetisnull(res, 0, 0)) {
            /* Too old for the commit log: cannot happen seconds after BEGIN. */
            copy_text(why, sizeof(why), "txid_status() is NULL");
            PQclear(res);
            break;
        }
        status = PQgetvalue(res, 0, 0);
        if (strcmp(status, "committed") == 0)
            outcome = DBTX_COMMITTED;
        else if (strcmp(status, "aborted") == 0)
            outcome = DBTX_ROLLED_BACK;
        else if (strcmp(status, "in progress") == 0)
            copy_text(why, sizeof(why), "still in progress");
        else
            snprintf(why, sizeof(why), "txid_status() says '%s'", status);
        PQclear(res);
        if (outcome != DBTX_UNKNOWN || strcmp(why, "still in progress") != 0)
            break;
        sleep_ms(RECONCILE_SLEEP_MS);
    }
out:
    if (c != NULL)
        PQfinish(c);
    if (outcome == DBTX_UNKNOWN) {
        char prev[sizeof(tx->err)];

        copy_text(prev, sizeof(prev), tx->err);
        set_err(tx, "%s%soutcome of txid %s unknown: %s", prev, prev[0] != '\0' ? "; " : "",
                tx->txid_text, why);
    }
    return outcome;
}

/* Frees tx, then runs the hooks: they must not see a half-torn-down tx. */
static enum dbtx_outcome finish(struct dbtx *tx, enum dbtx_outcome outcome)
{
    struct dbtx_hook *h = tx->hooks;

    free(tx->conninfo);
    free(tx);
    while (h != NULL) {
        struct dbtx_hook *next = h->next;

        h->fn(outcome, h->arg);
        free(h);
        h = next;
    }
    return outcome;
}

/* ROLLBACK when the session is still in a block; nothing to do otherwise. */
static void rollback_if_open(struct dbtx *tx)
{
    PGTransactionStatusType ts;

    if (PQstatus(tx->conn) != CONNECTION_OK)
        return;
    ts = PQtransactionStatus(tx->conn);
    if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR)
        PQclear(PQexec(tx->conn, "ROLLBACK"));
}

enum dbtx_outcome dbtx_commit(struct dbtx *tx, char *err, size_t errcap, char *sqlstate)
{
    enum dbtx_outcome outcome;
    PGresult *res;

    if (tx->escaped) {
        outcome = reconcile(tx);
    } else if (tx->failed) {
        /* The server would answer COMMIT with ROLLBACK; say what we mean. */
        rollback_if_open(tx);
        outcome = DBTX_ROLLED_BACK;
    } else if (PQstatus(tx->conn) != CONNECTION_OK) {
        /* COMMIT was never sent, so the transaction can never commit. */
        set_err(tx, "connection lost before COMMIT");
        outcome = DBTX_ROLLED_BACK;
    } else {
        res = PQexec(tx->conn, "COMMIT");
        if (res == NULL || PQstatus(tx->conn) != CONNECTION_OK) {
            /* The COMMIT may or may not have reached the server: ask it. */
            char msg[400];

            pg_message(msg, sizeof(msg), tx->conn, res);
            set_err(tx, "connection lost during COMMIT: %s", msg);
            PQclear(res);
            outcome = reconcile(tx);
        } else if (PQresultStatus(res) == PGRES_COMMAND_OK) {
            /* An aborted block answers COMMIT with the tag ROLLBACK. */
            if (strcmp(PQcmdStatus(res), "COMMIT") == 0) {
                outcome = DBTX_COMMITTED;
            } else if (strcmp(PQcmdStatus(res), "ROLLBACK") == 0) {
                set_err(tx, "server rolled back the transaction at COMMIT");
                outcome = DBTX_ROLLED_BACK;
            } else {
                set_err(tx, "unexpected COMMIT tag '%s'", PQcmdStatus(res));
                outcome = reconcile(tx);
            }
            PQclear(res);
        } else {
            PGTransactionStatusType ts = PQtransactionStatus(tx->conn);

            pg_message(tx->err, sizeof(tx->err), tx->conn, res);
            set_sqlstate(tx, res);
            PQclear(res);
            if (ts == PQTRANS_IDLE) {
                /* Refused COMMIT (e.g. 40001): the server ended the block without committing. */
                outcome = DBTX_ROLLED_BACK;
            } else if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR) {
                rollback_if_open(tx);
                outcome = DBTX_ROLLED_BACK;
            } else {
                outcome = reconcile(tx);
            }
        }
    }
    if (outcome == DBTX_COMMITTED) {
        copy_text(err, errcap, "");
        copy_text(sqlstate, 6, "");
    } else {
        copy_text(err, errcap, tx->err[0] != '\0' ? tx->err : "rolled back");
        copy_text(sqlstate, 6, tx->sqlstate);
    }
    return finish(tx, outcome);
}

enum dbtx_outcome dbtx_rollback(struct dbtx *tx)
{
    if (tx->escaped)
        return finish(tx, reconcile(tx));
    rollback_if_open(tx);
    return finish(tx, DBTX_ROLLED_BACK);
}

const char *dbtx_error(const struct dbtx *tx)
{
    return tx->err;
}

const char *dbtx_sqlstate(const struct dbtx *tx)
{
    return tx->sqlstate;
}

long long dbtx_txid(const struct dbtx *tx)
{
    return tx->txid;
}

const char *dbtx_outcome_str(enum dbtx_outcome outcome)
{
    switch (outcome) {
    case DBTX_COMMITTED:
        return "committed";
    case DBTX_ROLLED_BACK:
        return "rolled_back";
    case DBTX_UNKNOWN:
        break;
    }
    return "unknown";
}
