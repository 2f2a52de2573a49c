-- I1 per SKU: stock >= 0, stock = initial + admin deltas - confirmed units, and the
-- ledger sums to the stock.  Returns the SKUs that violate it (none is good).
SELECT s.id, s.stock,
       s.initial_stock + coalesce(a.delta, 0) - coalesce(o.units, 0) AS expected,
       coalesce(l.total, 0) AS ledger_total
FROM skus s
LEFT JOIN (SELECT sku_id, sum(delta) AS delta FROM stock_ledger WHERE kind = 'admin' GROUP BY sku_id) a
       ON a.sku_id = s.id
LEFT JOIN (SELECT sku_id, sum(qty) AS units FROM orders WHERE status = 'confirmed' GROUP BY sku_id) o
       ON o.sku_id = s.id
LEFT JOIN (SELECT sku_id, sum(delta) AS total FROM stock_ledger GROUP BY sku_id) l
       ON l.sku_id = s.id
WHERE ($1::bigint IS NULL OR s.id = $1)
  AND (s.stock < 0
       OR s.stock <> s.initial_stock + coalesce(a.delta, 0) - coalesce(o.units, 0)
       OR s.stock <> coalesce(l.total, 0))
