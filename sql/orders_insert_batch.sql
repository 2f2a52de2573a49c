-- many orders in one statement; the primary key makes a replay a no-op
INSERT INTO orders (id, sku_id, user_id, qty, status, reason, idempotency_key, reserved_at,
                    reapply_epoch)
SELECT o.id, $1, o.user_id, o.qty, o.status, o.reason, o.idem,
       to_timestamp(o.ms::double precision / 1000), o.reapply
FROM unnest($2::bigint[], $3::bigint[], $4::integer[], $5::text[], $6::text[], $7::text[],
            $8::bigint[], $9::integer[])
     AS o (id, user_id, qty, status, reason, idem, ms, reapply)
ON CONFLICT (id) DO NOTHING
RETURNING id
