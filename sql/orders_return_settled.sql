-- Redis has the units of orders $1 back (order_release.lua answered)
UPDATE orders SET return_settled = true
WHERE id = ANY ($1::bigint[]) AND return_settled = false
