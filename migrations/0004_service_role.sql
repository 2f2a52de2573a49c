-- 0004: the service logs in as the role seckill_app, which may do what the
-- service's statements do (sql/*.sql, service/store/, seckill-loadtest's
-- checker) and nothing else: no DDL, no TRUNCATE, no DELETE, no ownership.
-- The role is a well-known name that the deployment creates before migrating
-- (scripts/stack.sh does: LOGIN, no other attribute); the owner of the schema
-- (who runs these migrations) grants.  There are no default privileges: a
-- migration that adds a table or a sequence grants in the same file exactly
-- what the service needs on it, and the test suite, which runs as
-- seckill_app, fails on what is missing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'seckill_app') THEN
        RAISE EXCEPTION 'role seckill_app does not exist'
            USING HINT = 'create the service''s login role first: CREATE ROLE seckill_app LOGIN';
    END IF;
END
$$;

-- Only what is granted here, whatever a cluster's defaults were (PUBLIC
-- holds no right on tables; CREATE on schema public is PostgreSQL 15's
-- default for PUBLIC too, and revoked again for older servers).
REVOKE ALL ON skus, orders, sku_epochs, stock_ledger, schema_migrations FROM PUBLIC;
REVOKE ALL ON SEQUENCE redis_epoch_seq FROM PUBLIC;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

-- SKUs: created (sku_insert), read everywhere, and of an existing SKU only
-- the stock (sku_adjust, sku_take_stock) and the fencing token (sku_fence)
-- change; name, limit, window and initial stock never do.
GRANT SELECT, INSERT ON skus TO seckill_app;
GRANT UPDATE (stock, fence_token, updated_at) ON skus TO seckill_app;
-- An SKU created without an id draws one (sku_next_id).
GRANT USAGE ON SEQUENCE skus_id_seq TO seckill_app;

-- Orders, the ledger and the epochs are written once and never changed.
GRANT SELECT, INSERT ON orders, stock_ledger, sku_epochs TO seckill_app;
-- Every load of a SKU into Redis draws an epoch (epoch_new).
GRANT USAGE ON SEQUENCE redis_epoch_seq TO seckill_app;
