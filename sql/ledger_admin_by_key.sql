-- the admin delta an Idempotency-Key already applied to SKU $1, if any
SELECT delta, stock_after FROM stock_ledger
WHERE sku_id = $1 AND idempotency_key = $2 AND kind = 'admin'
