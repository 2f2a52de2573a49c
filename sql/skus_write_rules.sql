-- what a writer's batches of SKUs $1 are checked against besides the stock:
-- the per-user limit, the epoch of the SKU's last load into Redis (orders
-- reserved under an older epoch were not counted by that load), and the
-- payment window its confirmed orders get
SELECT s.id, s.per_user_limit, (SELECT max(e.epoch) FROM sku_epochs e WHERE e.sku_id = s.id),
       s.payment_window_s
FROM skus s WHERE s.id = ANY ($1::bigint[])
