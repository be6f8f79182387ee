//! `seckill-app` instances as separate processes: the benchmark's and the scenarios'.
//!
//! Every instance is started the same way: on a free loopback port, with none of the app's
//! server variables inherited from this process (each instance reaches only the servers its
//! [`Launch`] names), its output in a log file, and a [`sandbox::Guardian`] that kills it should
//! this process die first. It counts as started once `GET /healthz` answers 200.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;

/// Environment variables the app would otherwise read: cleared, so an instance reaches only
/// the servers its [`Launch`] names.
const FOREIGN_ENV: &[&str] = &[
    "DATABASE_URL",
    "REDIS_URL",
    "REDIS_SENTINELS",
    "REDIS_MASTER_NAME",
    "REDLOCK_URLS",
    "ZOOKEEPER_CONNECT",
    "ETCD_ENDPOINTS",
    "MEMCACHED_ADDR",
    "SECKILL_ADMIN_TOKEN",
];

/// How long an instance may take to answer `/healthz`, and to stop after SIGTERM.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Where `seckill-app` is: `explicit`, else next to the running executable, else in the
/// target directory above it (test binaries live in `target/<profile>/deps/`).
pub fn locate_app(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        anyhow::ensure!(p.is_file(), "--app-bin {}: no such file", p.display());
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe()?;
    let beside = exe.with_file_name("seckill-app");
    if beside.is_file() {
        return Ok(beside);
    }
    if let Some(up) = exe.parent().and_then(Path::parent) {
        let p = up.join("seckill-app");
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "`seckill-app` not found next to {} — build it first: `cargo build --release -p app` \
         (or pass --app-bin)",
        exe.display()
    )
}

/// How to start an instance: the binary, its arguments besides `--listen`, its environment
/// and where its logs go (`<log_dir>/<name>.log`).
#[derive(Debug, Clone)]
pub struct Launch {
    pub binary: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub log_dir: PathBuf,
}

impl Launch {
    /// An instance of `binary` offering every strategy, the unsafe ones too: the benchmark
    /// and the scenarios show them failing.
    pub fn new(binary: &Path, log_dir: &Path) -> Launch {
        Launch {
            binary: binary.to_path_buf(),
            args: vec!["--offer-unsafe".to_owned()],
            env: Vec::new(),
            log_dir: log_dir.to_path_buf(),
        }
    }

    /// Adds `--flag value`.
    pub fn arg(mut self, flag: &str, value: impl Into<String>) -> Launch {
        self.args.push(flag.to_owned());
        self.args.push(value.into());
        self
    }

    /// Adds arguments as given (`--lock-lease-ms=300`, `--allow-fault-injection`).
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Launch {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds the variables that name `endpoints` to the environment.
    pub fn endpoints(mut self, endpoints: &sandbox::Endpoints) -> Launch {
        self.env.extend(
            endpoints
                .env_vars()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v)),
        );
        self
    }
}

/// One running app process. Dropping it kills it (SIGKILL, which ends a stopped one too).
pub struct Instance {
    child: Child,
    /// Kills the process should this one die without dropping the instance.
    _guardian: sandbox::Guardian,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: PathBuf,
}

impl Instance {
    /// Starts one instance and waits until it answers `GET /healthz` with 200.
    pub async fn start(launch: &Launch, name: &str) -> Result<Instance> {
        Instance::start_on(launch, name, None).await
    }

    /// Starts one instance on `port` (a free one when `None`) and waits until it is ready.
    async fn start_on(launch: &Launch, name: &str, port: Option<u16>) -> Result<Instance> {
        let mut instance = Instance::spawn(launch, name, port)?;
        instance.wait_ready().await?;
        Ok(instance)
    }

