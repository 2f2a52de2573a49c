/*
 * dbtx: a PostgreSQL transaction on a libpq connection, with hooks that run
 * once the transaction has COMPLETED, whichever way it ended.
 *
 * Why: the service holds a Redis lock across "read, decide, insert".  The lock
 * may only be released when the transaction is over: releasing it before
 * COMMIT lets another process read "not there yet" under READ COMMITTED and
 * insert a duplicate; releasing it only after a successful COMMIT leaks it on
 * every rollback.  Hooks registered with dbtx_on_complete() are the single
 * place where such resources are let go, and they learn how it ended.
 *
 * When the connection dies during COMMIT nobody knows from the client side
 * whether the server committed.  dbtx does not guess: it remembers the
 * transaction id from BEGIN and asks the server with txid_status() over a
 * fresh connection.  Only when that fails too is the outcome DBTX_UNKNOWN.
 *
 * Every wait is bounded on the client side (pgwait): BEGIN, each statement,
 * COMMIT, ROLLBACK and the lookup each get the process-wide deadline
 * (pgwait_set_default_timeout_ms(), pg_client_timeout_ms in the daemon).
 * A round trip without an answer in time closes the connection under its
 * owner (PQstatus() then says CONNECTION_BAD; the owner reconnects): before
 * COMMIT that means rolled back, a COMMIT without an answer is looked up.
 *
 * A struct dbtx is used by one thread at a time, like the PGconn under it.
 * Every dbtx_begin() that succeeds must be ended by exactly one
 * dbtx_commit() or dbtx_rollback(); both free the struct dbtx.
 */
#ifndef SECKILL_DBTX_H
#define SECKILL_DBTX_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stddef.h>

#include "store/pgwait.h"

#define DBTX_MUST_CHECK __attribute__((warn_unused_result))

enum dbtx_outcome {
    DBTX_COMMITTED,   /* the server committed the transaction */
    DBTX_ROLLED_BACK, /* it is rolled back, or can never commit (session gone before COMMIT) */
    DBTX_UNKNOWN,     /* COMMIT was sent, the reply was lost, and the server could not be asked */
};

enum dbtx_isolation {
    DBTX_ISO_DEFAULT, /* whatever the session's default_transaction_isolation says */
    DBTX_ISO_READ_COMMITTED,
    DBTX_ISO_REPEATABLE_READ,
    DBTX_ISO_SERIALIZABLE,
};

/*
 * A completion hook.  'outcome' is how the transaction ended; 'arg' is what
 * was passed to dbtx_on_complete().  The struct dbtx is already freed when a
 * hook runs, so a hook must not use it; the PGconn may be used (it is out of
 * the transaction block, or broken if the connection was lost).
 */
typedef void dbtx_hook_fn(enum dbtx_outcome outcome, void *arg);

struct dbtx; /* opaque */

/*
 * Sends BEGIN (with 'iso') and SELECT txid_current() in one round trip on
 * 'conn', which must be CONNECTION_OK and outside any transaction block.
 * 'conninfo' (may be NULL) is copied; it is used only to open a fresh
 * connection when the outcome of a COMMIT has to be looked up after 'conn'
 * was lost.  With NULL such a lost COMMIT ends as DBTX_UNKNOWN.
 *
 * Returns a new transaction, or NULL with a message in err (err may be NULL;
 * it is always NUL-terminated when errcap > 0).  'conn' stays owned by the
 * caller and must outlive the transaction.  On failure no transaction is left
 * open on 'conn' (a failed BEGIN round trip is rolled back; one without an
 * answer in time closed the connection).  A connection to a standby
 * (pgwait_on_standby) is refused and closed, so that its owner reconnects.
 */
struct dbtx *dbtx_begin(PGconn *conn, const char *conninfo, enum dbtx_isolation iso, char *err,
                        size_t errcap) DBTX_MUST_CHECK;

/*
 * dbtx_begin() without a round trip of its own: BEGIN and txid_current() go
 * first in the transaction's first dbtx_exec() or dbtx_exec_pipeline(), so
 * that a transaction whose first reads are one pipeline opens with them.
 * Same checks and returns as dbtx_begin() but for BEGIN itself, which fails
 * like that first statement would.  A deferred transaction ended before any
 * statement was sent opened nothing: dbtx_commit() says DBTX_COMMITTED,
 * dbtx_rollback() DBTX_ROLLED_BACK, neither with a round trip.
 */
struct dbtx *dbtx_begin_deferred(PGconn *conn, const char *conninfo, enum dbtx_isolation iso,
                                 char *err, size_t errcap);

/*
 * Registers fn(outcome, arg) to run when the transaction ends.  Each hook runs
 * exactly once, in reverse order of registration (like nested cleanups), after
 * the outcome is known, on every path that ends the transaction: commit,
 * rollback, failed commit, lost connection.
 *
 * Returns 0, or -1 when memory is short; then the hook is NOT registered and
 * the caller still owns whatever 'arg' refers to.
 */
int dbtx_on_complete(struct dbtx *tx, dbtx_hook_fn *fn, void *arg) DBTX_MUST_CHECK;

/*
 * Makes every later dbtx_exec() of tx stop waiting as soon as *flag is
 * non-zero (read every few tens of ms, from any thread; e.g. set by the
 * watchdog when the lock guarding tx is lost).  A statement abandoned that
 * way, or refused because the flag was already up, fails like one without an
 * answer in time (see dbtx_exec), so the transaction ends rolled back.
 * COMMIT and ROLLBACK do not look at the flag.  'flag' (NULL: none) must stay
 * valid until the transaction is ended; the hooks run after tx stopped
 * reading it.
 */
void dbtx_set_abort_flag(struct dbtx *tx, const atomic_int *flag);

