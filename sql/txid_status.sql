-- the fate of an earlier transaction in this server's history: 'committed',
-- 'aborted', 'in progress' or NULL (older than the commit log keeps).  An id
-- this server never assigned (a primary lost before the records of that
-- transaction reached the standby promoted since) never committed here:
-- 'aborted', where txid_status() would raise "in the future".
SELECT CASE WHEN $1::bigint >= txid_snapshot_xmax(txid_current_snapshot()) THEN 'aborted'
            ELSE txid_status($1::bigint) END
