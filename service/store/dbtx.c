/*
 * dbtx: PostgreSQL transaction with completion hooks.  See dbtx.h for the
 * contract; the comments here say why the code is shaped the way it is.
 */
#include "store/dbtx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/embedded.h"
#include "store/pgwait.h"

/*
 * How long a lost COMMIT is looked up while the primary still reports the
 * transaction as 'in progress' (or committed but waiting for its
 * synchronous standby).  A backend whose client went away aborts within
 * milliseconds once it notices; if it has not after this, the client side is
 * partitioned from a backend that is still alive, or the synchronous standby
 * is not confirming, and the honest answer is "unknown".  The same pause
 * separates the tries to find a primary to ask.
 */
#define RECONCILE_ATTEMPTS 30
#define RECONCILE_SLEEP_MS 100

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
    const char *begin;       /* dbtx_begin_deferred: the BEGIN still to send, else NULL */
    struct dbtx_hook *hooks; /* newest first, which is the order they run in */
    const atomic_int *abort; /* dbtx_set_abort_flag(), NULL if none */
    char *witness;           /* dbtx_set_witness(): its sql, NULL if none */
    char **witness_params;   /* its parameters (copies), then the txid's slot */
    int witness_n;
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

static void set_sqlstate(struct dbtx *tx, const PGresult *res)
{
    const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

    copy_text(tx->sqlstate, sizeof(tx->sqlstate), state);
}

/* Why a round trip failed: the result's message, or pgwait's when there was
 * no result (no answer in time, abandoned, not sent). */
static void wait_message(char *dst, size_t cap, PGconn *conn, const PGresult *res,
                         const struct pgwait *w)
{
    if (res == NULL && w->err[0] != '\0')
        copy_text(dst, cap, w->err);
    else
        pgwait_message(dst, cap, conn, res);
}

/* ROLLBACK when the session is still in a block; nothing to do otherwise.
 * Bounded, but not by the abort flag: a ROLLBACK is what an abort wants, and
 * one that gets no answer closes the connection, which rolls back too. */
static void rollback_if_open(PGconn *conn)
{
    PGTransactionStatusType ts;
    struct pgwait w;
    PGresult *r;

    if (PQstatus(conn) != CONNECTION_OK)
        return;
    ts = PQtransactionStatus(conn);
    if (ts != PQTRANS_INTRANS && ts != PQTRANS_INERROR)
        return;
    pgwait_start(&w, 0, NULL);
    r = pgwait_query(&w, conn, "ROLLBACK");
    /* Not sent (the request's deadline had passed): closing rolls back too,
     * and the next user of the connection must not find the block open. */
    if (r == NULL && PQstatus(conn) == CONNECTION_OK)
        pgwait_close(conn);
    PQclear(r);
}

