-- 0002: fencing tokens (invariant I5).  Every writer of a SKU's row presents
-- the token of its lock acquisition; PostgreSQL accepts it only if no newer
-- holder has written, so a holder whose lease expired during a pause cannot
-- commit what a newer holder could observe.
ALTER TABLE skus ADD COLUMN fence_token bigint NOT NULL DEFAULT 0 CHECK (fence_token >= 0);
