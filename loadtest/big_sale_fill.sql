-- An earlier sale already in the tables, for make bench's big phase (a sale
-- is never the first one): SKU :sku, :n units sold out by :n orders of one
-- unit each to :n buyers, each order with its ledger row, as the writer
-- would have left them, then analyzed as autovacuum would have.  The order
-- ids use an epoch no load will draw for years (8,000,000 of the 8,388,607),
-- so they never meet the ids of the sale measured after.  Run by the owner.
\set ON_ERROR_STOP on
BEGIN;
INSERT INTO skus (id, name, stock, initial_stock, per_user_limit)
VALUES (:sku, 'an earlier sale (make bench)', 0, :n, 1);
INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, reason)
VALUES (:sku, 'initial', :n, :n, 'make bench: an earlier sale');
INSERT INTO orders (id, sku_id, user_id, qty, status, reserved_at, created_at)
SELECT 8000000 * 1073741824::bigint + g, :sku, g, 1, 'confirmed',
       now() - interval '1 day' + g * interval '1 ms', now() - interval '1 day'
FROM generate_series(1, :n) AS g;
INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, order_id)
SELECT :sku, 'order', -1, :n - g, 8000000 * 1073741824::bigint + g
FROM generate_series(1, :n) AS g;
COMMIT;
ANALYZE skus;
ANALYZE orders;
ANALYZE stock_ledger;
