-- units of SKU $1 held by each of the users $2 in active (confirmed or paid)
-- orders: the per-user limit's state.  One probe of orders_sku_user per user,
-- whatever the statistics say: during a sale they lag far behind the table,
-- and a join lets the planner read every order of the SKU instead, a cost
-- that grows with each order sold.
SELECT u.user_id,
       (SELECT coalesce(sum(o.qty), 0) FROM orders o
        WHERE o.sku_id = $1 AND o.user_id = u.user_id AND o.status IN ('confirmed', 'paid'))
FROM unnest($2::bigint[]) AS u (user_id)
