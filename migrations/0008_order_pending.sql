-- 0008: a durable order answered "202 pending" is recorded here first.
--
-- In durable mode a buyer waits for the writer's commit; when it does not
-- come within order_ack_wait_ms (a slow writer, or Redis going down) the
-- answer falls back to 202 pending.  Before that answer is sent, the
-- reservation is written here, so that a 202 promises what a 201 does: the
-- order ends confirmed or rejected, never vanished, whatever Redis loses
-- afterwards.  The writer writes the order from the stream as usual; when
-- Redis lost the reservation (restarted empty, a failover), the stream
-- entry never comes and the reconciler settles the record itself, under the
-- SKU's lock and fenced row (service/sku/pending_settle.c).  A record is
-- settled once: 'written' when the order's row is its outcome (the writer's
-- or the settler's), 'id_conflict' when Redis issued its id again and the
-- row belongs to another reservation (nothing was taken for this one).
CREATE TABLE order_pending (
    order_id         bigint NOT NULL CHECK (order_id > 0),
    -- the reservation's stream entry id: Redis may issue an order id twice
    -- after losing writes, never an entry id
    entry_id         text NOT NULL CHECK (entry_id ~ '^[0-9]+-[0-9]+$'),
    -- a bucket's own id.  No foreign key on purpose: its check would take a
    -- share lock on the SKU's row, which the writer a 202 gave up waiting
    -- for may be holding (stalled inside its transaction), and the record
    -- must not wait for it.  The id comes from a reservation of a SKU that
    -- exists, and SKUs are never deleted.
    sku_id           bigint NOT NULL CHECK (sku_id > 0),
    user_id          bigint NOT NULL CHECK (user_id > 0),
    qty              integer NOT NULL CHECK (qty > 0),
    epoch            integer NOT NULL CHECK (epoch > 0),    -- order_id / 2^30: the SKU load
    idempotency_key  text CHECK (length(idempotency_key) BETWEEN 1 AND 200),  -- the buyer's own
    reserved_at      timestamptz NOT NULL,  -- the entry's time, as the writer records it
    created_at       timestamptz NOT NULL DEFAULT now(),
    settled_at       timestamptz,
    outcome          text CHECK (outcome IN ('written', 'id_conflict')),
    PRIMARY KEY (order_id, entry_id),
    CHECK ((settled_at IS NULL) = (outcome IS NULL))
);
-- the settler's work: each SKU's records not settled yet, oldest first
CREATE INDEX order_pending_unsettled ON order_pending (sku_id, created_at)
    WHERE settled_at IS NULL;

-- The service records (the 202 path), reads (lookups, the settler) and
-- settles them; it never changes what a record says about the reservation.
REVOKE ALL ON order_pending FROM PUBLIC;
GRANT SELECT, INSERT ON order_pending TO seckill_app;
GRANT UPDATE (settled_at, outcome) ON order_pending TO seckill_app;
