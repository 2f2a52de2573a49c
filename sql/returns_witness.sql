-- The witness of an order lifecycle transaction that returned orders' units
-- (dbtx_set_witness, service/order/order_life.c): true when the 'return'
-- ledger row of one of the orders $1 (the SKU's unsettled returns, its own
-- among them) is there with the transaction's id ($2, its low 32 bits) as
-- its xmin.  After a failover a transaction id can name another transaction;
-- the ledger rows, never updated, cannot.
SELECT EXISTS (SELECT 1 FROM stock_ledger
               WHERE order_id = ANY($1::bigint[]) AND kind = 'return'
                 AND xmin = ($2::bigint % 4294967296)::text::xid)
