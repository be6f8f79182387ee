-- The generation of a product's Redis-held stock: every reset raises it, and the reset writes it
-- into Redis beside the counter, as the counter's marker (`stock:<id>:epoch`). A Redis whose
-- marker is gone, or older than this, lost the stock the database says it holds — it restarted
-- without its data, or it is a replica or a backup from before the reset — and the purchase
-- scripts refuse the product until `reconcile` rebuilds its keys from the orders and writes the
-- marker back. Products already kept in Redis start at 1: their counters have no marker yet, so
-- they are refused until reconciled, as a Redis that cannot vouch for them should be.
ALTER TABLE products ADD COLUMN redis_epoch BIGINT UNSIGNED NOT NULL DEFAULT 0;
UPDATE products SET redis_epoch = 1 WHERE home = 'redis';
