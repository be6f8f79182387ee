CREATE TABLE IF NOT EXISTS db_locks (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(191)    NOT NULL,
    owner      CHAR(32)        NOT NULL,
    expires_at TIMESTAMP(6)    NOT NULL,
    CONSTRAINT db_locks_name UNIQUE (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
-- The fencing token per lock name: bumped by every grant, never reset.
CREATE TABLE IF NOT EXISTS db_lock_fences (
    name  VARCHAR(191)    NOT NULL PRIMARY KEY,
    fence BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
