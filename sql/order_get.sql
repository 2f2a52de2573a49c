SELECT id, sku_id, user_id, qty, status, reason,
       (extract(epoch FROM reserved_at) * 1000)::bigint
FROM orders WHERE id = $1
