-- confirmed -> cancelled: order $2 of SKU $1 by its buyer $3, under the SKU's
-- fenced row lock.  Its units come back to skus.stock with a 'return' ledger
-- row in the same statement; the row records the SKU's last load into Redis
-- (the load that gets the units too) and that Redis does not have them yet.
-- Returns the order (no row: it was not a confirmed order of that buyer; or
-- its payment window passed, and it is the sweepers' to expire; or its SKU
-- has no payment step, and confirmed is final).
WITH moved AS (
    UPDATE orders SET status = 'cancelled', cancelled_at = now(), return_settled = false,
           return_epoch = coalesce((SELECT max(epoch) FROM sku_epochs WHERE sku_id = $1), 0)
    WHERE id = $2 AND sku_id = $1 AND user_id = $3 AND status = 'confirmed'
      AND expires_at > now()
    RETURNING id, user_id, qty, return_epoch
), back AS (
    UPDATE skus SET stock = stock + (SELECT sum(qty) FROM moved), updated_at = now()
    WHERE id = $1 AND EXISTS (SELECT 1 FROM moved)
    RETURNING stock
), led AS (
    INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, order_id, reason)
    SELECT $1, 'return', m.qty, b.stock, m.id, 'cancelled' FROM moved m, back b
)
SELECT id, user_id, qty, return_epoch FROM moved
