-- one page of SKUs for operators (GET /admin/v1/skus): the SKUs whose id is
-- above $1, at most $2 of them, in id order (keyset paging: a page costs the
-- same however far into the list it is)
SELECT id, name, stock, initial_stock, per_user_limit,
       (extract(epoch FROM sale_starts_at) * 1000)::bigint,
       (extract(epoch FROM sale_ends_at) * 1000)::bigint,
       payment_window_s, buckets, parent_id
FROM skus WHERE id > $1
ORDER BY id
LIMIT $2