/*
 * Gives tx a witness: one parameterised query (text parameters; $nparams+1
 * is the transaction's id, txid_current() at BEGIN, as text) whose first
 * column of its first row is true when this very transaction's effects are
 * in the database it runs on, e.g. rows it inserted, whose xmin is that id
 * modulo 2^32.  Only the lookup of a lost COMMIT uses it, when txid_status()
 * says committed: an id a server assigned but never wrote where the standby
 * could see it is assigned again after a failover (or a crash), so
 * 'committed' may be another transaction's.  Witness true: DBTX_COMMITTED;
 * false: that id is another transaction's and ours is not in this history,
 * DBTX_ROLLED_BACK; no answer: DBTX_UNKNOWN.  Without one, 'committed' is
 * taken as it is.  sql and params are copied; a later call replaces the
 * witness.  Returns 0, or -1 when memory is short (then tx has none).
 */
int dbtx_set_witness(struct dbtx *tx, const char *sql, int nparams,
                     const char *const *params) DBTX_MUST_CHECK;

/*
 * Runs one parameterised statement in the transaction (text parameters, text
 * results; params may be NULL when nparams is 0), bounded by the deadline
 * and the abort flag.
 *
 * Returns the result when its status is PGRES_COMMAND_OK or PGRES_TUPLES_OK;
 * the caller owns it and must PQclear() it.  On any other status returns
 * NULL, keeps the message (dbtx_error) and SQLSTATE (dbtx_sqlstate) on tx and
 * marks the transaction failed: later dbtx_exec() calls return NULL without
 * a round trip, and dbtx_commit() becomes a rollback.  Without an answer in
 * time, or abandoned for the abort flag, it is the same with dbtx_error()
 * saying so ("no answer within N ms") and no SQLSTATE; the connection is
 * closed by then (unless nothing had been sent), so the transaction can
 * never commit.
 *
 * A statement that ends the transaction block itself (COMMIT, ROLLBACK, ...)
 * is refused after the fact: NULL, transaction failed, and the final outcome
 * is looked up with txid_status() when the transaction is ended.  (One whose
 * answer never comes is taken for an ordinary statement: rolled back.)
 */
PGresult *dbtx_exec(struct dbtx *tx, const char *sql, int nparams,
                    const char *const *params) DBTX_MUST_CHECK;

/*
 * Runs n statements of the transaction in one round trip (pgwait_pipeline):
 * the same as n dbtx_exec() calls in a row, without waiting for each answer.
 * Returns 0 with res[0..n) set (the caller PQclear()s each), or -1 with every
 * res[i] NULL and the transaction failed as dbtx_exec() describes, the
 * message and SQLSTATE of the first statement that failed kept on tx.
 */
int dbtx_exec_pipeline(struct dbtx *tx, size_t n, const struct pgwait_stmt *stmts,
                       PGresult **res) DBTX_MUST_CHECK;

/*
 * Commits, runs the hooks with the outcome, frees tx and returns the outcome.
 *   - a failed transaction (see dbtx_exec) is rolled back: DBTX_ROLLED_BACK;
 *   - a COMMIT the server refuses (deferred constraint, serialization
 *     failure) ends the transaction too: DBTX_ROLLED_BACK;
 *   - a connection lost during COMMIT, or a COMMIT without an answer in time
 *     (the connection is closed then), is reconciled: a fresh connection
 *     with the conninfo asks the primary -- the server the transaction ran
 *     on, or the standby promoted since -- with txid_status():
 *     'committed' (and no longer waiting for the synchronous standby) ->
 *     DBTX_COMMITTED; 'aborted', or an id the primary never assigned (not
 *     in its history: a promoted standby that never received it) ->
 *     DBTX_ROLLED_BACK; 'in progress', or committed but still waiting for
 *     the synchronous standby, is asked again a bounded number of times
 *     (about 3 s in all: the dying backend still has to abort); an answer
 *     from a standby does not count; anything else -> DBTX_UNKNOWN.
 *     Finding a primary (refused connects, standbys, a server lost while
 *     asked) is retried within one client deadline, so a failover that ends
 *     within it settles the transaction on the new primary; a server that
 *     does not answer in time means UNKNOWN.  The answer is the system of
 *     record's as long as at most one server is a read-write primary
 *     (Patroni's leader lock) and every host of the conninfo is a member of
 *     the same cluster.
 * err (may be NULL) receives why it did not commit, "" when it did; the
 * SQLSTATE of a refused COMMIT goes to sqlstate (may be NULL, 6 bytes) so
 * callers can retry a 40001.  The PGconn is out of the transaction block
 * afterwards, or broken (then the caller resets or closes it).
 */
enum dbtx_outcome dbtx_commit(struct dbtx *tx, char *err, size_t errcap,
                              char *sqlstate) DBTX_MUST_CHECK;

/*
 * Rolls back, runs the hooks, frees tx and returns the outcome: always
 * DBTX_ROLLED_BACK when COMMIT was never sent -- also with a broken connection,
 * because a session that is gone can no longer commit.  The one exception is a
 * transaction ended by a statement passed to dbtx_exec(); its outcome is
 * looked up as for a lost COMMIT.
 */
enum dbtx_outcome dbtx_rollback(struct dbtx *tx);

/* The last error message on tx, "" if none.  Valid until commit/rollback. */
const char *dbtx_error(const struct dbtx *tx);

/* The SQLSTATE of the last failed statement, "" if none or not from the server. */
const char *dbtx_sqlstate(const struct dbtx *tx);

/* The server's transaction id (txid_current() at BEGIN), e.g. for logs. */
long long dbtx_txid(const struct dbtx *tx);

/* "committed", "rolled_back", "unknown" (static strings). */
const char *dbtx_outcome_str(enum dbtx_outcome outcome);

#endif
