-- the buckets of parent SKU $1, in bucket order (none: not a parent)
SELECT id FROM skus WHERE parent_id = $1 ORDER BY bucket
