-- database view of a SKU for operators: units in active (confirmed or paid)
-- orders, and orders by state
SELECT s.stock,
       coalesce(sum(o.qty) FILTER (WHERE o.status IN ('confirmed', 'paid')), 0) AS active_units,
       count(o.id) FILTER (WHERE o.status = 'confirmed') AS confirmed_orders,
       count(o.id) FILTER (WHERE o.status = 'rejected') AS rejected_orders,
       count(o.id) FILTER (WHERE o.status = 'paid') AS paid_orders,
       count(o.id) FILTER (WHERE o.status = 'cancelled') AS cancelled_orders,
       count(o.id) FILTER (WHERE o.status = 'expired') AS expired_orders,
       s.payment_window_s
FROM skus s LEFT JOIN orders o ON o.sku_id = s.id
WHERE s.id = $1
GROUP BY s.id, s.stock
