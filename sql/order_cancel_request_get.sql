-- a cancel request for an order no writer has written yet
SELECT sku_id, user_id, (extract(epoch FROM requested_at) * 1000)::bigint
FROM order_cancel_requests WHERE order_id = $1
