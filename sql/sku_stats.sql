-- database view of a SKU for operators
SELECT s.stock,
       coalesce(sum(o.qty) FILTER (WHERE o.status = 'confirmed'), 0) AS confirmed_units,
       count(o.id) FILTER (WHERE o.status = 'confirmed') AS confirmed_orders,
       count(o.id) FILTER (WHERE o.status = 'rejected') AS rejected_orders
FROM skus s LEFT JOIN orders o ON o.sku_id = s.id
WHERE s.id = $1
GROUP BY s.id, s.stock
