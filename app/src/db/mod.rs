//! The database: connection pool, database creation, migrations, and the shared queries — on
//! MariaDB or PostgreSQL, as the deployment's `DATABASE_URL` says (see [`engine`]).

pub mod buckets;
pub mod due;
pub mod engine;
pub mod errors;
pub mod galera;
pub mod order_life;
pub mod orders;
pub mod products;
pub mod quota;
pub mod semi_sync;
pub mod whole;

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor};

pub use engine::{Db, Engine, Engines};

use crate::config::Config;

/// Database used when the URL names none.
pub const DEFAULT_DATABASE: &str = "seckill";

/// Why the database could not be prepared at start-up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("invalid database URL: {0}")]
    Url(#[source] sqlx::Error),
    #[error("the database URL `{0}` names no engine the service runs on (mysql:// or postgres://)")]
    Engine(String),
    #[error("invalid database name `{0}` (letters, digits and `_` only)")]
    Name(String),
    #[error("could not create database `{name}`: {source}")]
    Create {
        name: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("could not apply migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// Creates the database named by `config.database_url` (or [`DEFAULT_DATABASE`]) if missing,
/// applies the migrations of its engine, and returns a pool whose connections wait for row
/// locks at most `row_lock_wait_secs`.
pub async fn connect(config: &Config) -> Result<Db, SetupError> {
    let (server_url, name) = split_database(&config.database_url);
    let name = plain_name(name.unwrap_or(DEFAULT_DATABASE))?;
    let lock_wait = Some(config.row_lock_wait_secs.max(1));
    let create = |source| SetupError::Create {
        name: name.clone(),
        source,
    };
    let db = match options_of(&server_url)? {
        Engines::MySql(server) => {
            create_database(&server, &name).await?;
            let pool = pool_options(config.db_pool_size, config, lock_wait)
                .connect_with(server.database(&name))
                .await
                .map_err(create)?;
            Engines::MySql(pool)
        }
        Engines::Postgres(server) => {
            create_postgres_database(&server, &name).await?;
            let options = postgres_session(server.database(&name), config, lock_wait);
            let pool = postgres_pool_options(config.db_pool_size, config)
                .connect_with(options)
                .await
                .map_err(create)?;
            Engines::Postgres(pool)
        }
    };
    migrate(&db).await?;
    Ok(db)
}

/// The connect options `url` gives, of the engine its scheme names.
fn options_of(url: &str) -> Result<Engines<MySqlConnectOptions, PgConnectOptions>, SetupError> {
    match Engine::of_url(url) {
        Some(Engine::MySql) => {
            (MySqlConnectOptions::from_str(url).map(Engines::MySql)).map_err(SetupError::Url)
        }
        Some(Engine::Postgres) => {
            (PgConnectOptions::from_str(url).map(Engines::Postgres)).map_err(SetupError::Url)
        }
        None => Err(SetupError::Engine(url.to_string())),
    }
}

/// A pool of a few connections on the database `url` names, of the engine its scheme names,
/// neither created nor migrated: for a reader of the service's rows beside it (the benchmark's
/// accounting, the tests').
pub async fn open(url: &str) -> Result<Db, SetupError> {
    const SIZE: u32 = 4;
    Ok(match options_of(url)? {
        Engines::MySql(options) => {
            let pool = MySqlPoolOptions::new().max_connections(SIZE);
            Engines::MySql(pool.connect_with(options).await.map_err(SetupError::Url)?)
        }
        Engines::Postgres(options) => {
            let pool = PgPoolOptions::new().max_connections(SIZE);
            Engines::Postgres(pool.connect_with(options).await.map_err(SetupError::Url)?)
        }
    })
}

/// `name` as a database name, if it is a plain identifier (letters, digits and `_`).
fn plain_name(name: &str) -> Result<String, SetupError> {
    match name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        true => Ok(name.to_string()),
        false => Err(SetupError::Name(name.to_string())),
    }
}

/// Applies the service's migrations of `db`'s engine to its database: the one definition of
/// the tables (`app/migrations` for MariaDB, `app/migrations-postgres` for PostgreSQL), used by
/// the service at start-up and by anything that needs tables shaped like the service's (the
/// benchmark's baselines).
pub async fn migrate(db: &Db) -> Result<(), SetupError> {
    match db {
        Engines::MySql(pool) => sqlx::migrate!("./migrations").run(pool).await?,
        Engines::Postgres(pool) => sqlx::migrate!("./migrations-postgres").run(pool).await?,
    }
    Ok(())
}

/// A second pool on the same database, for the `db_locks` table. Waiters poll the lock table
/// while the holder works on the stock; with one shared pool their polls would queue the
/// holder's own queries behind them and the lock would starve itself. A separate pool is also
/// what a real deployment has: the lock service is not the data it protects.
///
/// Its sessions wait for a row lock at most the lock wait budget (rounded up to whole
/// seconds): an insert stuck behind another session's uncommitted lock row must not outlast the
/// budget by MariaDB's 50 s default.
pub fn lock_pool(main: &Db, config: &Config) -> Db {
    let lock_wait = config.lock_wait_ms.div_ceil(1000).max(1);
    match main {
        Engines::MySql(main) => {
            let sync_wait = SyncWait::new(config.galera_sync_wait);
            Engines::MySql(
                MySqlPoolOptions::new()
                    .max_connections(config.db_lock_pool_size)
                    .acquire_timeout(Duration::from_millis(config.db_acquire_timeout_ms))
                    .test_before_acquire(false)
                    .after_connect(move |conn, _meta| {
                        let sync_wait = sync_wait.clone();
                        Box::pin(async move {
                            set_lock_wait(conn, lock_wait).await?;
                            sync_wait.set(conn).await
                        })
                    })
                    .connect_lazy_with((*main.connect_options()).clone()),
            )
        }
        Engines::Postgres(main) => {
            let options = (*main.connect_options()).clone();
            Engines::Postgres(
                postgres_pool_options(config.db_lock_pool_size, config)
                    .connect_lazy_with(postgres_session(options, config, Some(lock_wait))),
            )
        }
    }
}

/// A third pool on the same database, for what is read rather than sold: products' public
/// pages and their accounting. A crowd refreshing a page, or an accountant summing a large
/// product's orders, waits for these connections and never for a buyer's.
pub fn reader_pool(main: &Db, config: &Config) -> Db {
    readers(
        match main {
            Engines::MySql(main) => Engines::MySql((*main.connect_options()).clone()),
            Engines::Postgres(main) => Engines::Postgres((*main.connect_options()).clone()),
        },
        config,
    )
}

/// The pool the products' public pages are read through on a replica
/// (`--database-replica-url`; the database name defaults to the primary's), or `None` without
/// one. Connections are opened when first needed, so a replica that is down at start-up only
/// sends the pages to the primary.
pub fn replica_pool(config: &Config) -> Result<Option<Db>, SetupError> {
    let Some(url) = &config.database_replica_url else {
        return Ok(None);
    };
    let (server_url, name) = split_database(url);
    let name = name.or(split_database(&config.database_url).1);
    let name = plain_name(name.unwrap_or(DEFAULT_DATABASE))?;
    let options = match options_of(&server_url)? {
        Engines::MySql(server) => Engines::MySql(server.database(&name)),
        Engines::Postgres(server) => Engines::Postgres(server.database(&name)),
    };
    Ok(Some(readers(options, config)))
}

/// PostgreSQL's pool of `size` connections, as [`pool_options`] builds MariaDB's (what a
/// session sets is in its connect options: [`postgres_session`]).
fn postgres_pool_options(size: u32, config: &Config) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(size.max(1))
        .acquire_timeout(Duration::from_millis(config.db_acquire_timeout_ms))
        .test_before_acquire(false)
}

/// `options` whose sessions bound their statements by the purchases' statement time
/// (`statement_timeout`, answered `busy`) and wait `lock_wait` seconds for a row lock if given
/// (`lock_timeout`), sent with the connection's start-up: no round trip of their own.
fn postgres_session(
    options: PgConnectOptions,
    config: &Config,
    lock_wait: Option<u64>,
) -> PgConnectOptions {
    let statement = format!("{}ms", config.statement_timeout_ms);
    let options = options.options([("statement_timeout", statement)]);
    match lock_wait {
        Some(secs) => options.options([("lock_timeout", format!("{secs}s"))]),
        None => options,
    }
}

/// Creates PostgreSQL's database `name` if missing (`CREATE DATABASE` has no `IF NOT EXISTS`
/// there: a concurrent creator's `duplicate_database` counts as done).
async fn create_postgres_database(server: &PgConnectOptions, name: &str) -> Result<(), SetupError> {
    let create = |source| SetupError::Create {
        name: name.to_string(),
        source,
    };
    let mut conn = server
        .clone()
        .database("postgres")
        .connect()
        .await
        .map_err(create)?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_optional(&mut conn)
        .await
        .map_err(create)?;
    if exists.is_none() {
        // `name` was checked to be a plain identifier.
        let sql = format!("CREATE DATABASE \"{name}\"");
        match conn.execute(sqlx::AssertSqlSafe(sql)).await {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
            done => {
                done.map_err(create)?;
            }
        }
    }
    conn.close().await.map_err(create)?;
    Ok(())
}

/// A pool of `options`' database for what is read rather than sold (the readers' or the
/// replica's): the readers' size, its statements bounded by the purchases' statement time, and
/// on a Galera node the same causality as theirs. Opens no connection until one is needed.
fn readers(options: Engines<MySqlConnectOptions, PgConnectOptions>, config: &Config) -> Db {
    let size = config.db_reader_pool_size;
    match options {
        Engines::MySql(options) => {
            Engines::MySql(pool_options(size, config, None).connect_lazy_with(options))
        }
        Engines::Postgres(options) => Engines::Postgres(
            postgres_pool_options(size, config)
                .connect_lazy_with(postgres_session(options, config, None)),
        ),
    }
}

/// A pool of `size` connections (at least one), each checked out within the configured
/// bound and not pinged before use (a broken connection shows up as an I/O error on the request
/// that uses it, answered `backend_unavailable`, and is then dropped; a ping would cost a round
/// trip on the hot path), whose sessions bound their statements by the purchases'
/// statement time, wait `lock_wait` seconds for a row lock if given, and keep Galera's
/// causality as configured.
fn pool_options(size: u32, config: &Config, lock_wait: Option<u64>) -> MySqlPoolOptions {
    let statement = Duration::from_millis(config.statement_timeout_ms);
    let sync_wait = SyncWait::new(config.galera_sync_wait);
    MySqlPoolOptions::new()
        .max_connections(size.max(1))
        .acquire_timeout(Duration::from_millis(config.db_acquire_timeout_ms))
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            let sync_wait = sync_wait.clone();
            Box::pin(async move {
                if let Some(secs) = lock_wait {
                    set_lock_wait(conn, secs).await?;
                }
                set_statement_time(conn, statement).await?;
                sync_wait.set(conn).await
            })
        })
}

