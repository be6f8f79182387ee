-- The stock of a product whose home is `buckets` (the `sharded` strategy): split over several
-- rows so that concurrent buyers lock different rows. The product's stock is the sum of its
-- buckets; `products.stock` stays 0 for it.
CREATE TABLE stock_buckets (
    product_id BIGINT UNSIGNED   NOT NULL,
    bucket     SMALLINT UNSIGNED NOT NULL,
    -- Signed like `products.stock`; every write to it is conditional, so it stays >= 0.
    stock      BIGINT            NOT NULL,
    PRIMARY KEY (product_id, bucket)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
