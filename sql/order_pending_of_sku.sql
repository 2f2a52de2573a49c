-- the orders of SKU $1 recorded as pending at least $2 ms ago and not settled
-- yet, in reservation order, at most $3, locked for the settler (which holds
-- the SKU's lock and fenced row): order id, entry, buyer, qty, the buyer's
-- Idempotency-Key, reservation time (Unix ms)
SELECT order_id, entry_id, user_id, qty, idempotency_key,
       round(extract(epoch FROM reserved_at) * 1000)::bigint
FROM order_pending
WHERE sku_id = $1 AND settled_at IS NULL
  AND created_at <= now() - make_interval(secs => $2::double precision / 1000)
ORDER BY reserved_at, order_id
LIMIT $3
FOR UPDATE
