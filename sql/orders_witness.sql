-- The witness of an order writer's transaction (dbtx_set_witness): true when
-- an order it inserted ($1, the ids) is there as the row it wrote, whose
-- xmin is the low 32 bits of the transaction's id ($2).  After a failover a
-- transaction id can name another transaction; the rows cannot.
SELECT EXISTS (SELECT 1 FROM orders
               WHERE id = ANY($1::bigint[]) AND xmin = ($2::bigint % 4294967296)::text::xid)
