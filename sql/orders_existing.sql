-- the rows a batch's order ids already have (a replay), with what tells a
-- replay from an id Redis issued again: the same SKU, user, qty and
-- reservation time
SELECT id, status, user_id, qty, reason, reapply_epoch,
       round(extract(epoch FROM reserved_at) * 1000)::bigint, sku_id
FROM orders WHERE id = ANY ($1::bigint[])
