//! Fault scenarios: each reproduces one classic failure of stock deduction or distributed
//! locking against servers it starts itself, runs the affected strategies or lock backends
//! through it, and reports *expected* against *observed*, with the figures and the timeline.
//!
//! | scenario | fault | must show |
//! |---|---|---|
//! | `lease-expiry` | the critical section stalls past the lease | `redis-lock` oversells, `redis-watchdog` does not, `redis-lock-fenced` rejects the stale write |
//! | `process-pause` | SIGSTOP of the app instance holding the lock, past the lease | the watchdog cannot help a frozen process; fencing rejects its late write |
//! | `holder-crash` | SIGKILL of the instance inside the critical section | how soon each lock comes back: never (`SETNX` without expiry), a lease, a session timeout, at once (row lock); no order lost or doubled |
//! | `unsafe-release` | a lease expires, then the old holder releases | a plain `DEL` frees the next holder's lock (two holders); compare-and-delete does not |
//! | `redis-failover` | the primary dies before replicating a grant; the replica is promoted | a second grant of the same lock; `WAIT 1` after acquiring tells the holder not to trust it |
//! | `local-mutex` | 1 vs 3 app instances | an in-process mutex is exclusive only within its process |
//! | `zk-session-expiry` | the holder is cut off from ZooKeeper until its session expires | `lost()` fires, another contender acquires, the fenced stale write is rejected |
//! | `herd` | 64 waiters on one lock | requests per grant and hand-off latency: polling vs pub/sub vs predecessor watch |
//!
//! Every scenario starts private servers (and app processes), because it kills, pauses and
//! partitions them; with `SECKILL_EXTERNAL=1` it refuses to run. Verdicts are computed from
//! what was measured: for a deliberately broken variant, "pass" means its failure showed.

mod app;
mod failover;
mod fenced_store;
mod herd;
mod holder_crash;
mod lease_expiry;
mod local_mutex;
mod partition;
mod process_pause;
mod report;
mod unsafe_release;
mod zk_expiry;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

pub use report::{Event, Row, ScenarioReport, Timeline, Verdict};

/// Every scenario, in the order `all` runs them.
pub const NAMES: &[&str] = &[
    "lease-expiry",
    "process-pause",
    "holder-crash",
    "unsafe-release",
    "redis-failover",
    "local-mutex",
    "zk-session-expiry",
    "herd",
];

/// How to run a scenario.
#[derive(Debug, Clone, Default)]
pub struct ScenarioOptions {
    /// Short leases, few rounds: seconds per scenario, for CI.
    pub quick: bool,
    /// The `seckill-app` binary, needed by the scenarios that run the app.
    pub app_binary: Option<PathBuf>,
}

/// Runs scenario `name` (or every one, for `all`) and returns its report(s).
pub async fn run(name: &str, opts: &ScenarioOptions) -> Result<Vec<ScenarioReport>> {
    if name != "all" && !NAMES.contains(&name) {
        bail!(
            "unknown scenario `{name}`; known: {}, all",
            NAMES.join(", ")
        );
    }
    if let Err(why) = sandbox::faults_allowed() {
        bail!("fault scenarios start, kill and pause their own servers: {why}");
    }
    if name == "all" {
        let mut reports = Vec::new();
        for name in NAMES {
            reports.push(
                run_one(name, opts)
                    .await
                    .with_context(|| format!("scenario `{name}`"))?,
            );
        }
        return Ok(reports);
    }
    let report = run_one(name, opts)
        .await
        .with_context(|| format!("scenario `{name}`"))?;
    Ok(vec![report])
}

async fn run_one(name: &str, opts: &ScenarioOptions) -> Result<ScenarioReport> {
    match name {
        "lease-expiry" => lease_expiry::run(opts).await,
        "process-pause" => process_pause::run(opts).await,
        "holder-crash" => holder_crash::run(opts).await,
        "unsafe-release" => unsafe_release::run(opts).await,
        "redis-failover" => failover::run(opts).await,
        "local-mutex" => local_mutex::run(opts).await,
        "zk-session-expiry" => zk_expiry::run(opts).await,
        "herd" => herd::run(opts).await,
        _ => bail!(
            "unknown scenario `{name}`; known: {}, all",
            NAMES.join(", ")
        ),
    }
}

/// Starts a sandbox server off the async threads (starting blocks for about a second).
async fn start<T: Send + 'static>(start: fn() -> sandbox::Result<T>) -> Result<T> {
    Ok(tokio::task::spawn_blocking(start).await??)
}

/// Runs a blocking server-control call off the async threads.
async fn control<F>(f: F) -> Result<()>
where
    F: FnOnce() -> sandbox::Result<()> + Send + 'static,
{
    Ok(tokio::task::spawn_blocking(f).await??)
}
