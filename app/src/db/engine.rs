//! The two engines the service runs on — MariaDB (or MySQL) and PostgreSQL — behind one set of
//! types, chosen at start-up by the deployment's `DATABASE_URL` (`mysql://…` or
//! `postgres://…`).
//!
//! Every statement of the service is written in this folder's modules once per engine where
//! the engines' SQL differs ([`Sql`] with both texts), and once for both where it differs only
//! in how parameters are written ([`sql!`](crate::db::engine::sql): MariaDB's `?`, PostgreSQL's `$1`,
//! `$2`, …, rewritten at compile time). The Rust that binds and runs a statement is written
//! once and compiled once per engine by [`each_engine!`](crate::db::engine::each_engine), so a
//! statement's parameters and the types of its answer are checked against both drivers.
//!
//! The three macros are exported (`app::each_engine!`, `app::sql!`, `app::execute!`) for the
//! readers of the service's rows beside it: the benchmark reads what the app wrote, on either
//! engine, the same way.
//!
//! The difference of types is settled in [`super::whole`]: PostgreSQL has no unsigned integers,
//! so ids and quantities are bound as `i64` ([`signed`]) and read back through [`Whole`].

use sqlx::Transaction;

use crate::api::{Service, Strategy};
use sqlx::mysql::{MySql, MySqlConnection, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};

pub use super::whole::{MaybeWhole, Whole, signed};

/// One of two things, by engine: a pool, a transaction, a connection.
#[derive(Debug, Clone)]
pub enum Engines<M, P> {
    MySql(M),
    Postgres(P),
}

/// Which engine a database runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// MariaDB, or MySQL: `mysql://…`.
    MySql,
    /// PostgreSQL: `postgres://…` (or `postgresql://…`).
    Postgres,
}

impl Engine {
    /// The engine a database URL names, by its scheme; `None` for any other scheme.
    pub fn of_url(url: &str) -> Option<Engine> {
        let scheme = url.split_once("://").map(|(s, _)| s)?;
        match scheme {
            "mysql" | "mariadb" => Some(Engine::MySql),
            "postgres" | "postgresql" => Some(Engine::Postgres),
            _ => None,
        }
    }

    /// Whether a deployment on this engine can run `strategy`: every strategy but PostgreSQL's
    /// advisory locks, which are that engine's own, runs on both — the locks of the database
    /// (`db-lock` and its forms, `db-row-lock`, `db-blocking-insert`) are written in each
    /// engine's SQL.
    pub fn runs(self, strategy: Strategy) -> bool {
        match (strategy.lock_backend(), self) {
            (Some(b), Engine::MySql) => !b.uses_postgres(),
            (_, Engine::Postgres) | (None, Engine::MySql) => true,
        }
    }

    /// Every strategy a deployment on this engine can run, in catalogue order.
    pub fn strategies(self) -> Vec<Strategy> {
        (Strategy::ALL.iter().copied())
            .filter(|&s| self.runs(s))
            .collect()
    }

    /// The service `strategy` runs on in a deployment on this engine: the catalogue names
    /// MariaDB for the strategies of the rows and of the database's locks, which are
    /// PostgreSQL's on PostgreSQL.
    pub fn service_of(self, strategy: Strategy) -> Service {
        match (self, strategy.service()) {
            (Engine::Postgres, Service::Mariadb) => Service::Postgres,
            (_, service) => service,
        }
    }
}

/// The service's database: a pool of either engine.
pub type Db = Engines<MySqlPool, PgPool>;

/// A transaction of either engine, begun by [`Db::begin`] (`Tx<'static>`, on a connection of
/// its own) or [`Pooled::begin`]: committed by [`Tx::commit`], rolled back by [`Tx::rollback`]
/// or when dropped (on the connection's next use).
pub type Tx<'c> = Engines<Transaction<'c, MySql>, Transaction<'c, Postgres>>;

/// A connection of either engine taken from a [`Db`]'s pool, handed back when dropped.
pub type Pooled = Engines<PoolConnection<MySql>, PoolConnection<Postgres>>;

/// A borrowed connection of either engine — of a transaction, or pooled — that a statement
/// runs on ([`Tx::conn`], [`Pooled::conn`]).
pub type Conn<'c> = Engines<&'c mut MySqlConnection, &'c mut PgConnection>;

/// A borrowed pool of either engine, that a statement takes any free connection of
/// ([`Db::pool`]).
pub type PoolRef<'p> = Engines<&'p MySqlPool, &'p PgPool>;

impl Db {
    /// Which engine the pool's database runs.
    pub fn engine(&self) -> Engine {
        match self {
            Engines::MySql(_) => Engine::MySql,
            Engines::Postgres(_) => Engine::Postgres,
        }
    }