/* BEGIN alone, for a deferred transaction's first pipeline. */
static const char *begin_only_sql(enum dbtx_isolation iso)
{
    switch (iso) {
    case DBTX_ISO_READ_COMMITTED:
        return "BEGIN ISOLATION LEVEL READ COMMITTED";
    case DBTX_ISO_REPEATABLE_READ:
        return "BEGIN ISOLATION LEVEL REPEATABLE READ";
    case DBTX_ISO_SERIALIZABLE:
        return "BEGIN ISOLATION LEVEL SERIALIZABLE";
    case DBTX_ISO_DEFAULT:
        break;
    }
    return "BEGIN";
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

/* The checks and the allocation of both begins.  Returns tx, or NULL with err. */
static struct dbtx *tx_new(PGconn *conn, const char *conninfo, char *err, size_t errcap)
{
    struct dbtx *tx;

    copy_text(err, errcap, "");
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        copy_text(err, errcap, "dbtx_begin: connection is not usable");
        return NULL;
    }
    if (pgwait_on_standby(conn)) {
        /* It could only fail (no transaction id in recovery): close it so
         * that its owner reconnects, to the primary. */
        pgwait_close(conn);
        copy_text(err, errcap, "dbtx_begin: the server is a standby");
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
    return tx;
}

struct dbtx *dbtx_begin_deferred(PGconn *conn, const char *conninfo, enum dbtx_isolation iso,
                                 char *err, size_t errcap)
{
    struct dbtx *tx = tx_new(conn, conninfo, err, errcap);
    if (tx != NULL)
        tx->begin = begin_only_sql(iso);
    return tx;
}

struct dbtx *dbtx_begin(PGconn *conn, const char *conninfo, enum dbtx_isolation iso, char *err,
                        size_t errcap)
{
    struct pgwait w;
    PGresult *res;
    char *end;
    struct dbtx *tx = tx_new(conn, conninfo, err, errcap);

    if (tx == NULL)
        return NULL;
    pgwait_start(&w, 0, NULL);
    res = pgwait_query(&w, conn, begin_sql(iso));
    if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        PQgetisnull(res, 0, 0)) {
        char msg[400];

        wait_message(msg, sizeof(msg), conn, res, &w);
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
    /* BEGIN may have worked while the SELECT failed: do not leave it open.
     * (No answer in time closed the connection, which ends it too.) */
    rollback_if_open(conn);
    free(tx->conninfo);
    free(tx);
    return NULL;
}

static void witness_free(struct dbtx *tx)
{
    for (int i = 0; tx->witness_params != NULL && i < tx->witness_n; i++)
        free(tx->witness_params[i]);
    free(tx->witness_params);
    free(tx->witness);
    tx->witness = NULL;
    tx->witness_params = NULL;
    tx->witness_n = 0;
}

int dbtx_set_witness(struct dbtx *tx, const char *sql, int nparams, const char *const *params)
{
    witness_free(tx);
    tx->witness = strdup(sql);
    tx->witness_params = calloc((size_t)nparams + 1, sizeof(*tx->witness_params));
    int ok = tx->witness != NULL && tx->witness_params != NULL;
    for (int i = 0; ok && i < nparams; i++) {
        tx->witness_n = i + 1;
        ok = params[i] == NULL || (tx->witness_params[i] = strdup(params[i])) != NULL;
    }
    if (!ok) {
        witness_free(tx);
        return -1;
    }
    tx->witness_n = nparams;
    return 0;
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

void dbtx_set_abort_flag(struct dbtx *tx, const atomic_int *flag)
{
    tx->abort = flag;
}

PGresult *dbtx_exec(struct dbtx *tx, const char *sql, int nparams, const char *const *params)
{
    struct pgwait w;
    PGresult *res;
    ExecStatusType st;

    if (tx->begin != NULL) { /* BEGIN goes in the same round trip */
        struct pgwait_stmt one = {.sql = sql, .nparams = nparams, .params = params};
        return dbtx_exec_pipeline(tx, 1, &one, &res) == 0 ? res : NULL;
    }

    if (tx->failed) {
        /* Keep the first message: it says why; the server would only say "aborted". */
        if (tx->err[0] == '\0')
            set_err(tx, "transaction has already failed");
        return NULL;
    }
    pgwait_start(&w, 0, tx->abort);
    res = pgwait_params(&w, tx->conn, sql, nparams, params);
    if (res == NULL) {
        /*
         * No answer in time, or the abort flag was raised: pgwait closed the
         * connection, so the transaction can never commit (or, when nothing
         * was sent, the ROLLBACK at the end ends it).
         */
        copy_text(tx->err, sizeof(tx->err), w.err);
        tx->sqlstate[0] = '\0';
        tx->failed = 1;
        return NULL;
    }
    st = PQresultStatus(res);
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
        pgwait_message(tx->err, sizeof(tx->err), tx->conn, res);
    else
        set_err(tx, "unexpected result status %s", PQresStatus(st));
    set_sqlstate(tx, res);
    tx->failed = 1;
    PQclear(res);
    return NULL;
}

/* dbtx_exec_pipeline of a deferred transaction's first statements: BEGIN
 * and txid_current() lead the same pipeline, so the transaction opens
 * without a round trip of its own. */
static int pipeline_with_begin(struct dbtx *tx, size_t n, const struct pgwait_stmt *stmts,
                               PGresult **res)
{
    struct pgwait_stmt *all = calloc(n + 2, sizeof(*all));
    PGresult **out = calloc(n + 2, sizeof(*out));
    char *end;

    if (all == NULL || out == NULL) {
        free(all);
        free(out);
        set_err(tx, "out of memory");
        tx->failed = 1;
        return -1;
    }
    all[0] = (struct pgwait_stmt){.sql = tx->begin};
    all[1] = (struct pgwait_stmt){.sql = "SELECT txid_current()"};
    memcpy(all + 2, stmts, n * sizeof(*stmts));
    tx->begin = NULL; /* sent from here on: a failure leaves it to ROLLBACK */
    int rc = dbtx_exec_pipeline(tx, n + 2, all, out);
    if (rc == 0) {
        errno = 0;
        tx->txid = PQntuples(out[1]) == 1 ? strtoll(PQgetvalue(out[1], 0, 0), &end, 10) : 0;
        if (errno != 0 || tx->txid <= 0 || *end != '\0') {
            set_err(tx, "BEGIN failed: bad txid_current() value");
            tx->failed = 1;
            rc = -1;
        } else {
            snprintf(tx->txid_text, sizeof(tx->txid_text), "%lld", tx->txid);
        }
    }
    for (size_t i = 0; i < n; i++)
        res[i] = rc == 0 ? out[i + 2] : NULL;
    PQclear(out[0]);
    PQclear(out[1]);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            PQclear(out[i + 2]);
    free(out);
    free(all);
    return rc;
}

int dbtx_exec_pipeline(struct dbtx *tx, size_t n, const struct pgwait_stmt *stmts, PGresult **res)
{
    struct pgwait w;

    for (size_t i = 0; i < n; i++)
        res[i] = NULL;
    if (tx->failed) {
        if (tx->err[0] == '\0')
            set_err(tx, "transaction has already failed");
        return -1;
    }
    if (tx->begin != NULL)
        return pipeline_with_begin(tx, n, stmts, res);
    pgwait_start(&w, 0, tx->abort);
    if (pgwait_pipeline(&w, tx->conn, n, stmts, res) != 0) {
        copy_text(tx->err, sizeof(tx->err), w.err);
        tx->sqlstate[0] = '\0';
        tx->failed = 1;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        ExecStatusType st = PQresultStatus(res[i]);
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
            continue;
        /* the first failure says why; the ones after it were only aborted */
        if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR || st == PGRES_BAD_RESPONSE)
            pgwait_message(tx->err, sizeof(tx->err), tx->conn, res[i]);
        else
            set_err(tx, "unexpected result status %s", PQresStatus(st));
        set_sqlstate(tx, res[i]);
        tx->failed = 1;
        break;
    }
    if (!tx->failed && PQtransactionStatus(tx->conn) == PQTRANS_IDLE) {
        /* one of them ended the transaction block: see dbtx_exec */
        tx->failed = 1;
        tx->escaped = 1;
        tx->sqlstate[0] = '\0';
        set_err(tx, "statement ended the transaction block; use dbtx_commit/dbtx_rollback");
    }
    if (tx->failed) {
        for (size_t i = 0; i < n; i++) {
            PQclear(res[i]);
            res[i] = NULL;
        }
        return -1;
    }
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The lookup: sql/txid_fate.sql says what each answer means. */

/* Runs tx's witness on c (see dbtx_set_witness).  Returns the outcome it
 * proves, or DBTX_UNKNOWN with why set. */
static enum dbtx_outcome witness_says(struct dbtx *tx, PGconn *c, char *why, size_t cap)
{
    struct pgwait w;
    enum dbtx_outcome outcome = DBTX_UNKNOWN;

    tx->witness_params[tx->witness_n] = tx->txid_text; /* borrowed, never freed */
    pgwait_start(&w, 0, NULL);
    PGresult *res = pgwait_params(&w, c, tx->witness, tx->witness_n + 1,
                                  (const char *const *)tx->witness_params);
    tx->witness_params[tx->witness_n] = NULL;
    if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) >= 1 &&
        !PQgetisnull(res, 0, 0)) {
        outcome = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? DBTX_COMMITTED : DBTX_ROLLED_BACK;
        if (outcome == DBTX_ROLLED_BACK)
            copy_text(why, cap, "its id is committed, but as another transaction's");
    } else {
        char msg[300];

        wait_message(msg, sizeof(msg), c, res, &w);
        snprintf(why, cap, "committed, but the witness failed: %s", msg);
    }
    PQclear(res);
    return outcome;
}

