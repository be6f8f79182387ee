//! `seckill-app` instances the scenarios can freeze and kill one by one, on private servers,
//! and the few HTTP calls the scenarios make.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::json;

/// Environment variables the app would otherwise read: cleared, so an instance reaches only
/// the servers the scenario names on its command line.
const FOREIGN_ENV: &[&str] = &[
    "DATABASE_URL",
    "REDIS_URL",
    "REDLOCK_URLS",
    "ZOOKEEPER_CONNECT",
    "ETCD_ENDPOINTS",
    "SECKILL_ADMIN_TOKEN",
];

/// The scenario's private MariaDB and Redis, and its app instances.
pub struct Fleet {
    pub instances: Vec<Instance>,
    http: reqwest::Client,
    binary: PathBuf,
    args: Vec<String>,
    logs: LogDir,
    // Dropped after the instances (fields drop in declaration order).
    _mariadb: sandbox::MariaDb,
    redis: sandbox::Redis,
    _zookeeper: Option<sandbox::ZooKeeper>,
}

/// One app process.
pub struct Instance {
    child: Child,
    /// Kills the process should this one die without dropping the instance.
    _guardian: sandbox::Guardian,
    pub base: String,
    log: PathBuf,
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
        let mut args = vec![
            "--database-url".to_string(),
            database_url,
            "--redis-url".into(),
            redis.url(),
            "--allow-fault-injection".into(),
        ];
        if let Some(zk) = &zookeeper {
            args.extend(["--zookeeper".into(), zk.connect_string()]);
        }
        args.extend(flags.iter().cloned());
        let mut instances = Vec::new();
        for n in 0..count {
            // The first instance migrates the database alone; the rest start against it.
            let log = logs.0.join(format!("app-{n}.log"));
            instances.push(Instance::start(binary, &args, &log).await?);
        }
        Ok(Fleet {
            instances,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
            binary: binary.to_path_buf(),
            args,
            logs,
            _mariadb: mariadb,
            redis,
            _zookeeper: zookeeper,
        })
    }

    /// Starts instance `n` again (after a kill), with the same settings.
    pub async fn restart(&mut self, n: usize) -> Result<()> {
        let log = self.logs.0.join(format!("app-{n}-restarted.log"));
        self.instances[n] = Instance::start(&self.binary, &self.args, &log).await?;
        Ok(())
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
        &self.instances[self.instances.len() - 1].base
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

impl Instance {
    async fn start(binary: &Path, args: &[String], log: &Path) -> Result<Instance> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let file = std::fs::File::create(log)?;
        let mut cmd = Command::new(binary);
        for var in FOREIGN_ENV {
            cmd.env_remove(var);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        let child = cmd
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut instance = Instance {
            _guardian: sandbox::Guardian::watch(child.id())?,
            child,
            base: format!("http://127.0.0.1:{port}"),
            log: log.to_path_buf(),
        };
        instance.wait_ready().await?;
        Ok(instance)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let http = reqwest::Client::new();
        let url = format!("{}/healthz", self.base);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "seckill-app exited during start-up ({status}):\n{}",
                    self.log_tail()
                );
            }
            if let Ok(r) = http.get(&url).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("seckill-app not ready within 60 s:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGSTOP: the whole process freezes, its watchdog included.
    pub fn pause(&self) -> Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// SIGCONT.
    pub fn resume(&self) -> Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// SIGKILL, and reaps the process.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    fn signal(&self, signal: Signal) -> Result<()> {
        let pid = i32::try_from(self.child.id())?;
        kill(Pid::from_raw(pid), signal)?;
        Ok(())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
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
