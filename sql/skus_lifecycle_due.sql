-- SKUs with work for a sweeper (at most $1, from the first id above $2, so
-- that a sweep that stops at its bound goes on from there next time):
-- confirmed orders past their payment window, or returns whose Redis half
-- was not done (the process that committed them died).  One index probe per
-- SKU.
SELECT s.id FROM skus s
WHERE s.id > $2
  AND (EXISTS (SELECT 1 FROM orders o
               WHERE o.sku_id = s.id AND o.status = 'confirmed' AND o.expires_at <= now())
       OR EXISTS (SELECT 1 FROM orders o WHERE o.sku_id = s.id AND o.return_settled = false))
ORDER BY s.id LIMIT $1
