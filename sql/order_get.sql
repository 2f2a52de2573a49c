-- one order as its lookup shows it
SELECT id, sku_id, user_id, qty, status, reason,
       (extract(epoch FROM reserved_at) * 1000)::bigint,
       (extract(epoch FROM expires_at) * 1000)::bigint,
       (extract(epoch FROM paid_at) * 1000)::bigint,
       (extract(epoch FROM cancelled_at) * 1000)::bigint,
       (extract(epoch FROM expired_at) * 1000)::bigint,
       payment_ref,
       expires_at IS NOT NULL AND expires_at <= now()
FROM orders WHERE id = $1
