-- the SKU of a written order, locking nothing
SELECT sku_id FROM orders WHERE id = $1
