-- The unique-key lock (`db-lock`, `db-lock-renewed`, `db-lock-reentrant`): one row per held lock.
CREATE TABLE IF NOT EXISTS db_locks (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(191)    NOT NULL,
    owner      CHAR(32)        NOT NULL,
    expires_at TIMESTAMP(6)    NOT NULL,
    holds      INT UNSIGNED    NOT NULL DEFAULT 1,
    CONSTRAINT db_locks_name UNIQUE (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
-- A table made before the hold count existed.
ALTER TABLE db_locks ADD COLUMN IF NOT EXISTS holds INT UNSIGNED NOT NULL DEFAULT 1;
-- The unique-key lock's fencing token per lock name: bumped by every grant, never reset.
CREATE TABLE IF NOT EXISTS db_lock_fences (
    name  VARCHAR(191)    NOT NULL PRIMARY KEY,
    fence BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
-- The row-lock lock (`db-row-lock`): one row per lock name, locked by `SELECT … FOR UPDATE`.
CREATE TABLE IF NOT EXISTS db_row_locks (
    name VARCHAR(191) NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
-- The blocking insert (`db-blocking-insert`): one row per lock name, locked by its upsert.
CREATE TABLE IF NOT EXISTS db_insert_locks (
    name        VARCHAR(191) NOT NULL PRIMARY KEY,
    acquired_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
-- The fencing tokens of the locks held by a transaction: a sequence is not transactional, so a
-- token drawn by a transaction that is rolled back is never drawn again. On a Galera cluster it
-- is made NOCACHE (a cached sequence is refused there): every draw is a write, replicated with
-- the drawing transaction — so a node that has not yet applied another node's draw can repeat it
-- or draw below it (see `row_lock.rs`).
CREATE SEQUENCE IF NOT EXISTS db_lock_tokens
