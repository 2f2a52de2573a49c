-- The fate of a transaction id, asked by dbtx's lookup of a lost COMMIT and
-- by the settling of open adjustments (sku_store.c): one statement, so that
-- what it says and which server says it cannot come apart:
--   'standby'  the server is in recovery: its answer is not the system of
--              record's (it may lag, and may never be promoted); ask the
--              primary instead;
--   'future'   the primary never assigned that id (txid_current() gives the
--              lookup one of its own, above every id assigned there): the
--              transaction is not in its history.  That is a promoted
--              standby that never received it, or the same server after a
--              crash that lost it: it did not commit here and never will;
--   'syncwait' the commit is in the commit log but its backend still waits
--              for the synchronous standby (it is not visible in a snapshot
--              yet): not durable until the standby has it, and lost if the
--              primary dies now and the standby is promoted.  PostgreSQL 15's
--              txid_status() already says 'in progress' then (it looks at
--              the process array first); this keeps it so whatever the
--              order of its checks;
--   else txid_status(): committed, aborted (also a transaction whose server
--              crashed or failed over before its commit record), in
--              progress, or NULL (older than the commit log: not the
--              cluster that ran it).
-- A CASE evaluates only the branch it needs, so a standby never reaches
-- txid_current(), which it would refuse.
SELECT CASE WHEN pg_is_in_recovery() THEN 'standby'
            WHEN $1::bigint >= txid_current() THEN 'future'
            WHEN txid_status($1::bigint) = 'committed'
                 AND NOT txid_visible_in_snapshot($1::bigint, txid_current_snapshot()) THEN 'syncwait'
            ELSE txid_status($1::bigint) END
