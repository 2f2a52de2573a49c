-- SKUs whose order streams the writers read: every SKU that sells (a parent
-- of buckets sells through its buckets and has no stream), because a stream
-- may hold reservations long after its sale ended (writers down, a backlog)
SELECT id FROM skus WHERE buckets = 1 ORDER BY id
