-- the admin delta an Idempotency-Key already applied to the buckets of parent
-- SKU $1, if any (split over several buckets: the sum), and their stock now
SELECT sum(l.delta), (SELECT sum(stock) FROM skus WHERE parent_id = $1)
FROM stock_ledger l
WHERE l.idempotency_key = $2 AND l.kind = 'admin'
  AND l.sku_id IN (SELECT id FROM skus WHERE parent_id = $1)
HAVING count(*) > 0
