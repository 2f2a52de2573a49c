-- a SKU's payment window (and its buckets'), for the orders confirmed from now on
UPDATE skus SET payment_window_s = $2, updated_at = now()
WHERE id = $1 OR parent_id = $1
RETURNING id
