-- pgbench script: one transaction of the order writer for a batch of :B
-- orders of one SKU (each client its own SKU, like writers on many SKUs),
-- the statements of sql/ in the order service/order/order_writer.c runs
-- them: sku_fence, orders_existing, sku_write_rules, orders_user_units,
-- sku_take_stock, orders_insert_batch, ledger_insert_batch, COMMIT.  The
-- writer sends its arrays as text parameters; pgbench cannot build arrays,
-- so here the server builds them (ARRAY(SELECT ... generate_series)) from
-- the batch number: order ids batch * B + 1..B, users spread over a million
-- by a multiplicative hash (the same in every statement), one unit each.
-- Tables: loadtest/pg_writer_batch_setup.sql; search_path = lt_pgbatch
-- (PGOPTIONS), so each statement reads as its sql/ file.  -D B=500.
\set sku :client_id + 1
SELECT nextval('batches') AS batch \gset
BEGIN;
UPDATE skus SET fence_token = :batch::bigint
WHERE id = :sku::bigint AND fence_token <= :batch::bigint
RETURNING stock \gset
SELECT id, status, user_id, qty, reason, reapply_epoch,
       round(extract(epoch FROM reserved_at) * 1000)::bigint
FROM orders WHERE id = ANY (ARRAY(SELECT :batch::bigint * :B::bigint + g
                                  FROM generate_series(1, :B::integer) AS g));
SELECT per_user_limit, (SELECT max(epoch) FROM sku_epochs WHERE sku_id = :sku::bigint)
FROM skus WHERE id = :sku::bigint;
SELECT u.user_id,
       (SELECT coalesce(sum(o.qty), 0) FROM orders o
        WHERE o.sku_id = :sku::bigint AND o.user_id = u.user_id AND o.status = 'confirmed')
FROM unnest(ARRAY(SELECT ((:batch::bigint * :B::bigint + g) * 2654435761) % 1000000 + 1
                  FROM generate_series(1, :B::integer) AS g)) AS u (user_id);
UPDATE skus SET stock = stock - :B::bigint, updated_at = now()
WHERE id = :sku::bigint AND stock >= :B::bigint
RETURNING stock;
INSERT INTO orders (id, sku_id, user_id, qty, status, reason, idempotency_key, reserved_at,
                    reapply_epoch)
SELECT o.id, :sku::bigint, o.user_id, o.qty, o.status, o.reason, o.idem,
       to_timestamp(o.ms::double precision / 1000), o.reapply
FROM unnest(ARRAY(SELECT :batch::bigint * :B::bigint + g FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT ((:batch::bigint * :B::bigint + g) * 2654435761) % 1000000 + 1
                  FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT 1 FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT 'confirmed'::text FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT NULL::text FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT 'lt-' || (:batch::bigint * :B::bigint + g)
                  FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT floor(extract(epoch FROM now()) * 1000)::bigint
                  FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT NULL::integer FROM generate_series(1, :B::integer) AS g))
     AS o (id, user_id, qty, status, reason, idem, ms, reapply)
ON CONFLICT (id) DO NOTHING
RETURNING id;
INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, order_id)
SELECT :sku::bigint, l.kind, l.delta, l.stock_after, l.order_id
FROM unnest(ARRAY(SELECT 'order'::text FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT -1::bigint FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT :stock::bigint - g FROM generate_series(1, :B::integer) AS g),
            ARRAY(SELECT :batch::bigint * :B::bigint + g FROM generate_series(1, :B::integer) AS g))
     AS l (kind, delta, stock_after, order_id);
COMMIT;
