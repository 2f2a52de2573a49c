-- $1 id or NULL, $2 name, $3 stock, $4 per_user_limit, $5 starts ms or NULL, $6 ends ms or NULL
INSERT INTO skus (id, name, stock, initial_stock, per_user_limit, sale_starts_at, sale_ends_at)
VALUES (coalesce($1::bigint, nextval(pg_get_serial_sequence('skus', 'id'))), $2, $3, $3, $4,
        to_timestamp($5::double precision / 1000), to_timestamp($6::double precision / 1000))
ON CONFLICT (id) DO NOTHING
RETURNING id
