-- An order has a life: it holds its units as `reserved` until its buyer pays (`paid`), cancels
-- (`cancelled`) or lets its payment deadline pass (`expired`); an expired or cancelled order's
-- units go back to the product's home exactly once.
--
-- `state`, one of:
--   reserved    holds its units; its buyer may pay until `pay_by` (database clock);
--   paid        holds its units for good;
--   expiring,   left `reserved` (deadline passed / buyer cancelled) and its units are on
--   cancelling  their way back to a home outside this database (the Redis counter): the step
--               that gives them back runs after this row changed, and whoever finds the row
--               here — the instance that made the change, the sweep of any instance,
--               `reconcile` — may run it again: it gives back once (see `app::lifecycle`);
--   expired,    left `reserved` and its units are back home (for a home in this database,
--   cancelled   in the transaction that changed the state);
--   voided      a purchase `reconcile` fenced out (holds nothing, as before).
-- Orders of the earlier, final kind (`placed`) were sales for good: they become `paid`.
--
-- `pay_by` is the payment deadline (NULL: none; set at insert from the product's payment
-- window), `ended_at` when the order left `reserved` (paid, expiring or cancelling), and
-- `returned_at` when its units reached their home.
ALTER TABLE orders
    ALTER COLUMN state SET DEFAULT 'reserved',
    ADD COLUMN pay_by      TIMESTAMP(6) NULL DEFAULT NULL,
    ADD COLUMN ended_at    TIMESTAMP(6) NULL DEFAULT NULL,
    ADD COLUMN returned_at TIMESTAMP(6) NULL DEFAULT NULL,
    -- The sweep's two questions, each a range of this index: which reserved orders are past
    -- their deadline (oldest first), and which returns are still on their way.
    ADD KEY orders_due (state, pay_by);

UPDATE orders SET state = 'paid' WHERE state = 'placed';

-- How long a buyer has to pay an order of the product, in milliseconds (set at its reset).
ALTER TABLE products
    ADD COLUMN payment_window_ms BIGINT NOT NULL DEFAULT 900000;