/*
 * Asks how transaction tx->txid ended, over a fresh connection: the one the
 * transaction ran on is broken or in an unknown state.  txid_status() answers
 * from the commit log, so it is right even after the backend that ran the
 * transaction is gone, and on a standby promoted since (transaction ids and
 * the commit log are replicated with everything else).
 *
 * Only a primary's answer counts (see sql/txid_fate.sql).  Finding one has one
 * client deadline (the process default): a connect refused, a server that
 * is only a standby (target_session_attrs=read-write in the conninfo, or
 * 'standby' here), or a connection lost while asking are tried again every
 * RECONCILE_SLEEP_MS until then, so a failover or switchover that completes
 * within it settles the transaction on the new primary.  A server that does
 * not answer in time ends the lookup: unknown.
 */
static enum dbtx_outcome reconcile(struct dbtx *tx)
{
    const char *keys[] = {"dbname", NULL};
    const char *vals[] = {tx->conninfo, NULL};
    const char *params[1] = {tx->txid_text};
    enum dbtx_outcome outcome = DBTX_UNKNOWN;
    char why[400] = "";
    struct pgwait find, w;
    PGconn *c = NULL;
    int asked = 0;

    if (tx->conninfo == NULL) {
        copy_text(why, sizeof(why), "no conninfo to look it up");
        goto out;
    }
    pgwait_start(&find, 0, NULL);
    for (;;) {
        if (c == NULL) {
            c = pgwait_connect(&find, keys, vals);
            if (c == NULL) {
                copy_text(why, sizeof(why), find.err);
                if (pgwait_left_ms(&find) <= RECONCILE_SLEEP_MS)
                    break;
                sleep_ms(RECONCILE_SLEEP_MS);
                continue;
            }
        }
        /* Each question has the client deadline too: the server that did
         * not answer the COMMIT may not answer this either. */
        pgwait_start(&w, 0, NULL);
        PGresult *res = pgwait_params(&w, c, sql_text("txid_fate"), 1, params);
        if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
            int lost = res != NULL && PQstatus(c) != CONNECTION_OK;

            wait_message(why, sizeof(why), c, res, &w);
            PQclear(res);
            /* A server that went down while asked (mid-failover): ask the
             * next primary.  One that did not answer: stop. */
            if (!lost || pgwait_left_ms(&find) <= RECONCILE_SLEEP_MS)
                break;
            PQfinish(c);
            c = NULL;
            sleep_ms(RECONCILE_SLEEP_MS);
            continue;
        }
        if (PQgetisnull(res, 0, 0)) {
            copy_text(why, sizeof(why), "txid_status() is NULL: not the cluster that ran it?");
            PQclear(res);
            break;
        }
        char status[16];
        copy_text(status, sizeof(status), PQgetvalue(res, 0, 0));
        PQclear(res);
        if (strcmp(status, "committed") == 0) {
            outcome = tx->witness != NULL ? witness_says(tx, c, why, sizeof(why)) : DBTX_COMMITTED;
            break;
        }
        if (strcmp(status, "aborted") == 0 || strcmp(status, "future") == 0) {
            outcome = DBTX_ROLLED_BACK;
            break;
        }
        if (strcmp(status, "standby") == 0) {
            copy_text(why, sizeof(why), "only a standby answered");
            PQfinish(c);
            c = NULL;
            if (pgwait_left_ms(&find) <= RECONCILE_SLEEP_MS)
                break;
        } else if (strcmp(status, "in progress") == 0 || strcmp(status, "syncwait") == 0) {
            copy_text(why, sizeof(why),
                      status[0] == 'i' ? "still in progress"
                                       : "committed on the primary, not yet on its synchronous "
                                         "standby");
            if (++asked >= RECONCILE_ATTEMPTS)
                break;
        } else {
            snprintf(why, sizeof(why), "txid_status() says '%s'", status);
            break;
        }
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

