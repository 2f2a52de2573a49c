-- 0009: find an admin delta's ledger rows without reading the SKU's orders.
--
-- A COMMIT whose answer a failover cut is looked up by its transaction id,
-- which the promoted standby may have given another transaction.  An order
-- writer's transaction is told apart by the order rows it inserted
-- (sql/orders_witness.sql); an admin delta's by its ledger rows
-- (sql/adjust_witness.sql).  A SKU's ledger holds one row per order sold and
-- a handful of admin rows: this index reaches the few.
CREATE INDEX stock_ledger_admin ON stock_ledger (sku_id) WHERE kind = 'admin';
