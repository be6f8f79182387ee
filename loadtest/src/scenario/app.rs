//! `seckill-app` instances the scenarios can freeze and kill one by one, on private servers,
//! and the few HTTP calls the scenarios make.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;
use serde_json::json;

use crate::apps::{Apps, Launch};

/// The scenario's private MariaDB and Redis, and its app instances.
pub struct Fleet {
    pub apps: Apps,
    http: reqwest::Client,
    _logs: LogDir,
    // Dropped after the instances (fields drop in declaration order).
    _mariadb: sandbox::MariaDb,
    redis: sandbox::Redis,
    _zookeeper: Option<sandbox::ZooKeeper>,
}

/// What `POST …/orders` answered.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// `error` code of a refusal (`sold_out`, `lock_lost`, `busy`, …).
    pub error: Option<String>,
    pub fencing_token: Option<u64>,
}

/// `GET /api/products/{id}`.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Product {
    pub stock: i64,
    pub initial_stock: i64,
    pub sold: i64,
    pub orders: i64,
}

impl Product {
    /// Units sold beyond the initial stock.
    pub fn oversell(&self) -> i64 {
        (self.sold - self.initial_stock).max(0)
    }
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
        let (mariadb, redis) = tokio::try_join!(
            super::start(sandbox::MariaDb::start),
            super::start(sandbox::Redis::start)
        )?;
        let zookeeper = match zookeeper {
            true => Some(super::start(sandbox::ZooKeeper::start).await?),
            false => None,
        };
        let logs = LogDir::create()?;
        let database_url = format!("{}/scenario", mariadb.url().trim_end_matches('/'));
        let mut launch = Launch::new(binary, &logs.0)
            .arg("--database-url", database_url)
            .arg("--redis-url", redis.url())
            .args(["--allow-fault-injection"]);
        if let Some(zk) = &zookeeper {
            launch = launch.arg("--zookeeper", zk.connect_string());
        }
        let apps = Apps::start(launch.args(flags), count).await?;
        Ok(Fleet {
            apps,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
            _logs: logs,
            _mariadb: mariadb,
            redis,
            _zookeeper: zookeeper,
        })
    }

    /// The fleet's private Redis.
    pub fn redis_url(&self) -> String {
        self.redis.url()
    }

    /// The HTTP client (no pooling limits, long timeout: requests to a frozen instance wait).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The instance that admin calls go to: the last, which no scenario kills or freezes.
    fn admin(&self) -> &str {
        &self.apps.instances[self.apps.instances.len() - 1].base
    }

    /// Creates or resets product `id` to `stock` units (and deletes its orders).
    pub async fn reset(&self, id: u64, stock: i64) -> Result<()> {
        let url = format!("{}/api/products/{id}", self.admin());
        let r = self
            .http
            .put(url)
            .json(&json!({ "stock": stock }))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("resetting product {id}: {} {}", r.status(), r.text().await?);
        }
        Ok(())
    }

    /// Product `id` as the database has it.
    pub async fn product(&self, id: u64) -> Result<Product> {
        let url = format!("{}/api/products/{id}", self.admin());
        Ok(self
            .http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }
}

/// One order through instance `base`, pausing `hold_ms` inside the critical section.
pub async fn order(
    http: &reqwest::Client,
    base: &str,
    product: u64,
    strategy: &str,
    user: &str,
    hold_ms: u64,
) -> Result<Answer> {
    let body = json!({
        "user_id": user,
        "quantity": 1,
        "request_id": uuid::Uuid::new_v4().simple().to_string(),
        "strategy": strategy,
    });
    let mut request = http
        .post(format!("{base}/api/products/{product}/orders"))
        .json(&body);
    if hold_ms > 0 {
        request = request.header("X-Seckill-Hold-Ms", hold_ms.to_string());
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let value: serde_json::Value = response.json().await.unwrap_or_default();
    Ok(Answer {
        status,
        error: value["error"].as_str().map(str::to_owned),
        fencing_token: value["fencing_token"].as_u64(),
    })
}

impl Answer {
    /// `201 token 7`, `409 lock_lost`, …
    pub fn describe(&self) -> String {
        match (&self.error, self.fencing_token) {
            (Some(e), _) => format!("{} {e}", self.status),
            (None, Some(t)) => format!("{} order placed, token {t}", self.status),
            (None, None) => format!("{} order placed", self.status),
        }
    }

    pub fn created(&self) -> bool {
        self.status == 201
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
