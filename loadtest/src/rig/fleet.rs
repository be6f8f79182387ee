//! `seckill-app` instances the scenarios can freeze and kill one by one, on private servers,
//! the few HTTP calls the scenarios make, and the states they wait for before a fault (never a
//! fixed time: a loaded machine takes longer to get there).

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sqlx::{Connection, MySqlConnection};

use app::accounting::{Accounting, Ledger};
use app::api::{Home, ProductView, Strategy};
use app::buyer::BuyerKey;

use crate::rig::distance::{MARIADB, REDIS, Relays, ZOOKEEPER};
use testkit::{Answer, Answers, Api, Clicks, Crowd, Retry, order_request};
use testkit::{Apps, Launch};

/// The scenario's private MariaDB and Redis, its app instances and a client for them.
pub struct Fleet {
    pub apps: Apps,
    /// Requests to instance `n` go to `apps.instances[n]`; admin calls to the last instance,
    /// which no scenario kills or freezes.
    pub api: Api,
    _logs: LogDir,
    /// The database the instances use (`scenario` on the private MariaDB).
    pub database_url: String,
    // Dropped after the instances (fields drop in declaration order), the relays before the
    // servers they lead to.
    relays: Option<Relays>,
    database: Database,
    redis: Redis,
    _zookeeper: Option<sandbox::ZooKeeper>,
}

/// The database of a fleet: a private MariaDB, or servers the scenario runs itself.
enum Database {
    Private(Arc<sandbox::MariaDb>),
    /// Held only to keep the scenario's servers up as long as the fleet.
    Held {
        _servers: Arc<dyn std::any::Any + Send + Sync>,
    },
}

/// Where a fleet's instances keep their rows.
pub enum Rows {
    /// A private MariaDB the fleet starts.
    Private,
    /// The Galera cluster the scenario started: instance `n` writes to node
    /// `nodes[n % nodes.len()]`, the scenario's own reads go to the first of them.
    Galera {
        cluster: Arc<sandbox::GaleraCluster>,
        nodes: Vec<usize>,
    },
    /// A server the scenario runs itself, reached at `url` (a relay in front of a primary,
    /// which the scenario moves when it fails over): every instance writes there, and the
    /// fleet's own reads go there. `servers` is kept up as long as the fleet.
    At {
        url: String,
        servers: Arc<dyn std::any::Any + Send + Sync>,
    },
}

/// The Redis of a fleet: a private one, one the scenario runs itself (behind a relay), or none
/// (the instances' flags name the servers they use).
enum Redis {
    Private(sandbox::Redis),
    At(String),
    None,
}

/// The `seckill-app` binary a fleet starts, and the round trip added between its instances
/// and their servers (`scenario --rtt`): none, over loopback.
#[derive(Debug, Clone, Copy)]
pub struct AppBinary<'a> {
    pub path: &'a Path,
    pub rtt: Option<Duration>,
}

impl AppBinary<'_> {
    /// `path`, its instances reaching their servers over loopback.
    pub fn local(path: &Path) -> AppBinary<'_> {
        AppBinary { path, rtt: None }
    }
}

/// The product judged by the one definition of oversell and lost updates
/// ([`app::accounting`]); the scenarios do not judge undersell, so no demand is given.
pub fn accounting(p: &ProductView) -> Accounting {
    Accounting::of(Ledger::of(*p), 0)
}

/// The instances' flags for a lock lease of `lease_ms` and a lock wait budget of `wait_ms`.
pub fn lock_flags(lease_ms: u64, wait_ms: u64) -> Vec<String> {
    vec![
        format!("--lock-lease-ms={lease_ms}"),
        format!("--lock-wait-ms={wait_ms}"),
    ]
}

impl Fleet {
    /// Starts a private MariaDB and Redis, then `count` instances of `app` with `flags` (plus
    /// `--allow-fault-injection` and a `--buyer-key` of the fleet's own, which its client signs
    /// its buyers' tokens with).
    pub async fn start(app: AppBinary<'_>, count: usize, flags: &[String]) -> Result<Fleet> {
        Fleet::start_with(app, count, flags, false).await
    }

    /// [`Fleet::start`], with a private ZooKeeper too when `zookeeper`.
    pub async fn start_with(
        app: AppBinary<'_>,
        count: usize,
        flags: &[String],
        zookeeper: bool,
    ) -> Result<Fleet> {
        let redis = Redis::Private(crate::rig::start(sandbox::Redis::start).await?);
        Fleet::start_on(app, count, flags, zookeeper, redis, Rows::Private).await
    }

