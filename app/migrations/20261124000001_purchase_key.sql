-- A purchase is named by its buyer's request id, within one product and one buyer: the same
-- click of the same buyer on the same product. Ids and user ids compare byte for byte
-- (`utf8mb4_nopad_bin`: no case folding, no accent folding, no trailing-space padding), as the
-- Redis scripts and the service's own code compare them, so `CASE-0` and `case-0`, or `café`
-- written as one code point and as `e` plus a combining accent, are different purchases
-- everywhere.
--
-- `state`: `placed` for an order that holds its units; `voided` for a purchase that
-- `reconcile` presumed lost and fenced out (its units went back on sale; the row keeps the
-- purchase's name, so that a late insert of that purchase fails instead of selling them twice).
ALTER TABLE orders
    MODIFY user_id    VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    MODIFY request_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    ADD COLUMN state  VARCHAR(16)  NOT NULL DEFAULT 'placed',
    DROP INDEX orders_request_id,
    DROP INDEX orders_product,
    ADD CONSTRAINT orders_purchase UNIQUE (product_id, user_id, request_id);
