SELECT sku_id FROM sku_epochs WHERE epoch = $1
