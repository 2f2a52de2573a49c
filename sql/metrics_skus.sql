-- The SKUs whose gauges /metrics shows (seckill_sku_*), at most $1
-- (metrics_max_skus): those whose sale has not ended first, then the newest.
-- Read before Redis, so that stock minus Redis's stock never misses an order
-- written between the two reads (seckill_sku_inflight_units).  The last
-- column: the sale window holds now (seckill_sku_sale_open; NULL bounds are open).
SELECT id, stock, coalesce(parent_id, 0),
       (sale_starts_at IS NULL OR sale_starts_at <= now())
         AND (sale_ends_at IS NULL OR sale_ends_at > now())
FROM skus
WHERE buckets = 1  -- a parent's stock is its buckets'
ORDER BY (sale_ends_at IS NULL OR sale_ends_at > now()) DESC, id DESC
LIMIT $1