    witness_free(tx);
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

enum dbtx_outcome dbtx_commit(struct dbtx *tx, char *err, size_t errcap, char *sqlstate)
{
    enum dbtx_outcome outcome;
    struct pgwait w;
    PGresult *res;

    if (tx->begin != NULL) {
        /* deferred and never used: nothing was opened, nothing to commit */
        outcome = DBTX_COMMITTED;
    } else if (tx->escaped) {
        outcome = reconcile(tx);
    } else if (tx->failed) {
        /* The server would answer COMMIT with ROLLBACK; say what we mean. */
        rollback_if_open(tx->conn);
        outcome = DBTX_ROLLED_BACK;
    } else if (PQstatus(tx->conn) != CONNECTION_OK) {
        /* COMMIT was never sent, so the transaction can never commit. */
        set_err(tx, "connection lost before COMMIT");
        outcome = DBTX_ROLLED_BACK;
    } else {
        pgwait_start(&w, 0, NULL);
        res = pgwait_query(&w, tx->conn, "COMMIT");
        if (res == NULL && PQstatus(tx->conn) == CONNECTION_OK) {
            /* pgwait sent nothing (once it has, a failure closes the connection). */
            set_err(tx, "COMMIT not sent: %s", w.err);
            rollback_if_open(tx->conn);
            outcome = DBTX_ROLLED_BACK;
        } else if (res == NULL || PQstatus(tx->conn) != CONNECTION_OK) {
            /* The COMMIT may or may not have reached the server, or been
             * carried out without its answer reaching us in time: ask. */
            char msg[400];

            wait_message(msg, sizeof(msg), tx->conn, res, &w);
            if (res == NULL)
                set_err(tx, "COMMIT: %s", msg);
            else
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

            pgwait_message(tx->err, sizeof(tx->err), tx->conn, res);
            set_sqlstate(tx, res);
            PQclear(res);
            if (ts == PQTRANS_IDLE) {
                /* Refused COMMIT (e.g. 40001): the server ended the block without committing. */
                outcome = DBTX_ROLLED_BACK;
            } else if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR) {
                rollback_if_open(tx->conn);
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
    rollback_if_open(tx->conn);
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
