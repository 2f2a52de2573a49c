-- a SKU's payment window (and its buckets'), for the orders confirmed from now
-- on; a bucket alone is not changed (its parent's window is its window)
UPDATE skus SET payment_window_s = $2, updated_at = now()
WHERE (id = $1 AND parent_id IS NULL) OR parent_id = $1
RETURNING id
