//! No deadlock: a holder that dies must not keep the lock. Measured with a real crash — a child
//! process (`seckill-bench lock hold`) acquires the lock, says so, and is SIGKILLed holding it:
//! no release, no goodbye to the server, its connections closed by the kernel. Another client,
//! which was refused while the child lived, then tries every few milliseconds; the figure is
//! the time from the kill to its grant. A lease-based lock comes back within one lease (the
//! watchdog locks within one lease of the last renewal); ZooKeeper when the dead session times
//! out; the database lock when a waiter reaps the expired row.

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use locks::{AcquireOptions, Backend};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::{LEASE, busy, duration, fresh_key, warm};
use crate::lock::{connect_backend, connect_leased};

/// How long the child may take to be granted the lock.
const GRANT_PATIENCE: Duration = Duration::from_secs(30);
/// Pause between the tries after the kill: the figure's resolution.
const RETRY: Duration = Duration::from_millis(20);

/// When the lock of a SIGKILLed holder came free.
#[derive(Debug, Clone, Serialize)]
pub struct Expiry {
    /// The holder's lease (ZooKeeper: its session timeout).
    pub lease_ms: u64,
    /// Another client was refused while the holder lived: it did hold the lock.
    pub held_before_kill: bool,
    /// From the kill to another client's grant; `None` if not within `bound_ms`.
    pub freed_after_ms: Option<f64>,
    pub bound_ms: u64,
    pub holder_token: u64,
    /// The fencing token of the grant after the crash.
    pub next_token: Option<u64>,
}

impl Expiry {
    pub fn cell(&self, backend: Backend) -> String {
        let lease = match backend {
            Backend::ZooKeeper => "session",
            _ => "lease",
        };
        let lease = format!("{lease} {}", duration(self.lease_ms as f64));
        match (self.held_before_kill, self.freed_after_ms) {
            (false, _) => format!("holder not alone before SIGKILL ({lease})"),
            (true, Some(ms)) => format!("freed {} after holder SIGKILL ({lease})", duration(ms)),
            (true, None) => format!(
                "not freed within {} of holder SIGKILL ({lease})",
                duration(self.bound_ms as f64)
            ),
        }
    }
}

pub async fn measure(
    backend: Backend,
    endpoints: &sandbox::Endpoints,
    lease: Duration,
    hold_binary: &Path,
) -> Result<Expiry> {
    let key = fresh_key("expiry");
    let waiter = connect_backend(backend, endpoints).await?;
    warm(waiter.as_ref()).await?;
    let mut child = tokio::process::Command::new(hold_binary)
        .args([
            "lock",
            "hold",
            "--backend",
            backend.name(),
            "--key",
            key.as_str(),
        ])
        .arg("--lease-ms")
        .arg(lease.as_millis().to_string())
        .envs(endpoints.env_vars())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", hold_binary.display()))?;
    // Kept open until the kill: the holder also quits when it closes (see `hold`).
    let _stdin = child.stdin.take();
    let stdout = child.stdout.take().context("the holder's stdout")?;
    let line = tokio::time::timeout(GRANT_PATIENCE, BufReader::new(stdout).lines().next_line())
        .await
        .with_context(|| format!("the holder was not granted within {GRANT_PATIENCE:?}"))??
        .context("the holder exited before it was granted")?;
    let holder_token: u64 = line
        .strip_prefix("granted ")
        .and_then(|t| t.trim().parse().ok())
        .with_context(|| format!("the holder said {line:?}"))?;
    let held_before_kill = busy(waiter.as_ref(), &key).await?;
    child.start_kill()?;
    child.wait().await?;
    let killed = Instant::now();
    let bound = lease * 3 + Duration::from_secs(10);
    let mut freed = None;
    while freed.is_none() && killed.elapsed() < bound {
        match waiter.acquire(&key, AcquireOptions::new(LEASE)).await {
            Ok(guard) => {
                freed = Some((killed.elapsed(), guard.fencing_token()));
                guard.release().await?;
            }
            Err(_) => tokio::time::sleep(RETRY).await,
        }
    }
    Ok(Expiry {
        lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
        held_before_kill,
        freed_after_ms: freed.map(|(after, _)| after.as_secs_f64() * 1000.0),
        bound_ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
        holder_token,
        next_token: freed.map(|(_, token)| token),
    })
}

/// `seckill-bench lock hold`: acquires `key` with a lease of `lease` (a ZooKeeper session of
/// `lease`), prints `granted <token>` and keeps the lock — renewing it where the lock renews —
/// until the process is killed, or its standard input ends: a matrix that died (its end of the
/// pipe closed) leaves no holder behind.
pub async fn hold(
    backend: Backend,
    endpoints: &sandbox::Endpoints,
    key: &str,
    lease: Duration,
) -> Result<()> {
    let lock = connect_leased(backend, endpoints, lease).await?;
    let guard = lock
        .acquire(key, AcquireOptions::new(lease).wait(GRANT_PATIENCE))
        .await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "granted {}", guard.fencing_token())?;
        out.flush()?;
    }
    let mut rest = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut rest).await;
    guard.release().await?;
    Ok(())
}
