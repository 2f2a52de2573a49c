-- cancelled or expired orders of SKU $1 whose units PostgreSQL has back and
-- Redis may not yet (at most $2): for order_release.lua
SELECT id, user_id, qty, return_epoch, status FROM orders
WHERE sku_id = $1 AND return_settled = false
ORDER BY id LIMIT $2
