-- pgbench script: one order per transaction, the guarded hot-row UPDATE and
-- the order INSERT (only when the UPDATE took the stock), as the service's
-- writer does per batch.  Users are drawn like the load generator's.
\set user_id random(1, 1000000)
\set qty 1
BEGIN;
WITH taken AS (
    UPDATE lt_pgonly.skus SET stock = stock - :qty WHERE id = 1 AND stock >= :qty RETURNING id
)
INSERT INTO lt_pgonly.orders (sku_id, user_id, qty) SELECT id, :user_id, :qty FROM taken;
END;
