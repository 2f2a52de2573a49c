-- the cancel requests among a batch's order ids $1: their buyers cancelled
-- them before any writer wrote them (read under the SKU's row lock, which the
-- canceller held too); the writer matches buyer and entry
SELECT order_id, user_id, round(extract(epoch FROM requested_at) * 1000)::bigint, entry
FROM order_cancel_requests WHERE order_id = ANY ($1::bigint[])
