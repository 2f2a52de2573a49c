-- confirmed -> paid under payment reference $2, while the order's window is
-- open (a SKU without a window has no payment step: nothing to pay); a
-- reference pays one order (orders_payment_ref: two payments racing with one
-- reference fail the second statement, whose retry finds the first)
UPDATE orders SET status = 'paid', paid_at = now(), payment_ref = $2
WHERE id = $1 AND status = 'confirmed' AND expires_at > now()
  AND NOT EXISTS (SELECT 1 FROM orders p WHERE p.payment_ref = $2)
RETURNING id
