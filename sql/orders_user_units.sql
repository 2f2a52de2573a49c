-- units held in active (confirmed or paid) orders by user $2[i] of SKU $1[i]:
-- the per-user limit's state.  One probe of orders_sku_user per pair,
-- whatever the statistics say: during a sale they lag far behind the table,
-- and a join lets the planner read every order of the SKU instead, a cost
-- that grows with each order sold.
SELECT u.sku_id, u.user_id,
       (SELECT coalesce(sum(o.qty), 0) FROM orders o
        WHERE o.sku_id = u.sku_id AND o.user_id = u.user_id AND o.status IN ('confirmed', 'paid'))
FROM unnest($1::bigint[], $2::bigint[]) AS u (sku_id, user_id)
