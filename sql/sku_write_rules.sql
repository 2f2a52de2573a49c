-- what a writer's batch of SKU $1 is checked against besides the stock: the
-- per-user limit, and the epoch of the SKU's last load into Redis (orders
-- reserved under an older epoch were not counted by that load)
SELECT per_user_limit, (SELECT max(epoch) FROM sku_epochs WHERE sku_id = $1)
FROM skus WHERE id = $1
