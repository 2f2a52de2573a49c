-- the fenced row lock: first statement of every transaction that writes a SKU;
-- accepts the lock's token only if it is not older than the last one seen
UPDATE skus SET fence_token = $2
WHERE id = $1 AND fence_token <= $2
RETURNING stock
