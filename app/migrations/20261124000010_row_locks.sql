-- The database locks beyond the lock table, as the locks crate defines them
-- (`locks::database::SCHEMA`; created there too when missing).
-- The unique-key lock: its owner's hold count (`db-lock-reentrant`), and the fencing token per
-- lock name, bumped by every grant, never reset.
ALTER TABLE db_locks ADD COLUMN IF NOT EXISTS holds INT UNSIGNED NOT NULL DEFAULT 1;
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
-- token drawn by a transaction that is rolled back is never drawn again.
CREATE SEQUENCE IF NOT EXISTS db_lock_tokens;
