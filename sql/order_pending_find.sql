-- the newest recorded pending reservation of order id $1 by buyer $2, for a
-- lookup that found no row of that buyer: its SKU, qty, reservation time
-- (Unix ms), outcome (NULL: not settled yet) and stream entry
SELECT sku_id, qty, round(extract(epoch FROM reserved_at) * 1000)::bigint, outcome, entry_id
FROM order_pending WHERE order_id = $1 AND user_id = $2
ORDER BY created_at DESC LIMIT 1