/// `max_statement_time` of one session: MariaDB aborts a statement of it that runs longer
/// (`ER_STATEMENT_TIMEOUT`, answered `busy`), so no statement outlives its buyer's patience.
async fn set_statement_time(
    conn: &mut sqlx::MySqlConnection,
    limit: Duration,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "SET SESSION max_statement_time = {:.3}",
        limit.as_secs_f64()
    );
    conn.execute(sqlx::AssertSqlSafe(sql)).await?;
    Ok(())
}

/// `wsrep_sync_wait` of a pool's sessions, when its server is a Galera node (`wsrep_on`): what
/// a session waits for the node to have applied before it reads or writes (see
/// [`Config::galera_sync_wait`]). Elsewhere nothing: the variable means nothing there, and a
/// server built without Galera does not know it. The pool's first connection asks the server;
/// the others are told what it found.
#[derive(Clone)]
struct SyncWait {
    mask: u8,
    galera: std::sync::Arc<tokio::sync::OnceCell<bool>>,
}

impl SyncWait {
    fn new(mask: u8) -> SyncWait {
        SyncWait {
            mask,
            galera: std::sync::Arc::default(),
        }
    }

    async fn set(&self, conn: &mut sqlx::MySqlConnection) -> Result<(), sqlx::Error> {
        let galera = *(self.galera)
            .get_or_try_init(|| galera::is_galera_node(conn))
            .await?;
        if galera {
            let sql = format!("SET SESSION wsrep_sync_wait = {}", self.mask);
            conn.execute(sqlx::AssertSqlSafe(sql)).await?;
        }
        Ok(())
    }
}

