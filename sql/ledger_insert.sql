-- one ledger row: $1 sku, $2 kind, $3 delta, $4 stock_after, $5 order id or NULL, $6 reason,
-- $7 the admin request's Idempotency-Key or NULL
INSERT INTO stock_ledger (sku_id, kind, delta, stock_after, order_id, reason, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7)
