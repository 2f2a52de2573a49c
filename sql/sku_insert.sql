-- $1 id, $2 name, $3 stock, $4 per_user_limit, $5 starts ms or NULL, $6 ends ms or NULL,
-- $7 fencing token of the creator's lock, $8 payment window in seconds (0: none),
-- $9 buckets (1: an ordinary SKU), $10 the parent of a bucket or NULL, $11 its bucket or NULL
INSERT INTO skus (id, name, stock, initial_stock, per_user_limit, sale_starts_at, sale_ends_at,
                  fence_token, payment_window_s, buckets, parent_id, bucket)
VALUES ($1, $2, $3, $3, $4,
        to_timestamp($5::double precision / 1000), to_timestamp($6::double precision / 1000), $7,
        $8, $9, $10, $11)
ON CONFLICT (id) DO NOTHING
RETURNING id
