//! The two engines and their isolation levels: every place where MariaDB and PostgreSQL differ
//! for the matrix — placeholders, casts, how a session sets its level, what a refused
//! transaction is called — is in this file.
//!
//! A [`Session`] is one connection whose every transaction runs at one [`Level`]: the level is
//! set for the session when it opens and read back, so a cell never measures a level it did not
//! get.

use std::fmt;

use serde::{Deserialize, Serialize};
use sqlx::Connection as _;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError};
use sqlx::postgres::{PgConnection, PgDatabaseError};

/// A database engine the matrix runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    Mariadb,
    Postgres,
}

impl Engine {
    pub const ALL: [Engine; 2] = [Engine::Mariadb, Engine::Postgres];

    pub fn name(self) -> &'static str {
        match self {
            Engine::Mariadb => "MariaDB",
            Engine::Postgres => "PostgreSQL",
        }
    }

    /// The levels the matrix runs on this engine, in the order of their strength.
    pub fn levels(self) -> &'static [Level] {
        match self {
            Engine::Mariadb => &[
                Level::ReadCommitted,
                Level::RepeatableRead,
                Level::SnapshotIsolation,
                Level::Serializable,
            ],
            Engine::Postgres => &[
                Level::ReadCommitted,
                Level::RepeatableRead,
                Level::Serializable,
            ],
        }
    }
}

/// A transaction isolation level, as a session asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    ReadCommitted,
    RepeatableRead,
    /// MariaDB's REPEATABLE READ with `innodb_snapshot_isolation = ON` (10.6.18 and 10.11.8 on;
    /// off by default before 11.8): a write to a row another transaction changed after this
    /// one's snapshot fails with error 1020 instead of overwriting it.
    SnapshotIsolation,
    Serializable,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::ReadCommitted => "READ COMMITTED",
            Level::RepeatableRead => "REPEATABLE READ",
            Level::SnapshotIsolation => "REPEATABLE READ + snapshot isolation",
            Level::Serializable => "SERIALIZABLE",
        }
    }

    /// The short name of a matrix column.
    pub fn short(self) -> &'static str {
        match self {
            Level::ReadCommitted => "RC",
            Level::RepeatableRead => "RR",
            Level::SnapshotIsolation => "RR+SI",
            Level::Serializable => "SER",
        }
    }

    /// The SQL words of the level (both engines spell them alike).
    fn sql(self) -> &'static str {
        match self {
            Level::ReadCommitted => "READ COMMITTED",
            Level::RepeatableRead | Level::SnapshotIsolation => "REPEATABLE READ",
            Level::Serializable => "SERIALIZABLE",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The statements the failures are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stmt {
    /// `(id)` → the product's stock: a plain read, no lock asked for.
    ReadStock,
    /// `(stock, id)`: writes an absolute value computed by the client.
    SetStock,
    /// `(quantity, id)`: deducts from whatever the row holds, unguarded.
    TakeStock,
    /// `(quantity, id, quantity)`: deducts only while enough is left; one row affected or none.
    TakeIfLeft,
    /// `(product, buyer)` → how many orders the buyer has of the product.
    CountOrders,
    /// `(product, buyer, quantity)`.
    InsertOrder,
    /// `(id, stock)`.
    InsertProduct,
    /// `(product)` → the units its orders hold.
    UnitsSold,
    /// `(product)` → its orders past one per buyer.
    ExtraOrders,
}

fn sql(engine: Engine, stmt: Stmt) -> &'static str {
    use Engine::*;
    use Stmt::*;
    match (engine, stmt) {
        (Mariadb, ReadStock) => "SELECT stock FROM iso_stock WHERE id = ?",
        (Postgres, ReadStock) => "SELECT stock FROM iso_stock WHERE id = $1",
        (Mariadb, SetStock) => "UPDATE iso_stock SET stock = ? WHERE id = ?",
        (Postgres, SetStock) => "UPDATE iso_stock SET stock = $1 WHERE id = $2",
        (Mariadb, TakeStock) => "UPDATE iso_stock SET stock = stock - ? WHERE id = ?",
        (Postgres, TakeStock) => "UPDATE iso_stock SET stock = stock - $1 WHERE id = $2",
        (Mariadb, TakeIfLeft) => {
            "UPDATE iso_stock SET stock = stock - ? WHERE id = ? AND stock >= ?"
        }
        (Postgres, TakeIfLeft) => {
            "UPDATE iso_stock SET stock = stock - $1 WHERE id = $2 AND stock >= $3"
        }
        (Mariadb, CountOrders) => {
            "SELECT COUNT(*) FROM iso_orders WHERE product_id = ? AND buyer = ?"
        }
        (Postgres, CountOrders) => {
            "SELECT COUNT(*) FROM iso_orders WHERE product_id = $1 AND buyer = $2"
        }
        (Mariadb, InsertOrder) => {
            "INSERT INTO iso_orders (product_id, buyer, quantity) VALUES (?, ?, ?)"
        }
        (Postgres, InsertOrder) => {
            "INSERT INTO iso_orders (product_id, buyer, quantity) VALUES ($1, $2, $3)"
        }
        (Mariadb, InsertProduct) => "INSERT INTO iso_stock (id, stock) VALUES (?, ?)",
        (Postgres, InsertProduct) => "INSERT INTO iso_stock (id, stock) VALUES ($1, $2)",
        (Mariadb, UnitsSold) => {
            "SELECT CAST(COALESCE(SUM(quantity), 0) AS SIGNED) FROM iso_orders \
             WHERE product_id = ?"
        }
        (Postgres, UnitsSold) => {
            "SELECT COALESCE(SUM(quantity), 0)::bigint FROM iso_orders WHERE product_id = $1"
        }
        (Mariadb, ExtraOrders) => {
            "SELECT CAST(COUNT(*) - COUNT(DISTINCT buyer) AS SIGNED) FROM iso_orders \
             WHERE product_id = ?"
        }
        (Postgres, ExtraOrders) => {
            "SELECT COUNT(*) - COUNT(DISTINCT buyer) FROM iso_orders WHERE product_id = $1"
        }
    }
}

