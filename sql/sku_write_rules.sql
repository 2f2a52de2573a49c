-- what a writer's batch of SKU $1 is checked against besides the stock: the
-- per-user limit, the epoch of the SKU's last load into Redis (orders
-- reserved under an older epoch were not counted by that load), and the
-- payment window its confirmed orders get
SELECT per_user_limit, (SELECT max(epoch) FROM sku_epochs WHERE sku_id = $1), payment_window_s
FROM skus WHERE id = $1
