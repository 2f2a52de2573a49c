-- units each user holds in active (confirmed or paid) orders of SKU $1 (the
-- per-user limit's state)
SELECT user_id, sum(qty) FROM orders
WHERE sku_id = $1 AND status IN ('confirmed', 'paid')
GROUP BY user_id
