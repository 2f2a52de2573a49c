-- SKUs whose order streams the writers read: every SKU, because a stream may
-- hold reservations long after its sale ended (writers down, a backlog)
SELECT id FROM skus ORDER BY id
