-- The witness of an admin delta's transaction (dbtx_set_witness, and the
-- settling of open adjustments in sku_store.c): true when a ledger row it
-- inserted for one of its SKUs ($1, the ids) is there, with the transaction's
-- id ($2, its low 32 bits) as the row's xmin.  After a failover a transaction
-- id can name another transaction; the ledger rows cannot.  Ledger rows are
-- never updated, so their xmin stays the inserting transaction's.
SELECT EXISTS (SELECT 1 FROM stock_ledger
               WHERE sku_id = ANY($1::bigint[]) AND kind = 'admin'
                 AND xmin = ($2::bigint % 4294967296)::text::xid)
