-- The PostgreSQL-only flash sale (what a team without Redis would build), for
-- `make bench`: one hot SKU row guarded by `stock >= qty`, one order row per
-- sale.  Lives in its own schema so it never touches the service's tables.
DROP SCHEMA IF EXISTS lt_pgonly CASCADE;
CREATE SCHEMA lt_pgonly;
CREATE TABLE lt_pgonly.skus (
    id     bigint PRIMARY KEY,
    stock  bigint NOT NULL CHECK (stock >= 0)
);
CREATE TABLE lt_pgonly.orders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku_id      bigint NOT NULL REFERENCES lt_pgonly.skus (id),
    user_id     bigint NOT NULL,
    qty         integer NOT NULL CHECK (qty > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON lt_pgonly.orders (sku_id, user_id);
INSERT INTO lt_pgonly.skus VALUES (1, 1000000000);
