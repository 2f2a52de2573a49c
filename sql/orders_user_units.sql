-- confirmed units of SKU $1 held by each of the users $2 (the per-user limit's state)
SELECT user_id, sum(qty) FROM orders
WHERE sku_id = $1 AND status = 'confirmed' AND user_id = ANY ($2::bigint[])
GROUP BY user_id
