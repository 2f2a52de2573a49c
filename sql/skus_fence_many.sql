-- the fenced row locks of a writer's transaction over several SKUs: SKU $1[i]
-- takes token $2[i] when it is not older than the last one seen.  Every row
-- is locked first, in id order (two transactions locking rows of the same
-- SKUs never wait on each other in a circle); a SKU whose token is refused
-- returns no row, and its holder draws a newer token (sku_fence.sql) under
-- the row lock it already has.
WITH f AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS f (id, tok)),
     l AS MATERIALIZED (SELECT id FROM skus WHERE id = ANY ($1::bigint[]) ORDER BY id FOR UPDATE)
UPDATE skus s SET fence_token = f.tok
FROM f
WHERE s.id = f.id AND s.fence_token <= f.tok AND s.id IN (SELECT id FROM l)
RETURNING s.id, s.stock