    /// The pool, for one statement on any free connection.
    pub fn pool(&self) -> PoolRef<'_> {
        match self {
            Engines::MySql(p) => Engines::MySql(p),
            Engines::Postgres(p) => Engines::Postgres(p),
        }
    }

    /// Begins a transaction on a connection of the pool.
    pub async fn begin(&self) -> Result<Tx<'static>, sqlx::Error> {
        Ok(match self {
            Engines::MySql(p) => Engines::MySql(p.begin().await?),
            Engines::Postgres(p) => Engines::Postgres(p.begin().await?),
        })
    }

    /// A connection of the pool, held until dropped.
    pub async fn acquire(&self) -> Result<Pooled, sqlx::Error> {
        Ok(match self {
            Engines::MySql(p) => Engines::MySql(p.acquire().await?),
            Engines::Postgres(p) => Engines::Postgres(p.acquire().await?),
        })
    }

    /// Closes the pool: its connections are closed as they come back.
    pub async fn close(&self) {
        match self {
            Engines::MySql(p) => p.close().await,
            Engines::Postgres(p) => p.close().await,
        }
    }
}

impl<'c> Tx<'c> {
    /// The transaction's connection, for one statement.
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Engines::MySql(tx) => Engines::MySql(&mut **tx),
            Engines::Postgres(tx) => Engines::Postgres(&mut **tx),
        }
    }

    /// Commits the transaction.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Engines::MySql(tx) => tx.commit().await,
            Engines::Postgres(tx) => tx.commit().await,
        }
    }

    /// Rolls the transaction back.
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Engines::MySql(tx) => tx.rollback().await,
            Engines::Postgres(tx) => tx.rollback().await,
        }
    }
}

impl Pooled {
    /// The connection, for one statement.
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Engines::MySql(c) => Engines::MySql(&mut **c),
            Engines::Postgres(c) => Engines::Postgres(&mut **c),
        }
    }

    /// Begins a transaction on the connection.
    pub async fn begin(&mut self) -> Result<Tx<'_>, sqlx::Error> {
        use sqlx::Connection;
        Ok(match self {
            Engines::MySql(c) => Engines::MySql(c.begin().await?),
            Engines::Postgres(c) => Engines::Postgres(c.begin().await?),
        })
    }
}

impl<'c> Conn<'c> {
    /// The same connection, borrowed again for one more statement.
    pub fn reborrow(&mut self) -> Conn<'_> {
        match self {
            Engines::MySql(c) => Engines::MySql(&mut **c),
            Engines::Postgres(c) => Engines::Postgres(&mut **c),
        }
    }
}

/// A statement's text on each engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sql {
    pub mysql: &'static str,
    pub postgres: &'static str,
}

/// The engine side of an [`each_engine!`](crate::db::engine::each_engine) body: MariaDB's.
#[derive(Debug, Clone, Copy)]
pub struct OnMySql;

/// The engine side of an [`each_engine!`](crate::db::engine::each_engine) body: PostgreSQL's.
#[derive(Debug, Clone, Copy)]
pub struct OnPostgres;

impl OnMySql {
    /// The statement's MariaDB text.
    pub fn sql(self, sql: Sql) -> &'static str {
        sql.mysql
    }

    /// A statement made at run time, written for MariaDB (`?` parameters) as it is.
    pub fn text(self, mysql: String) -> sqlx::AssertSqlSafe<String> {
        sqlx::AssertSqlSafe(mysql)
    }

    /// The database clock, to the microsecond.
    pub fn now(self) -> &'static str {
        "NOW(6)"
    }

    /// Of two things, MariaDB's.
    pub fn pick<T>(self, mysql: T, _postgres: T) -> T {
        mysql
    }

    /// A statement built piece by piece, starting with `init` (MariaDB's parameters).
    pub fn builder(self, init: &str) -> sqlx::QueryBuilder<MySql> {
        sqlx::QueryBuilder::new(init)
    }
}

impl OnPostgres {
    /// The statement's PostgreSQL text.
    pub fn sql(self, sql: Sql) -> &'static str {
        sql.postgres
    }

    /// A statement made at run time, written with MariaDB's `?` parameters, with
    /// PostgreSQL's numbered ones instead.
    pub fn text(self, mysql: String) -> sqlx::AssertSqlSafe<String> {
        sqlx::AssertSqlSafe(numbered(&mysql))
    }

    /// The database clock, to the microsecond: the statement's own time, as MariaDB's `NOW(6)`
    /// is (PostgreSQL's `now()` is the transaction's start).
    pub fn now(self) -> &'static str {
        "clock_timestamp()"
    }

    /// Of two things, PostgreSQL's.
    pub fn pick<T>(self, _mysql: T, postgres: T) -> T {
        postgres
    }

    /// A statement built piece by piece, starting with `init` (PostgreSQL's parameters).
    pub fn builder(self, init: &str) -> sqlx::QueryBuilder<Postgres> {
        sqlx::QueryBuilder::new(init)
    }
}

/// Runs `$body` on `$target` — a [`Conn`], [`PoolRef`] or anything else of [`Engines`] —
/// compiled once per engine: in each, `$c` is that engine's executor and `$e` its side
/// ([`OnMySql`], [`OnPostgres`]), which picks the statement's text (`$e.sql(STATEMENT)`).
/// Both bodies must give the same type.
#[macro_export]
macro_rules! each_engine {
    ($target:expr, |$c:ident, $e:ident| $body:expr) => {
        match $target {
            $crate::db::engine::Engines::MySql($c) => {
                let $e = $crate::db::engine::OnMySql;
                $body
            }
            $crate::db::engine::Engines::Postgres($c) => {
                let $e = $crate::db::engine::OnPostgres;
                $body
            }
        }
    };
}
pub use crate::each_engine;

