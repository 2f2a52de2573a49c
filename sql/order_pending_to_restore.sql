-- a rebuild's load writes back the keys of SKU $1's orders recorded as
-- pending (not settled, with the buyer's own Idempotency-Key) that no row
-- holds the id of (read under the SKU's lock and fenced row): order id,
-- entry, buyer, qty, the key
SELECT p.order_id, p.entry_id, p.user_id, p.qty, p.idempotency_key
FROM order_pending p
WHERE p.sku_id = $1 AND p.settled_at IS NULL AND p.idempotency_key IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = p.order_id)
ORDER BY p.reserved_at, p.order_id
