-- 0006: a hot SKU split into buckets.  A SKU created with buckets = N > 1 is a
-- parent that sells nothing itself: its stock lives in N bucket SKUs, each an
-- ordinary SKU (its own row, stock, orders, ledger and Redis keys, with a
-- hash tag of its own, so that the buckets land on different masters of a
-- Redis Cluster).  A buyer's orders go to one bucket, chosen by the user id,
-- so the per-user limit holds in one place; units move between buckets as
-- two ledger rows of kind 'admin' (reason 'bucket transfer') in one
-- transaction, so every bucket keeps I1 on its own and the parent's stock is
-- the sum of its buckets'.

ALTER TABLE skus
    ADD COLUMN buckets integer NOT NULL DEFAULT 1 CHECK (buckets BETWEEN 1 AND 64),
    ADD COLUMN parent_id bigint REFERENCES skus (id),
    ADD COLUMN bucket integer CHECK (bucket >= 0 AND bucket < 64),
    -- a bucket names its parent and its place; a parent is nobody's bucket
    ADD CONSTRAINT skus_bucket_parent_check
        CHECK ((parent_id IS NULL) = (bucket IS NULL) AND (parent_id IS NULL OR buckets = 1)),
    -- a parent holds no stock of its own
    ADD CONSTRAINT skus_parent_stock_check
        CHECK (buckets = 1 OR (stock = 0 AND initial_stock = 0));

CREATE UNIQUE INDEX skus_bucket ON skus (parent_id, bucket) WHERE parent_id IS NOT NULL;