    /// [`Fleet::start`] with the instances' rows on `rows` (a Galera cluster's nodes) and a
    /// private Redis.
    pub async fn start_with_rows(
        app: AppBinary<'_>,
        count: usize,
        flags: &[String],
        rows: Rows,
    ) -> Result<Fleet> {
        let redis = Redis::Private(crate::rig::start(sandbox::Redis::start).await?);
        Fleet::start_on(app, count, flags, false, redis, rows).await
    }

    /// [`Fleet::start`] with the instances' Redis at `redis_url`, which the scenario controls.
    pub async fn start_with_redis(
        app: AppBinary<'_>,
        count: usize,
        flags: &[String],
        redis_url: String,
    ) -> Result<Fleet> {
        let redis = Redis::At(redis_url);
        Fleet::start_on(app, count, flags, false, redis, Rows::Private).await
    }

    /// [`Fleet::start`] with no server but the private MariaDB: `flags` name the clusters the
    /// instances use, which the scenario starts and controls (over loopback: their members
    /// announce their own addresses, which a relay cannot stand in for).
    pub async fn start_on_clusters(binary: &Path, count: usize, flags: &[String]) -> Result<Fleet> {
        let app = AppBinary::local(binary);
        Fleet::start_on(app, count, flags, false, Redis::None, Rows::Private).await
    }

    /// [`Fleet::start`] with the private MariaDB and Redis each behind a relay of its own, which
    /// adds nothing until [`Fleet::set_rtt`] puts them at a distance from the instances (the
    /// scenario's own reads go to them directly).
    pub async fn start_apart(binary: &Path, count: usize, flags: &[String]) -> Result<Fleet> {
        let redis = Redis::Private(crate::rig::start(sandbox::Redis::start).await?);
        let app = AppBinary {
            path: binary,
            rtt: Some(Duration::ZERO),
        };
        Fleet::start_on(app, count, flags, false, redis, Rows::Private).await
    }

    /// Every request the instances make to their servers costs `rtt` more from now on (a
    /// fleet started at a distance, [`Fleet::start_apart`] or an [`AppBinary`] with a round
    /// trip; others have no relays to set).
    pub fn set_rtt(&self, rtt: Duration) {
        if let Some(relays) = &self.relays {
            relays.set_rtt(rtt);
        }
    }

    /// The fleet's servers, and its instances started on them: when `app` stands at a
    /// distance, each server the instances reach (every database node, Redis, ZooKeeper)
    /// behind a relay adding that round trip; the scenario's own reads go to them directly.
    async fn start_on(
        app: AppBinary<'_>,
        count: usize,
        flags: &[String],
        zookeeper: bool,
        redis: Redis,
        rows: Rows,
    ) -> Result<Fleet> {
        let (database, servers) = match rows {
            Rows::Private => {
                let mariadb = crate::rig::start(sandbox::MariaDb::start).await?;
                let url = mariadb.url();
                (Database::Private(Arc::new(mariadb)), vec![url])
            }
            Rows::Galera { cluster, nodes } => {
                anyhow::ensure!(!nodes.is_empty(), "instances on no Galera node");
                let urls = nodes.iter().map(|&n| cluster.url(n)).collect();
                (Database::Held { _servers: cluster }, urls)
            }
            Rows::At { url, servers } => (Database::Held { _servers: servers }, vec![url]),
        };
        let in_database = |server: &String| format!("{}/scenario", server.trim_end_matches('/'));
        let database_url = in_database(&servers[0]);
        let zookeeper = match zookeeper {
            true => Some(crate::rig::start(sandbox::ZooKeeper::start).await?),
            false => None,
        };
        let logs = LogDir::create()?;
        let buyer_key = uuid::Uuid::new_v4().simple().to_string();
        let app_databases: Vec<String> = servers.iter().map(in_database).collect();
        let app_zookeeper = zookeeper.as_ref().map(|zk| zk.connect_string());
        anyhow::ensure!(
            app.rtt.is_none() || !redis.url().is_some_and(|url| url.contains("+cluster://")),
            "a Redis Cluster's members announce their own addresses: no relay can put them at a distance"
        );
        let mut relays = app.rtt.map(|_| Relays::none());
        let (app_databases, app_redis, app_zookeeper) = match &mut relays {
            Some(relays) => (
                (app_databases.iter())
                    .map(|url| relays.lead(url, MARIADB))
                    .collect::<Result<Vec<_>>>()?,
                (redis.url().map(|url| relays.lead(&url, REDIS))).transpose()?,
                (app_zookeeper.map(|zk| relays.lead(&zk, ZOOKEEPER))).transpose()?,
            ),
            None => (app_databases, redis.url(), app_zookeeper),
        };
        if let (Some(relays), Some(rtt)) = (&relays, app.rtt) {
            relays.set_rtt(rtt);
        }
        let mut launch = Launch::new(app.path, &logs.0)
            .arg("--buyer-key", buyer_key.clone())
            .args(["--allow-fault-injection"]);
        if let Some(url) = app_redis {
            launch = launch.arg("--redis-url", url);
        }
        if let Some(zk) = app_zookeeper {
            launch = launch.arg("--zookeeper", zk);
        }
        let launch = launch.args(flags);
        let launches = (app_databases.into_iter())
            .map(|database| launch.clone().arg("--database-url", database))
            .collect();
        let apps = Apps::start_each(launches, count).await?;
        Ok(Fleet {
            api: Api::new(apps.bases(), None)?.with_buyer_key(BuyerKey::new(buyer_key.as_bytes())),
            apps,
            _logs: logs,
            database_url,
            relays,
            database,
            redis,
            _zookeeper: zookeeper,
        })
    }

