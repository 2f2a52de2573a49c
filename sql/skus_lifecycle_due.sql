-- the SKUs past id $2 (a sweep's cursor) with work for the sweeper, at most
-- $1 of them: confirmed orders past their payment window, or units given
-- back whose Redis half is still to do.  Both sets come from their partial
-- indexes, which hold only such orders, each read once; the sweeper runs it
-- with sequential scans off (db_query_indexed): PostgreSQL estimates
-- "return_settled = false" over a column of NULLs as every row, and with ten
-- million orders of an earlier sale the per-SKU EXISTS this was before
-- scanned them all, past the statement timeout, on every sweep, so no order
-- of any SKU expired.
SELECT s.id FROM skus s
WHERE s.id > $2
  AND s.id IN (SELECT o.sku_id FROM orders o
               WHERE o.status = 'confirmed' AND o.expires_at <= now()
               UNION ALL
               SELECT o.sku_id FROM orders o WHERE o.return_settled = false)
ORDER BY s.id LIMIT $1
