-- the SKUs with orders recorded as pending at least $1 ms ago and not settled
-- yet (the partial index holds only those)
SELECT DISTINCT sku_id FROM order_pending
WHERE settled_at IS NULL AND created_at <= now() - make_interval(secs => $1::double precision / 1000)