    /// Starts instance `n` again (after a kill), with the same settings.
    pub async fn restart(&mut self, n: usize) -> Result<()> {
        self.apps.restart(n).await?;
        self.api = self.api_for(&self.apps)?;
        Ok(())
    }

    /// A client for `apps`, whose buyers it signs as the fleet's client does.
    pub fn api_for(&self, apps: &Apps) -> Result<Api> {
        let api = Api::new(apps.bases(), None)?;
        Ok(match self.api.buyer_key() {
            Some(key) => api.with_buyer_key(key.clone()),
            None => api,
        })
    }

    /// The fleet's private MariaDB, to kill and start again.
    ///
    /// # Panics
    /// On a fleet whose rows are on the scenario's own servers (a Galera cluster, a
    /// replicated set): the scenario holds those itself.
    pub fn mariadb(&self) -> Arc<sandbox::MariaDb> {
        match &self.database {
            Database::Private(mariadb) => Arc::clone(mariadb),
            Database::Held { .. } => {
                panic!("a fleet on the scenario's servers has no private MariaDB")
            }
        }
    }

    /// The fleet's Redis.
    pub fn redis_url(&self) -> String {
        self.redis.url().unwrap_or_default()
    }

    /// Creates or resets product `id` to `stock` units in the product row (and deletes its
    /// orders).
    pub async fn reset(&self, id: u64, stock: i64) -> Result<()> {
        self.reset_in(id, stock, Home::Row).await
    }

    /// Creates or resets product `id` to `stock` units kept in `home` (and deletes its orders).
    pub async fn reset_in(&self, id: u64, stock: i64, home: Home) -> Result<()> {
        self.api.reset_product(id, stock, home).await
    }

    /// Product `id` as the database has it.
    pub async fn product(&self, id: u64) -> Result<ProductView> {
        self.api.product(id).await
    }

    /// Product `id` once `ready` says so, asked every 20 ms (an answer that fails, while the
    /// instances find a restarted server again, is asked again).
    pub async fn await_product(
        &self,
        id: u64,
        ready: impl Fn(&ProductView) -> bool,
    ) -> Result<ProductView> {
        let ready = &ready;
        poll(move || async move {
            match self.product(id).await {
                Ok(p) if ready(&p) => Ok(Some(p)),
                _ => Ok(None),
            }
        })
        .await
        .with_context(|| format!("product {id} never reached the state awaited"))
    }

    /// One buyer's clicks of `strategy` on `product`, one after the other, none retried: a
    /// scenario's sale in the order it wants it, each answer as it came.
    pub async fn one_buyer(
        &self,
        strategy: Strategy,
        product: u64,
        who: &str,
        clicks: Clicks,
    ) -> Answers {
        Crowd::new(1, clicks, strategy, who)
            .retrying(Retry::NEVER)
            .run(&self.api, product)
            .await
    }

    /// A connection to the fleet's database that watches for a buyer's transaction (see
    /// [`TransactionWatch::inside`]); opened before the buyer is sent, so that it sees the
    /// transaction as soon as it opens.
    pub async fn watch_transactions(&self) -> Result<TransactionWatch> {
        let conn = MySqlConnection::connect(&self.database_url)
            .await
            .context("connecting to watch the buyers' transactions")?;
        Ok(TransactionWatch { conn })
    }
}

