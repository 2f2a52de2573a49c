-- An earlier sale already in the tables, for make bench's big phase (a sale
-- is never the first one): SKU :sku and :n orders of one unit each from :n
-- buyers, each with its ledger row, as the writer would have left them, then
-- vacuumed and analyzed.  The order ids use an epoch no load will draw for
-- years (8,000,000 of the 8,388,607), so they never meet the ids of the sale
-- measured after.  Run by the owner.
--
-- The orders are ones the database refused (rejected, insufficient stock:
-- the SKU had no units), not confirmed ones: the earlier SKU was never loaded
-- into Redis here, so the reconciler rebuilds it, and a rebuild loads every
-- buyer holding units into Redis.  With 10 million confirmed buyers that
-- rebuild fails and is retried every pass (make bench measured the sale after
-- it at half its rate), which is a cost of the rebuild, not of the order path
-- this phase measures; docs/performance.md reports it.
\set ON_ERROR_STOP on
BEGIN;
INSERT INTO skus (id, name, stock, initial_stock, per_user_limit, sale_starts_at, sale_ends_at)
VALUES (:sku, 'an earlier sale (make bench)', 0, 0, 1, now() - interval '2 days',
        now() - interval '1 day');
INSERT INTO orders (id, sku_id, user_id, qty, status, reason, reserved_at, created_at)
SELECT 8000000 * 1073741824::bigint + g, :sku, g, 1, 'rejected', 'insufficient_stock',
       now() - interval '2 days' + g * interval '1 ms', now() - interval '1 day'
FROM generate_series(1, :n) AS g;
INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, order_id)
SELECT :sku, 'rejection', 0, 0, 8000000 * 1073741824::bigint + g
FROM generate_series(1, :n) AS g;
COMMIT;
-- vacuumed and analyzed, as autovacuum leaves an earlier sale's rows long
-- before the next one: without it the first statements to read them set
-- their hint bits (a write of every page) and autovacuum's pass over 20
-- million new rows runs in the measured window
VACUUM (ANALYZE) skus;
VACUUM (ANALYZE) orders;
VACUUM (ANALYZE) stock_ledger;
