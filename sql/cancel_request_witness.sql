-- The witness of a buyer's cancel of an order not written yet (its request
-- row, sql/order_cancel_request.sql; dbtx_set_witness in order_life.c): true
-- when the request of order $1 is there with the transaction's id ($2, its
-- low 32 bits) as its xmin.  Request rows are written once, never updated.
SELECT EXISTS (SELECT 1 FROM order_cancel_requests
               WHERE order_id = $1::bigint
                 AND xmin = ($2::bigint % 4294967296)::text::xid)
