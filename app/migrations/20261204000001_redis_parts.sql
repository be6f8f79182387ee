-- A product whose stock Redis keeps split over parts (home `redis-split`, see
-- app/src/redis_stock/split.rs) records how many: a buyer's purchases are charged in the part
-- her user id hashes to, so every instance must count the parts alike.
--   redis_parts   the parts of a `redis-split` product's stock; 0 for any other home
ALTER TABLE products
    ADD COLUMN redis_parts INT UNSIGNED NOT NULL DEFAULT 0;
