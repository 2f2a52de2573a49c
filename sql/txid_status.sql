-- the fate of an earlier transaction: 'committed', 'aborted', 'in progress' or NULL
SELECT txid_status($1::bigint)
