-- a durable order about to be answered 202 pending: $1 order id, $2 its
-- stream entry, $3 the SKU whose keys reserved it (a bucket's own id), $4 the
-- buyer, $5 qty, $6 the epoch of the id, $7 the buyer's own Idempotency-Key
-- or NULL, $8 the reservation's time (Unix ms, the entry's, as the writer
-- records it).  A second 202 for the same reservation (a retry with its key)
-- finds it recorded.
INSERT INTO order_pending (order_id, entry_id, sku_id, user_id, qty, epoch, idempotency_key,
                           reserved_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, to_timestamp($8::double precision / 1000))
ON CONFLICT (order_id, entry_id) DO NOTHING
