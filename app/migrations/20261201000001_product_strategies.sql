-- The strategies that may sell a product, comma-separated names, set by its reset; empty: any
-- the deployment offers (rows made before the column, or without the admin API).
ALTER TABLE products
    ADD COLUMN strategies VARCHAR(1024) NOT NULL DEFAULT '';