/// The matrix's two tables; the index on the orders is the one a buyer's orders are read
/// through, so that SERIALIZABLE locks (MariaDB) or tracks (PostgreSQL) a buyer's range only.
pub fn schema(engine: Engine) -> &'static str {
    match engine {
        Engine::Mariadb => {
            "CREATE TABLE iso_stock (id BIGINT PRIMARY KEY, stock BIGINT NOT NULL) ENGINE=InnoDB;
             CREATE TABLE iso_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY,
                 product_id BIGINT NOT NULL, buyer BIGINT NOT NULL, quantity BIGINT NOT NULL,
                 KEY buyer_orders (product_id, buyer)) ENGINE=InnoDB;"
        }
        Engine::Postgres => {
            "CREATE TABLE iso_stock (id BIGINT PRIMARY KEY, stock BIGINT NOT NULL);
             CREATE TABLE iso_orders (id BIGSERIAL PRIMARY KEY,
                 product_id BIGINT NOT NULL, buyer BIGINT NOT NULL, quantity BIGINT NOT NULL);
             CREATE INDEX buyer_orders ON iso_orders (product_id, buyer);"
        }
    }
}

/// Why an engine refused a transaction that a correct client runs again.
pub fn refusal(engine: Engine, e: &sqlx::Error) -> Option<&'static str> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    match engine {
        Engine::Mariadb => match db.try_downcast_ref::<MySqlDatabaseError>()?.number() {
            1213 => Some("1213 deadlock"),
            1020 => Some("1020 record changed"),
            _ => None,
        },
        Engine::Postgres => match db.try_downcast_ref::<PgDatabaseError>()?.code() {
            "40001" => Some("40001 serialization failure"),
            "40P01" => Some("40P01 deadlock"),
            _ => None,
        },
    }
}

/// One connection whose transactions run at one level.
pub enum Session {
    Mariadb(MySqlConnection),
    Postgres(PgConnection),
}

/// A server the matrix reaches: its engine and the URL of the matrix's database on it.
#[derive(Debug, Clone)]
pub struct Server {
    pub engine: Engine,
    pub url: String,
}

