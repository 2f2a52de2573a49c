-- one ledger row per order a writer's transaction decided, of any of its SKUs
INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, order_id)
SELECT l.sku_id, l.kind, l.delta, l.stock_after, l.order_id
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[])
     AS l (sku_id, kind, delta, stock_after, order_id)
