SELECT id, status, user_id, qty FROM orders WHERE id = ANY ($1::bigint[])
