INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, order_id)
SELECT $1, l.kind, l.delta, l.stock_after, l.order_id
FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS l (kind, delta, stock_after, order_id)