/// `innodb_lock_wait_timeout` of one session, in seconds.
async fn set_lock_wait(conn: &mut sqlx::MySqlConnection, secs: u64) -> Result<(), sqlx::Error> {
    let sql = format!("SET SESSION innodb_lock_wait_timeout = {secs}");
    conn.execute(sqlx::AssertSqlSafe(sql)).await?;
    Ok(())
}

async fn create_database(server: &MySqlConnectOptions, name: &str) -> Result<(), SetupError> {
    let create = |source| SetupError::Create {
        name: name.to_string(),
        source,
    };
    let mut conn = server.connect().await.map_err(create)?;
    // `name` was checked to be a plain identifier above.
    let sql = format!("CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4");
    conn.execute(sqlx::AssertSqlSafe(sql))
        .await
        .map_err(create)?;
    conn.close().await.map_err(create)?;
    Ok(())
}

/// Splits `mysql://user@host:port/db?opts` into the server URL (without the database) and the
/// database name, if any.
fn split_database(url: &str) -> (String, Option<&str>) {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let (base, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    match base[authority_start..].find('/') {
        Some(slash) => {
            let slash = authority_start + slash;
            let db = &base[slash + 1..];
            let server = format!("{}{query}", &base[..slash]);
            (server, (!db.is_empty()).then_some(db))
        }
        None => (url.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::{SetupError, connect, split_database};

    #[tokio::test]
    async fn a_database_url_of_an_engine_the_service_does_not_run_on_is_refused_by_name() {
        let config = crate::Config::for_database("sqlite://shop.db");
        let refused = connect(&config).await.err();
        assert!(
            matches!(&refused, Some(SetupError::Engine(url)) if url.starts_with("sqlite://")),
            "{refused:?}"
        );
    }

    #[test]
    fn database_name_is_split_from_the_server_url() {
        assert_eq!(
            split_database("mysql://root@127.0.0.1:3306/shop?ssl-mode=disabled"),
            (
                "mysql://root@127.0.0.1:3306?ssl-mode=disabled".to_string(),
                Some("shop")
            )
        );
        assert_eq!(
            split_database("mysql://root@127.0.0.1:3306/"),
            ("mysql://root@127.0.0.1:3306".to_string(), None)
        );
        assert_eq!(
            split_database("mysql://root@127.0.0.1:3306"),
            ("mysql://root@127.0.0.1:3306".to_string(), None)
        );
    }
}
