-- the buyer of the newest recorded pending reservation of order id $1, for
-- an operator's lookup of an order that has neither a row nor a journal entry
SELECT user_id FROM order_pending WHERE order_id = $1
ORDER BY created_at DESC LIMIT 1
