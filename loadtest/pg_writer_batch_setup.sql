-- The order writer's tables for `make bench`'s pgbench of the writer's own
-- batch statements (loadtest/pg_writer_batch.sql): copies of the service's
-- skus, sku_epochs, orders and stock_ledger (columns, defaults, CHECKs,
-- indexes, identities: LIKE ... INCLUDING ALL) with their foreign keys, in a
-- schema of their own, so the bench never touches the service's rows.  Run
-- by the owner role; psql -v clients=N makes one SKU per pgbench client.
DROP SCHEMA IF EXISTS lt_pgbatch CASCADE;
CREATE SCHEMA lt_pgbatch;
CREATE TABLE lt_pgbatch.skus (LIKE public.skus INCLUDING ALL);
CREATE TABLE lt_pgbatch.sku_epochs (LIKE public.sku_epochs INCLUDING ALL,
    FOREIGN KEY (sku_id) REFERENCES lt_pgbatch.skus (id));
CREATE TABLE lt_pgbatch.orders (LIKE public.orders INCLUDING ALL,
    FOREIGN KEY (sku_id) REFERENCES lt_pgbatch.skus (id));
CREATE TABLE lt_pgbatch.stock_ledger (LIKE public.stock_ledger INCLUDING ALL,
    FOREIGN KEY (sku_id) REFERENCES lt_pgbatch.skus (id),
    FOREIGN KEY (order_id) REFERENCES lt_pgbatch.orders (id));
-- one batch number per transaction: order ids and fencing tokens from it
CREATE SEQUENCE lt_pgbatch.batches;
INSERT INTO lt_pgbatch.skus (id, name, stock, initial_stock, per_user_limit)
SELECT g, 'pgbench ' || g, 1000000000000, 1000000000000, 1000000
FROM generate_series(1, :clients) AS g;
INSERT INTO lt_pgbatch.sku_epochs (epoch, sku_id) SELECT g, g FROM generate_series(1, :clients) AS g;
ANALYZE lt_pgbatch.skus;
