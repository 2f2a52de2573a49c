-- one page of the SKUs on sale now (GET /admin/v1/sale): those whose sale
-- has not ended, above id $1, at most $2, in id order; a parent sells through
-- its buckets, so the buckets are listed and the parent is not
SELECT id, name, stock, coalesce(parent_id, 0) FROM skus
WHERE buckets = 1 AND (sale_ends_at IS NULL OR sale_ends_at > now()) AND id > $1
ORDER BY id
LIMIT $2
