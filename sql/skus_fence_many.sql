-- the fenced row locks of a writer's transaction over several SKUs (their
-- rows already locked by skus_lock_many.sql): SKU $1[i] takes token $2[i]
-- when it is not older than the last one seen.  A SKU whose token is refused
-- returns no row, and its holder draws a newer token (sku_fence.sql) under
-- the row lock it already has.
UPDATE skus s SET fence_token = f.tok
FROM unnest($1::bigint[], $2::bigint[]) AS f (id, tok)
WHERE s.id = f.id AND s.fence_token <= f.tok
RETURNING s.id, s.stock
