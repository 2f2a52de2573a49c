-- the cancel request of buyer $2 for the reservation $3 of order $1, which no
-- writer has written yet (a request that names no entry predates them: any)
SELECT sku_id, user_id, (extract(epoch FROM requested_at) * 1000)::bigint
FROM order_cancel_requests
WHERE order_id = $1 AND user_id = $2 AND entry IN ($3, '')
ORDER BY requested_at LIMIT 1
