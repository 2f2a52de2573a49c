-- 0005: the order's life after the writer.  A confirmed order is a
-- reservation until it is paid: its buyer may cancel it, and a SKU with a
-- payment window expires it when the window passes unpaid.  Cancelling or
-- expiring gives its units back, to PostgreSQL in the transaction that
-- changes the state (a 'return' ledger row, at most one per order) and to
-- Redis once after it (order_release.lua; the row records which load of the
-- SKU gets them and whether they got there).

-- Seconds a confirmed order has to be paid; 0: no payment step, confirmed is
-- final.  Changing it changes the orders confirmed from then on.
ALTER TABLE skus ADD COLUMN payment_window_s integer NOT NULL DEFAULT 0
    CHECK (payment_window_s BETWEEN 0 AND 2592000);

ALTER TABLE orders DROP CONSTRAINT orders_status_check, DROP CONSTRAINT orders_check;
ALTER TABLE orders
    -- confirmed with a window: not paid by then, it expires
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN paid_at timestamptz,
    -- the payment system's reference: a repeated callback with it is the same payment
    ADD COLUMN payment_ref text CHECK (length(payment_ref) BETWEEN 1 AND 128),
    ADD COLUMN cancelled_at timestamptz,
    ADD COLUMN expired_at timestamptz,
    -- a cancelled or expired confirmed order: the epoch of the SKU's last load
    -- into Redis when the units came back (that load, or a later one that read
    -- them from here, holds them), and whether Redis has them yet
    ADD COLUMN return_epoch integer,
    ADD COLUMN return_settled boolean,
    ADD CONSTRAINT orders_status_check
        CHECK (status IN ('confirmed', 'rejected', 'paid', 'cancelled', 'expired')),
    -- a rejected order says why; an order cancelled before the writer reached it
    -- says 'cancelled' (it never took stock); no other state has a reason
    ADD CONSTRAINT orders_reason_check
        CHECK (CASE status WHEN 'rejected' THEN reason IS NOT NULL
                           WHEN 'cancelled' THEN reason IS NULL OR reason = 'cancelled'
                           ELSE reason IS NULL END),
    -- one final state, each with its time: no order is paid and cancelled
    ADD CONSTRAINT orders_paid_check
        CHECK ((status = 'paid') = (paid_at IS NOT NULL) AND (paid_at IS NULL) = (payment_ref IS NULL)),
    ADD CONSTRAINT orders_cancelled_check CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL)),
    ADD CONSTRAINT orders_expired_check CHECK ((status = 'expired') = (expired_at IS NOT NULL)),
    ADD CONSTRAINT orders_expires_check CHECK (expires_at IS NULL OR status <> 'rejected'),
    ADD CONSTRAINT orders_return_check
        CHECK ((return_epoch IS NULL) = (return_settled IS NULL)
               AND (return_epoch IS NULL OR status IN ('cancelled', 'expired')));

-- the sweepers' work: each SKU's confirmed orders by deadline
CREATE INDEX orders_expiring ON orders (sku_id, expires_at)
    WHERE status = 'confirmed' AND expires_at IS NOT NULL;
-- units given back to PostgreSQL whose Redis half is still to do
CREATE INDEX orders_return_unsettled ON orders (sku_id) WHERE return_settled = false;
-- a payment reference pays one order
CREATE UNIQUE INDEX orders_payment_ref ON orders (payment_ref) WHERE payment_ref IS NOT NULL;

-- A buyer cancelled an order Redis reserved and no writer has written yet:
-- the writer reads this under the SKU's row lock and writes the order as
-- cancelled, taking nothing.  The canceller holds the same row lock, so
-- either the request is here before the writer looks, or the row is there
-- before the canceller looks.
CREATE TABLE order_cancel_requests (
    order_id      bigint PRIMARY KEY CHECK (order_id > 0),
    sku_id        bigint NOT NULL REFERENCES skus (id),
    user_id       bigint NOT NULL CHECK (user_id > 0),
    requested_at  timestamptz NOT NULL DEFAULT now()
);

-- The ledger: 'cancel' (delta 0) for an order cancelled before it was written,
-- 'return' (delta = its qty) for a confirmed order cancelled or expired.
ALTER TABLE stock_ledger
    DROP CONSTRAINT stock_ledger_kind_check,
    DROP CONSTRAINT stock_ledger_check,
    ADD CONSTRAINT stock_ledger_kind_check
        CHECK (kind IN ('initial', 'admin', 'order', 'rejection', 'cancel', 'return')),
    ADD CONSTRAINT stock_ledger_order_check
        CHECK ((kind IN ('order', 'rejection', 'cancel', 'return')) = (order_id IS NOT NULL)),
    ADD CONSTRAINT stock_ledger_cancel_check CHECK (kind <> 'cancel' OR delta = 0),
    ADD CONSTRAINT stock_ledger_return_check CHECK (kind <> 'return' OR delta > 0);
-- an order's write changes stock at most once, and so does its return
DROP INDEX stock_ledger_one_per_order;
CREATE UNIQUE INDEX stock_ledger_one_per_order ON stock_ledger (order_id)
    WHERE kind IN ('order', 'rejection', 'cancel');
CREATE UNIQUE INDEX stock_ledger_one_return_per_order ON stock_ledger (order_id)
    WHERE kind = 'return';

-- The service: the lifecycle's columns of an order (never its id, buyer, qty
-- or reservation), a SKU's window, and the cancel requests (written once).
REVOKE ALL ON order_cancel_requests FROM PUBLIC;
GRANT SELECT, INSERT ON order_cancel_requests TO seckill_app;
GRANT UPDATE (status, paid_at, payment_ref, cancelled_at, expired_at, return_epoch, return_settled)
    ON orders TO seckill_app;
GRANT UPDATE (payment_window_s) ON skus TO seckill_app;
