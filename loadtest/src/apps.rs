//! Starting and stopping `seckill-app` instances as separate processes.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sandbox::Endpoints;

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

/// How to start the instances.
pub struct AppConfig {
    pub binary: PathBuf,
    pub endpoints: Endpoints,
    /// The database the app creates and migrates (appended to the server URL).
    pub database: String,
    pub admin_token: String,
    /// Where each instance's stdout/stderr go (`app-<n>.log`).
    pub log_dir: PathBuf,
    pub allow_fault_injection: bool,
}

/// Running instances; dropping stops them (SIGTERM, then SIGKILL after 3 s).
pub struct Apps {
    children: Vec<Child>,
    /// Kill the instances should this process die without dropping `Apps`.
    guardians: Vec<sandbox::Guardian>,
    /// `http://127.0.0.1:PORT` of each instance.
    pub bases: Vec<String>,
}

impl Apps {
    /// Starts `count` instances and waits until each answers `GET /healthz` with 200.
    pub fn start(config: &AppConfig, count: usize) -> Result<Apps> {
        std::fs::create_dir_all(&config.log_dir)?;
        let mut apps = Apps {
            children: Vec::new(),
            guardians: Vec::new(),
            bases: Vec::new(),
        };
        let database_url = format!(
            "{}/{}",
            config.endpoints.database_url.trim_end_matches('/'),
            config.database
        );
        for n in 0..count {
            let port = free_port()?;
            let log_path = config.log_dir.join(format!("app-{n}.log"));
            let log = std::fs::File::create(&log_path)?;
            let mut cmd = Command::new(&config.binary);
            config.endpoints.apply(&mut cmd);
            cmd.arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--database-url")
                .arg(&database_url)
                .arg("--admin-token")
                .arg(&config.admin_token)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            if config.allow_fault_injection {
                cmd.arg("--allow-fault-injection");
            }
            if std::env::var_os("RUST_LOG").is_none() {
                // Per-request logging would cost the app more than the work it measures.
                cmd.env("RUST_LOG", "warn");
            }
            let child = cmd
                .spawn()
                .with_context(|| format!("starting {}", config.binary.display()))?;
            apps.guardians.push(sandbox::Guardian::watch(child.id())?);
            apps.children.push(child);
            apps.bases.push(format!("http://127.0.0.1:{port}"));
            if n == 0 {
                // The first instance creates and migrates the database alone; the others
                // then start against a ready schema.
                apps.wait_ready(0, &log_path)?;
            }
        }
        for n in 1..count {
            apps.wait_ready(n, &config.log_dir.join(format!("app-{n}.log")))?;
        }
        Ok(apps)
    }

    fn wait_ready(&mut self, n: usize, log: &Path) -> Result<()> {
        let url = format!("{}/healthz", self.bases[n]);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.children[n].try_wait()? {
                bail!(
                    "seckill-app instance {n} exited during start-up ({status}); last lines of {}:\n{}",
                    log.display(),
                    tail(log)
                );
            }
            if http_get_status(&url) == Some(200) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "seckill-app instance {n} did not answer {url} with 200 within 60 s; last lines of {}:\n{}",
                    log.display(),
                    tail(log)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether every instance is still running.
    pub fn all_running(&mut self) -> bool {
        self.children
            .iter_mut()
            .all(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Apps {
    fn drop(&mut self) {
        for c in &self.children {
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for c in &mut self.children {
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A minimal blocking HTTP/1.0 GET (start-up only, before any runtime), returning the status.
fn http_get_status(url: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut s = std::net::TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    let head = std::str::from_utf8(&buf[..n]).ok()?;
    head.split_whitespace().nth(1)?.parse().ok()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