/// One unit of `product` for `user` through instance `n`, pausing `hold_ms` inside the
/// critical section, with a fresh request id.
pub async fn order(
    api: &Api,
    n: usize,
    product: u64,
    strategy: Strategy,
    user: &str,
    hold_ms: u64,
) -> Answer {
    let request_id = uuid::Uuid::new_v4().simple().to_string();
    let body = order_request(user.to_owned(), strategy, request_id, 1);
    api.order_holding(n, product, &body, Duration::from_millis(hold_ms))
        .await
}

/// Watches the fleet's database for a buyer inside its critical section.
pub struct TransactionWatch {
    conn: MySqlConnection,
}

impl TransactionWatch {
    /// Waits until a transaction has been open for [`SETTLED`], and returns when it was first
    /// seen: a buyer inside its critical section (it holds its lock, or its row lock, and has
    /// read the stock; the injected pause keeps it there). Only the scenario's own buyers use
    /// the fleet's database, and a lock's own statements (a lock row inserted, a fence claimed)
    /// commit at once, so a transaction that stays open is a buyer's. InnoDB's status lists
    /// every active transaction with its connection, read-only ones included.
    pub async fn inside(&mut self) -> Result<Instant> {
        let mut first_seen: HashMap<u64, Instant> = HashMap::new();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let (_, _, status): (String, String, String) =
                sqlx::query_as("SHOW ENGINE INNODB STATUS")
                    .fetch_one(&mut self.conn)
                    .await?;
            let open = active_transactions(&status);
            first_seen.retain(|thread, _| open.contains(thread));
            for thread in open {
                first_seen.entry(thread).or_insert_with(Instant::now);
            }
            if let Some(since) = first_seen.values().find(|s| s.elapsed() >= SETTLED) {
                return Ok(*since);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "no buyer's transaction opened in the database within {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The connections (MariaDB thread ids) with an active transaction, from the transactions
/// section of `SHOW ENGINE INNODB STATUS`: each `---TRANSACTION …, ACTIVE …` entry names its
/// `MariaDB thread id`.
fn active_transactions(status: &str) -> Vec<u64> {
    let section = status
        .split("LIST OF TRANSACTIONS FOR EACH SESSION:")
        .nth(1)
        .unwrap_or_default();
    section
        .split("---TRANSACTION")
        .skip(1)
        .filter(|entry| entry.lines().next().is_some_and(|l| l.contains(", ACTIVE")))
        .filter_map(|entry| {
            let (_, after) = entry.split_once("thread id ")?;
            after.split(',').next()?.trim().parse().ok()
        })
        .collect()
}

/// How long a transaction must stay open to be a buyer's, not a statement's own.
pub const SETTLED: Duration = Duration::from_millis(50);
/// A bound on any state a scenario waits for: on a machine under load, a generous one.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Asks `ask` every 20 ms until it answers `Some`, for up to [`PATIENCE`].
pub async fn poll<T, F, Fut>(mut ask: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(answer) = ask().await? {
            return Ok(answer);
        }
        anyhow::ensure!(Instant::now() < deadline, "not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The instances' log files, removed with the fleet.
struct LogDir(PathBuf);

impl LogDir {
    fn create() -> Result<LogDir> {
        let dir = std::env::temp_dir().join(format!(
            "seckill-scenario-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(LogDir(dir))
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Redis {
    fn url(&self) -> Option<String> {
        match self {
            Redis::Private(redis) => Some(redis.url()),
            Redis::At(url) => Some(url.clone()),
            Redis::None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::active_transactions;

    #[test]
    fn the_active_transactions_are_read_from_the_innodb_status() {
        let status = "TRANSACTIONS\n------------\nTrx id counter 63\n\
            LIST OF TRANSACTIONS FOR EACH SESSION:\n\
            ---TRANSACTION 421, not started\n0 lock struct(s)\nMariaDB thread id 7, OS thread\n\
            ---TRANSACTION (0x7f8f1079bb80), ACTIVE 0 sec\n0 lock struct(s), heap size 1128\n\
            MariaDB thread id 5, OS thread handle 1402, query id 66 127.0.0.1 root\n\
            Trx read view will not see trx with id >= 63, sees < 63\n--------\nFILE I/O\n";
        assert_eq!(active_transactions(status), vec![5]);
        assert!(active_transactions("no such section").is_empty());
    }
}
