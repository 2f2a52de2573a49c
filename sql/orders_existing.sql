SELECT id, status, user_id, qty, reason, reapply_epoch FROM orders WHERE id = ANY ($1::bigint[])
