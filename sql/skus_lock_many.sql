-- the rows of a writer's SKUs $1, locked in id order, first statement of its
-- transaction: two transactions locking rows of the same SKUs (writers,
-- admin moves between buckets, which lock in id order too) never wait on
-- each other in a circle
SELECT id FROM skus WHERE id = ANY ($1::bigint[]) ORDER BY id FOR UPDATE
