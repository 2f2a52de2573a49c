-- A cancel request names the reservation it cancels, not only its order id:
-- after a failover that lost writes, Redis may issue the same order id again,
-- to the same buyer even, and that later order was never asked to be
-- cancelled.  The stream entry id of the reservation (reserve.lua's XADD) is
-- never issued twice.  Requests recorded before this migration name no entry
-- ('') and apply to the buyer's order under that id, as they did.
ALTER TABLE order_cancel_requests ADD COLUMN entry text NOT NULL DEFAULT ''
    CHECK (entry = '' OR entry ~ '^[0-9]{1,20}-[0-9]{1,20}$');
ALTER TABLE order_cancel_requests DROP CONSTRAINT order_cancel_requests_pkey;
ALTER TABLE order_cancel_requests ADD PRIMARY KEY (order_id, entry);
