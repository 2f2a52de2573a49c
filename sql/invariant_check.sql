-- I1 per SKU ($1, or every SKU when NULL): stock >= 0, stock = initial + admin
-- deltas - units of active (confirmed or paid) orders, the ledger sums to the
-- stock, and every order changed the stock as its state says, once: an
-- active order took its units (one 'order' row) and gave nothing back; a
-- cancelled or expired order that took units gave exactly them back (one
-- 'return' row); an order that never took units (rejected, or cancelled
-- before it was written) gave nothing back.  Returns the SKUs that violate it
-- (none is good), with the number of orders whose ledger is wrong.
SELECT s.id, s.stock,
       s.initial_stock + coalesce(a.delta, 0) - coalesce(o.units, 0) AS expected,
       coalesce(l.total, 0) AS ledger_total,
       coalesce(w.wrong, 0) AS orders_wrong
FROM skus s
LEFT JOIN (SELECT sku_id, sum(delta) AS delta FROM stock_ledger
           WHERE kind = 'admin' AND ($1::bigint IS NULL OR sku_id = $1) GROUP BY sku_id) a
       ON a.sku_id = s.id
LEFT JOIN (SELECT sku_id, sum(qty) AS units FROM orders
           WHERE status IN ('confirmed', 'paid') AND ($1::bigint IS NULL OR sku_id = $1)
           GROUP BY sku_id) o
       ON o.sku_id = s.id
LEFT JOIN (SELECT sku_id, sum(delta) AS total FROM stock_ledger
           WHERE ($1::bigint IS NULL OR sku_id = $1) GROUP BY sku_id) l
       ON l.sku_id = s.id
LEFT JOIN (SELECT r.sku_id, count(*) AS wrong
           FROM orders r
           LEFT JOIN stock_ledger t ON t.order_id = r.id AND t.kind = 'order'
           LEFT JOIN stock_ledger b ON b.order_id = r.id AND b.kind = 'return'
           WHERE ($1::bigint IS NULL OR r.sku_id = $1)
             AND CASE WHEN r.status IN ('confirmed', 'paid') THEN t.id IS NULL OR b.id IS NOT NULL
                      WHEN t.id IS NULL THEN b.id IS NOT NULL
                      ELSE b.id IS NULL OR b.delta <> r.qty OR t.delta <> -r.qty END
           GROUP BY r.sku_id) w
       ON w.sku_id = s.id
WHERE ($1::bigint IS NULL OR s.id = $1)
  AND (s.stock < 0
       OR s.stock <> s.initial_stock + coalesce(a.delta, 0) - coalesce(o.units, 0)
       OR s.stock <> coalesce(l.total, 0)
       OR coalesce(w.wrong, 0) > 0)
