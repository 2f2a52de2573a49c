-- many orders of several SKUs in one statement; the primary key makes a
-- replay a no-op.  A confirmed order of a SKU with a payment window ($10[i]
-- seconds, 0 none) must be paid before now() + the window; an order its buyer
-- cancelled before it was written carries the time of the request ($11[i],
-- ms, NULL for the others).
INSERT INTO orders (id, sku_id, user_id, qty, status, reason, idempotency_key, reserved_at,
                    reapply_epoch, expires_at, cancelled_at)
SELECT o.id, o.sku_id, o.user_id, o.qty, o.status, o.reason, o.idem,
       to_timestamp(o.ms::double precision / 1000), o.reapply,
       CASE WHEN o.status = 'confirmed' AND o.window_s > 0
            THEN now() + make_interval(secs => o.window_s) END,
       to_timestamp(o.cancelled_ms::double precision / 1000)
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::integer[], $5::text[], $6::text[],
            $7::text[], $8::bigint[], $9::integer[], $10::integer[], $11::bigint[])
     AS o (sku_id, id, user_id, qty, status, reason, idem, ms, reapply, window_s, cancelled_ms)
ON CONFLICT (id) DO NOTHING
RETURNING id
