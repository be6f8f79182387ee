-- The rules a real sale enforces, per product:
--   per_user_limit   units one buyer may hold of the product, over all their purchases;
--   sale_starts_ms,  the sale window in milliseconds since the Unix epoch (NULL: open on that
--   sale_ends_ms     side); a purchase outside it is refused and touches no stock;
--   token_required   a purchase must carry a purchase token, which the service issues to a
--                    buyer only once the window is open.
ALTER TABLE products
    ADD COLUMN per_user_limit BIGINT  NOT NULL DEFAULT 1,
    ADD COLUMN sale_starts_ms BIGINT  NULL,
    ADD COLUMN sale_ends_ms   BIGINT  NULL,
    ADD COLUMN token_required BOOLEAN NOT NULL DEFAULT FALSE;

-- The units each buyer holds of each product whose stock is in the database (the row or the
-- buckets; Redis-held stock keeps its own count in Redis). A purchase claims its units here in
-- its own transaction, before it touches the stock, so that a buyer's concurrent clicks
-- serialise on this one row and never hold more than the limit together; a refused claim rolls
-- back with the purchase.
CREATE TABLE purchase_quota (
    product_id BIGINT UNSIGNED NOT NULL,
    user_id    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    units      BIGINT NOT NULL,
    PRIMARY KEY (product_id, user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
