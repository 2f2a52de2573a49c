-- 0003: what the service needs to heal by itself.
--
-- reapply_epoch: an order reserved before a rebuild of its SKU in Redis (the
-- rebuild counted only what PostgreSQL held) but written after it must also be
-- taken from the rebuilt state.  Recording the rebuild's epoch in the order's
-- own row, in the transaction that writes it, makes that duty durable: a
-- replay of the batch finds it and can neither skip nor double it.
ALTER TABLE orders ADD COLUMN reapply_epoch integer;

-- Admin deltas are idempotent: a retried request with the same key applies once.
ALTER TABLE stock_ledger ADD COLUMN idempotency_key text;
CREATE UNIQUE INDEX stock_ledger_admin_idempotency ON stock_ledger (sku_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
