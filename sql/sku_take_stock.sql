-- the guard compares with the quantity taken, not with zero
UPDATE skus SET stock = stock - $2, updated_at = now()
WHERE id = $1 AND stock >= $2
RETURNING stock