impl Session {
    /// Opens a connection and sets its level for every transaction it runs; fails if the
    /// server reads back another level (or has no snapshot isolation to turn on).
    pub async fn open(server: &Server, level: Level) -> anyhow::Result<Session> {
        let mut session = match server.engine {
            Engine::Mariadb => Session::Mariadb(MySqlConnection::connect(&server.url).await?),
            Engine::Postgres => Session::Postgres(PgConnection::connect(&server.url).await?),
        };
        let (set, check): (String, &str) = match (&session, level) {
            (Session::Mariadb(_), _) => (
                format!(
                    "SET SESSION TRANSACTION ISOLATION LEVEL {}; \
                     SET SESSION innodb_snapshot_isolation = {}; \
                     SET SESSION innodb_lock_wait_timeout = 20",
                    level.sql(),
                    if level == Level::SnapshotIsolation {
                        "ON"
                    } else {
                        "OFF"
                    }
                ),
                "SELECT CONCAT(@@tx_isolation, IF(@@innodb_snapshot_isolation, ' SI', ''))",
            ),
            (Session::Postgres(_), Level::SnapshotIsolation) => {
                anyhow::bail!("PostgreSQL's REPEATABLE READ is snapshot isolation already")
            }
            (Session::Postgres(_), _) => (
                format!(
                    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {}",
                    level.sql()
                ),
                "SELECT upper(current_setting('default_transaction_isolation'))",
            ),
        };
        session.batch(set).await?;
        let got: String = match &mut session {
            Session::Mariadb(c) => sqlx::query_scalar(check).fetch_one(c).await?,
            Session::Postgres(c) => sqlx::query_scalar(check).fetch_one(c).await?,
        };
        let want = match (server.engine, level) {
            (Engine::Mariadb, Level::SnapshotIsolation) => "REPEATABLE-READ SI".to_string(),
            (Engine::Mariadb, _) => level.sql().replace(' ', "-"),
            (Engine::Postgres, _) => level.sql().to_string(),
        };
        anyhow::ensure!(
            got == want,
            "{} reads back isolation {got:?} where {want:?} was set",
            server.engine.name()
        );
        Ok(session)
    }

    pub fn engine(&self) -> Engine {
        match self {
            Session::Mariadb(_) => Engine::Mariadb,
            Session::Postgres(_) => Engine::Postgres,
        }
    }

    /// Statements without arguments, sent as one text (set-up, and the transaction's edges).
    pub async fn batch(&mut self, text: impl Into<String>) -> Result<(), sqlx::Error> {
        let text = sqlx::AssertSqlSafe(text.into());
        match self {
            Session::Mariadb(c) => sqlx::raw_sql(text).execute(c).await.map(drop),
            Session::Postgres(c) => sqlx::raw_sql(text).execute(c).await.map(drop),
        }
    }

    /// Starts a transaction at the session's level.
    pub async fn begin(&mut self) -> Result<(), sqlx::Error> {
        self.batch("BEGIN").await
    }

    pub async fn commit(&mut self) -> Result<(), sqlx::Error> {
        self.batch("COMMIT").await
    }

    /// Ends a transaction an error interrupted (the engine may have rolled it back already).
    pub async fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK").await;
    }

    /// Runs `stmt` and reads the one number it answers.
    pub async fn number(&mut self, stmt: Stmt, args: &[i64]) -> Result<i64, sqlx::Error> {
        let text = sql(self.engine(), stmt);
        match self {
            Session::Mariadb(c) => {
                let mut q = sqlx::query_scalar(text);
                for a in args {
                    q = q.bind(*a);
                }
                q.fetch_one(c).await
            }
            Session::Postgres(c) => {
                let mut q = sqlx::query_scalar(text);
                for a in args {
                    q = q.bind(*a);
                }
                q.fetch_one(c).await
            }
        }
    }

    /// Runs `stmt` and counts the rows it changed.
    pub async fn execute(&mut self, stmt: Stmt, args: &[i64]) -> Result<u64, sqlx::Error> {
        let text = sql(self.engine(), stmt);
        match self {
            Session::Mariadb(c) => {
                let mut q = sqlx::query(text);
                for a in args {
                    q = q.bind(*a);
                }
                q.execute(c).await.map(|r| r.rows_affected())
            }
            Session::Postgres(c) => {
                let mut q = sqlx::query(text);
                for a in args {
                    q = q.bind(*a);
                }
                q.execute(c).await.map(|r| r.rows_affected())
            }
        }
    }

    /// The server's version, as it names itself.
    pub async fn version(&mut self) -> Result<String, sqlx::Error> {
        match self {
            Session::Mariadb(c) => sqlx::query_scalar("SELECT VERSION()").fetch_one(c).await,
            Session::Postgres(c) => {
                sqlx::query_scalar("SELECT current_setting('server_version')")
                    .fetch_one(c)
                    .await
            }
        }
    }

    pub async fn close(self) {
        let _ = match self {
            Session::Mariadb(c) => c.close().await,
            Session::Postgres(c) => c.close().await,
        };
    }
}
