-- buyer $3 cancels order $1 of SKU $2 before any writer wrote it (under the
-- SKU's fenced row lock, having found no row); a repeat keeps the first
INSERT INTO order_cancel_requests (order_id, sku_id, user_id) VALUES ($1, $2, $3)
ON CONFLICT (order_id) DO NOTHING
