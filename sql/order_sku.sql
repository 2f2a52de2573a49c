-- the SKU and the buyer of a written order, locking nothing
SELECT sku_id, user_id FROM orders WHERE id = $1
