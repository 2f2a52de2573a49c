-- relative change, guarded so the stock never goes negative (I1)
UPDATE skus SET stock = stock + $2, updated_at = now()
WHERE id = $1 AND stock + $2 >= 0
RETURNING stock
