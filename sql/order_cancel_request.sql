-- buyer $3 cancels the reservation $4 (its stream entry) of order $1 of SKU
-- $2 before any writer wrote it (under the SKU's fenced row lock, having
-- found no row); a repeat keeps the first
INSERT INTO order_cancel_requests (order_id, sku_id, user_id, entry) VALUES ($1, $2, $3, $4)
ON CONFLICT (order_id, entry) DO NOTHING