    fn spawn(launch: &Launch, name: &str, port: Option<u16>) -> Result<Instance> {
        std::fs::create_dir_all(&launch.log_dir)
            .with_context(|| format!("creating {}", launch.log_dir.display()))?;
        let port = match port {
            Some(port) => port,
            None => TcpListener::bind("127.0.0.1:0")?.local_addr()?.port(),
        };
        let log = launch.log_dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log)?;
        let mut cmd = sandbox::at_server_priority(Command::new(&launch.binary));
        for var in FOREIGN_ENV {
            cmd.env_remove(var);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            // Per-request logging would cost the app more than the work it measures.
            cmd.env("RUST_LOG", "warn");
        }
        let child = cmd
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(&launch.args)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", launch.binary.display()))?;
        Ok(Instance {
            _guardian: sandbox::Guardian::watch(child.id())?,
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        })
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let url = format!("{}/healthz", self.base);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "seckill-app exited during start-up ({status}); last lines of {}:\n{}",
                    self.log.display(),
                    self.log_tail()
                );
            }
            if let Ok(r) = http.get(&url).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "seckill-app did not answer {url} with 200 within {START_TIMEOUT:?}; last \
                     lines of {}:\n{}",
                    self.log.display(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last 30 lines of the instance's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The operating-system process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
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
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The launch of instance `n` of a set started with `launches` in turn.
fn nth(launches: &[Launch], n: usize) -> &Launch {
    &launches[n % launches.len()]
}

/// A set of instances named `app-<n>`, started with one [`Launch`], or with one of several
/// in turn (instances of one deployment each reaching its own database node).
pub struct Apps {
    pub instances: Vec<Instance>,
    /// Instance `n` was started with `launches[n % launches.len()]`.
    launches: Vec<Launch>,
}

impl Apps {
    /// Starts `count` instances. The first creates and migrates the database alone; the
    /// others then start together against a ready schema.
    pub async fn start(launch: Launch, count: usize) -> Result<Apps> {
        Apps::start_each(vec![launch], count).await
    }

    /// Starts `count` instances, instance `n` with `launches[n % launches.len()]` — e.g. each
    /// with the address of another node of a multi-primary database. The first creates and
    /// migrates the database alone; the others then start together against a ready schema.
    pub async fn start_each(launches: Vec<Launch>, count: usize) -> Result<Apps> {
        anyhow::ensure!(count >= 1, "at least one app instance is needed");
        anyhow::ensure!(!launches.is_empty(), "an instance needs a launch");
        let first = Instance::start(&launches[0], "app-0").await?;
        let names: Vec<(usize, String)> = (1..count).map(|n| (n, format!("app-{n}"))).collect();
        let rest = futures::future::try_join_all(
            (names.iter()).map(|(n, name)| Instance::start(nth(&launches, *n), name)),
        )
        .await?;
        let mut instances = vec![first];
        instances.extend(rest);
        Ok(Apps {
            instances,
            launches,
        })
    }

    /// The launch instance `n` was started with.
    fn launch(&self, n: usize) -> &Launch {
        nth(&self.launches, n)
    }

    /// `count` more instances started like these plus `extra` arguments, named `<name>-<n>`:
    /// the same database and servers under another setting (e.g. `--redis-wait-replicas`).
    pub async fn start_variant(&self, name: &str, extra: &[String], count: usize) -> Result<Apps> {
        let launches: Vec<Launch> = (self.launches.iter())
            .map(|l| l.clone().args(extra.iter().cloned()))
            .collect();
        let names: Vec<(usize, String)> = (0..count).map(|n| (n, format!("{name}-{n}"))).collect();
        let instances = futures::future::try_join_all(
            (names.iter()).map(|(n, name)| Instance::start(nth(&launches, *n), name)),
        )
        .await?;
        Ok(Apps {
            instances,
            launches,
        })
    }

    /// `http://127.0.0.1:PORT` of each instance, in order.
    pub fn bases(&self) -> Vec<String> {
        self.instances.iter().map(|i| i.base.clone()).collect()
    }

    /// Every instance's process id, in order.
    pub fn pids(&self) -> Vec<u32> {
        self.instances.iter().map(Instance::pid).collect()
    }

    /// Whether every instance is still running.
    pub fn all_running(&mut self) -> bool {
        self.instances.iter_mut().all(Instance::is_running)
    }

    /// Starts instance `n` again (after a kill) with the same launch, on a new port, logging
    /// to `app-<n>-restarted.log`.
    pub async fn restart(&mut self, n: usize) -> Result<()> {
        self.instances[n] = Instance::start(self.launch(n), &format!("app-{n}-restarted")).await?;
        Ok(())
    }

    /// Starts instance `n` again (after a kill) on the port it had, so that the clients that
    /// know its address find it again, logging to `app-<n>-restarted.log`.
    pub async fn restart_in_place(&mut self, n: usize) -> Result<()> {
        let port = (self.instances[n].base.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .with_context(|| format!("no port in {}", self.instances[n].base))?;
        self.instances[n] =
            Instance::start_on(self.launch(n), &format!("app-{n}-restarted"), Some(port)).await?;
        Ok(())
    }

    /// SIGTERM to every instance (each finishes its requests in flight), SIGKILL to those
    /// still running after a grace period.
    pub async fn shutdown(mut self) {
        for i in &self.instances {
            let _ = i.resume();
            let _ = i.signal(Signal::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && self.instances.iter_mut().any(Instance::is_running) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Dropping kills what is left.
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::FOREIGN_ENV;

    #[test]
    fn every_server_address_the_app_reads_from_the_environment_is_cleared_for_an_instance() {
        // The app's own settings are `SECKILL_…`; every other variable it reads names a server.
        let command = app::Config::command();
        let servers: Vec<String> = command
            .get_arguments()
            .filter_map(|arg| arg.get_env())
            .map(|name| name.to_string_lossy().into_owned())
            .filter(|name| !name.starts_with("SECKILL_"))
            .collect();
        assert!(
            servers.iter().any(|name| name == "DATABASE_URL"),
            "{servers:?}"
        );
        let inherited: Vec<&String> = servers
            .iter()
            .filter(|name| !FOREIGN_ENV.contains(&name.as_str()))
            .collect();
        assert!(
            inherited.is_empty(),
            "an instance would reach the server this process's environment names: {inherited:?}"
        );
    }
}
