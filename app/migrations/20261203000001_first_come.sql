-- A product may be sold first come, first served: each click takes its place in one queue
-- across every instance when it comes in (kept in Redis, see app/src/first_come), and only
-- as many clicks as there are units are let through to buy.
--   first_come   the product's clicks are served in the order they came
ALTER TABLE products
    ADD COLUMN first_come BOOLEAN NOT NULL DEFAULT FALSE;