/// Runs the statement `$sql` (an [`Sql`]) on `$target` with the parameters given, in order, on
/// either engine ([`each_engine!`]): the rows it changed.
#[macro_export]
macro_rules! execute {
    ($target:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
        $crate::db::engine::each_engine!($target, |c, e| sqlx::query(e.sql($sql))
            $(.bind($bind))*
            .execute(c)
            .await
            .map(|done| done.rows_affected()))
    };
}
pub use crate::execute;

/// A statement's [`Sql`], written with MariaDB's `?` parameters: either one text for both
/// engines (`sql!("…")`), or a text for each where their SQL differs
/// (`sql!(mysql: "…", postgres: "…")`). PostgreSQL's text gets its `$1`, `$2`, … in the places
/// of its `?`, at compile time.
#[macro_export]
macro_rules! sql {
    (mysql: $mysql:expr, postgres: $postgres:expr $(,)?) => {
        const {
            const POSTGRES: &str = $postgres;
            const LEN: usize = $crate::db::engine::numbered_len(POSTGRES);
            const BYTES: [u8; LEN] = $crate::db::engine::numbered_bytes::<LEN>(POSTGRES);
            $crate::db::engine::Sql {
                mysql: $mysql,
                postgres: match core::str::from_utf8(&BYTES) {
                    Ok(text) => text,
                    Err(_) => panic!("a statement's text is UTF-8"),
                },
            }
        }
    };
    ($text:expr) => {
        $crate::db::engine::sql!(mysql: $text, postgres: $text)
    };
}
pub use crate::sql;

/// The length of `mysql` with its `n`-th `?` written `$n`.
pub const fn numbered_len(mysql: &str) -> usize {
    let bytes = mysql.as_bytes();
    let (mut i, mut n, mut len) = (0, 0, 0);
    while i < bytes.len() {
        if bytes[i] == b'?' {
            n += 1;
            len += 1 + digits(n);
        } else {
            len += 1;
        }
        i += 1;
    }
    len
}

/// `mysql` with its `n`-th `?` written `$n`, as bytes (`LEN` from [`numbered_len`]).
pub const fn numbered_bytes<const LEN: usize>(mysql: &str) -> [u8; LEN] {
    let bytes = mysql.as_bytes();
    let mut out = [0u8; LEN];
    let (mut i, mut n, mut at) = (0, 0, 0);
    while i < bytes.len() {
        if bytes[i] == b'?' {
            n += 1;
            out[at] = b'$';
            at += 1;
            let width = digits(n);
            let mut d = 0;
            while d < width {
                let place = width - 1 - d;
                out[at + place] = b'0' + ((n / pow10(d)) % 10) as u8;
                d += 1;
            }
            at += width;
        } else {
            out[at] = bytes[i];
            at += 1;
        }
        i += 1;
    }
    out
}

/// `mysql` with its `n`-th `?` written `$n`, at run time.
pub fn numbered(mysql: &str) -> String {
    let mut out = String::with_capacity(mysql.len() + 16);
    let mut n = 0;
    for c in mysql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

const fn digits(mut n: usize) -> usize {
    let mut width = 1;
    while n >= 10 {
        n /= 10;
        width += 1;
    }
    width
}

const fn pow10(d: usize) -> usize {
    let mut p = 1;
    let mut i = 0;
    while i < d {
        p *= 10;
        i += 1;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::{Engine, Sql, numbered};

    #[test]
    fn parameters_are_numbered_for_postgres_at_compile_time_as_at_run_time() {
        const TAKE: Sql = sql!("UPDATE t SET a = a - ? WHERE id = ? AND a >= ?");
        assert_eq!(TAKE.mysql, "UPDATE t SET a = a - ? WHERE id = ? AND a >= ?");
        assert_eq!(
            TAKE.postgres,
            "UPDATE t SET a = a - $1 WHERE id = $2 AND a >= $3"
        );
        let many = "?,".repeat(12);
        assert_eq!(numbered(&many), "$1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,");
        const TWELVE: Sql = sql!("?,?,?,?,?,?,?,?,?,?,?,?,");
        assert_eq!(TWELVE.postgres, numbered(&many));
        const NONE: Sql = sql!("SELECT 1");
        assert_eq!(NONE.postgres, "SELECT 1");
    }

    #[test]
    fn a_database_url_names_its_engine_by_its_scheme() {
        assert_eq!(
            Engine::of_url("mysql://root@127.0.0.1:3306/shop"),
            Some(Engine::MySql)
        );
        assert_eq!(Engine::of_url("postgres://u@h/db"), Some(Engine::Postgres));
        assert_eq!(
            Engine::of_url("postgresql://u@h/db"),
            Some(Engine::Postgres)
        );
        assert_eq!(Engine::of_url("sqlite://x"), None);
        assert_eq!(Engine::of_url("no scheme"), None);
    }
}
