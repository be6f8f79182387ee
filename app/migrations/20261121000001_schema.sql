-- Products, their orders, and the lock table of the `db-lock` strategies.

CREATE TABLE products (
    id            BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    -- Signed on purpose: the `unchecked` strategy must be able to drive it below zero.
    stock         BIGINT          NOT NULL,
    initial_stock BIGINT          NOT NULL,
    -- Bumped by every write of the `optimistic` strategy (compare-and-set).
    version       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    -- Highest fencing token that claimed this row (fenced lock strategies).
    fence         BIGINT UNSIGNED NOT NULL DEFAULT 0,
    updated_at    TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE orders (
    id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    product_id    BIGINT UNSIGNED NOT NULL,
    user_id       VARCHAR(64)     NOT NULL,
    quantity      INT UNSIGNED    NOT NULL,
    strategy      VARCHAR(64)     NOT NULL,
    -- The client's idempotency key: a retried click finds its first order here.
    request_id    VARCHAR(128)    NOT NULL,
    fencing_token BIGINT UNSIGNED NULL,
    created_at    TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT orders_request_id UNIQUE (request_id),
    KEY orders_product (product_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- One row per held lock: inserting the row is acquiring it (the unique name lets one insert
-- win), its AUTO_INCREMENT id is the fencing token, and expires_at (database clock) bounds it.
CREATE TABLE db_locks (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(191)    NOT NULL,
    owner      CHAR(32)        NOT NULL,
    expires_at TIMESTAMP(6)    NOT NULL,
    CONSTRAINT db_locks_name UNIQUE (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
