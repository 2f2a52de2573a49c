-- a SKU's payment window, for the orders confirmed from now on
UPDATE skus SET payment_window_s = $2, updated_at = now()
WHERE id = $1
RETURNING id
