//! `seckill-app` instances the scenarios can freeze and kill one by one, on private servers,
//! and the few HTTP calls the scenarios make.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use app::accounting::{Accounting, Ledger};
use app::api::{Home, ProductView, Strategy};

use crate::scenario::Timeline;
use testkit::{Answer, Api, order_request};
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
    // Dropped after the instances (fields drop in declaration order).
    mariadb: Arc<sandbox::MariaDb>,
    redis: Redis,
    _zookeeper: Option<sandbox::ZooKeeper>,
}

/// The Redis of a fleet: a private one, one the scenario runs itself (behind a relay), or none
/// (the instances' flags name the servers they use).
enum Redis {
    Private(sandbox::Redis),
    At(String),
    None,
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
    /// Starts a private MariaDB and Redis, then `count` instances with `flags` (plus
    /// `--allow-fault-injection`).
    pub async fn start(binary: &Path, count: usize, flags: &[String]) -> Result<Fleet> {
        Fleet::start_with(binary, count, flags, false).await
    }

    /// [`Fleet::start`], with a private ZooKeeper too when `zookeeper`.
    pub async fn start_with(
        binary: &Path,
        count: usize,
        flags: &[String],
        zookeeper: bool,
    ) -> Result<Fleet> {
        let redis = Redis::Private(crate::rig::start(sandbox::Redis::start).await?);
        Fleet::start_on(binary, count, flags, zookeeper, redis).await
    }

    /// [`Fleet::start`] with the instances' Redis at `redis_url`, which the scenario controls.
    pub async fn start_with_redis(
        binary: &Path,
        count: usize,
        flags: &[String],
        redis_url: String,
    ) -> Result<Fleet> {
        Fleet::start_on(binary, count, flags, false, Redis::At(redis_url)).await
    }

    /// [`Fleet::start`] with no server but the private MariaDB: `flags` name the clusters the
    /// instances use, which the scenario starts and controls.
    pub async fn start_on_clusters(binary: &Path, count: usize, flags: &[String]) -> Result<Fleet> {
        Fleet::start_on(binary, count, flags, false, Redis::None).await
    }

    async fn start_on(
        binary: &Path,
        count: usize,
        flags: &[String],
        zookeeper: bool,
        redis: Redis,
    ) -> Result<Fleet> {
        let mariadb = crate::rig::start(sandbox::MariaDb::start).await?;
        let zookeeper = match zookeeper {
            true => Some(crate::rig::start(sandbox::ZooKeeper::start).await?),
            false => None,
        };
        let logs = LogDir::create()?;
        let database_url = format!("{}/scenario", mariadb.url().trim_end_matches('/'));
        let mut launch = Launch::new(binary, &logs.0)
            .arg("--database-url", database_url.clone())
            .args(["--allow-fault-injection"]);
        if let Some(url) = redis.url() {
            launch = launch.arg("--redis-url", url);
        }
        if let Some(zk) = &zookeeper {
            launch = launch.arg("--zookeeper", zk.connect_string());
        }
        let apps = Apps::start(launch.args(flags), count).await?;
        Ok(Fleet {
            api: Api::new(apps.bases(), None)?,
            apps,
            _logs: logs,
            database_url,
            mariadb: Arc::new(mariadb),
            redis,
            _zookeeper: zookeeper,
        })
    }

    /// Starts instance `n` again (after a kill), with the same settings.
    pub async fn restart(&mut self, n: usize) -> Result<()> {
        self.apps.restart(n).await?;
        self.api = Api::new(self.apps.bases(), None)?;
        Ok(())
    }

    /// The fleet's private MariaDB, to kill and start again.
    pub fn mariadb(&self) -> Arc<sandbox::MariaDb> {
        Arc::clone(&self.mariadb)
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

    /// Product `id` as the database has it, noted on the timeline as `db`.
    pub async fn product_noted(&self, id: u64, tl: &Timeline) -> Result<ProductView> {
        let p = self.product(id).await?;
        tl.log(
            "db",
            format!(
                "stock {} of {}, {} order(s)",
                p.stock, p.initial_stock, p.orders
            ),
        );
        Ok(p)
    }

    /// Product `id` as the database has it.
    pub async fn product(&self, id: u64) -> Result<ProductView> {
        self.api.product(id).await
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
