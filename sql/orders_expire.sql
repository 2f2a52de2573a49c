-- confirmed -> expired: at most $2 orders of SKU $1 whose payment window has
-- passed, oldest deadline first, under the SKU's fenced row lock (FOR UPDATE
-- and the status test again: a payment that committed first wins).  Their
-- units come back to skus.stock with one 'return' ledger row each (stock
-- after each, in order id order), as in orders_cancel.sql.
WITH moved AS (
    UPDATE orders SET status = 'expired', expired_at = now(), return_settled = false,
           return_epoch = coalesce((SELECT max(epoch) FROM sku_epochs WHERE sku_id = $1), 0)
    WHERE id IN (SELECT id FROM orders
                 WHERE sku_id = $1 AND status = 'confirmed' AND expires_at <= now()
                 ORDER BY expires_at LIMIT $2 FOR UPDATE)
      AND status = 'confirmed'
    RETURNING id, user_id, qty, return_epoch
), back AS (
    UPDATE skus SET stock = stock + (SELECT sum(qty) FROM moved), updated_at = now()
    WHERE id = $1 AND EXISTS (SELECT 1 FROM moved)
    RETURNING stock
), led AS (
    INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, order_id, reason)
    SELECT $1, 'return', m.qty,
           b.stock - (SELECT sum(qty) FROM moved) + sum(m.qty) OVER (ORDER BY m.id),
           m.id, 'expired'
    FROM moved m, back b
)
SELECT id, user_id, qty, return_epoch FROM moved
