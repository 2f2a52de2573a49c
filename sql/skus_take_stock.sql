-- $2[i] units of SKU $1[i]; the guard compares with the quantity taken, not
-- with zero, and a SKU it refuses returns no row
UPDATE skus s SET stock = s.stock - t.n, updated_at = now()
FROM unnest($1::bigint[], $2::bigint[]) AS t (id, n)
WHERE s.id = t.id AND s.stock >= t.n
RETURNING s.id, s.stock
