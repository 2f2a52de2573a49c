SELECT id, name, stock, initial_stock, per_user_limit,
       (extract(epoch FROM sale_starts_at) * 1000)::bigint,
       (extract(epoch FROM sale_ends_at) * 1000)::bigint,
       payment_window_s,
       buckets, parent_id, bucket,
       (SELECT buckets FROM skus p WHERE p.id = skus.parent_id)
FROM skus WHERE id = $1
