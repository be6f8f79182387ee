//! `seckill-bench lock matrix`: every lock backend against every requirement the background
//! articles ask of a lock service — mutual exclusion (one holder at a time), fencing tokens in
//! grant order, no deadlock (expiry), reentrancy, a non-blocking try, high availability,
//! performance, fairness, no herd effect, notification instead of polling — with every cell a
//! figure measured in the run that writes the matrix. A lock that breaks a property it claims
//! (every lock of `locks` claims the first two: see its contract) is named in the matrix's
//! text, not only in a cell.
//!
//! Each row is measured against throwaway servers the matrix starts (it kills some of them, so
//! it refuses to run against external servers):
//!
//! * [`contention`]: the lock benchmark itself ([`crate::lock::bench`] with `--check`): W
//!   workers over as many clients, the lock-history checker over the record; exclusion, speed,
//!   fairness and requests per grant come from this one run;
//! * [`waiting`]: one client holds the lock while waiters of other clients wait — what waiting
//!   costs in requests, and how soon the release wakes one of them;
//! * [`try_once`]: how fast a try against a held lock answers `busy`;
//! * [`reentry`]: the holder asks again (`reenter` where the lock offers it);
//! * [`expiry`]: a child process holding the lock is SIGKILLed: when is it free again?
//! * [`availability`]: servers are killed under the lock.
//!
//! The database rows include the seed articles' row-lock designs (`db-row-lock`,
//! `db-blocking-insert`) and the unique-key lock made reentrant; [`claims`] sets what the
//! articles claim for them beside what their rows measured.
//!
//! ZooKeeper and etcd rows run on a three-member cluster (the deployment whose availability
//! there is something to say about), Redlock on its five instances, the others on one server.

mod availability;
mod claims;
mod contention;
mod expiry;
mod reentry;
mod report;
mod rig;
mod try_once;
mod waiting;

pub use availability::Availability;
pub use expiry::{Expiry, hold};
pub use reentry::Reentry;
pub use report::render as markdown;
pub use try_once::TryOnce;
pub use waiting::Waiting;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use locks::{AcquireOptions, Backend, DistributedLock, Guard, LockError};
use serde::Serialize;

use super::{LockReport, bench, connect_clients};
use crate::rig::environment::utc_now;
use rig::Rig;

/// The rows, in order: the databases, the caches, the coordination services.
pub const BACKENDS: [Backend; 13] = [
    Backend::DbLock,
    Backend::DbLockReentrant,
    Backend::DbRowLock,
    Backend::DbBlockingInsert,
    Backend::PgAdvisory,
    Backend::PgAdvisoryXact,
    Backend::Redis,
    Backend::RedisWatchdog,
    Backend::RedisFair,
    Backend::Redlock,
    Backend::Memcached,
    Backend::ZooKeeper,
    Backend::Etcd,
];

/// Lease of every acquisition but the crashed holder's: far longer than any probe.
const LEASE: Duration = Duration::from_secs(10);
/// Wait budget of an acquire that must succeed (the lock is free, or about to be).
const WAIT: Duration = Duration::from_secs(5);

/// A column of the matrix, named for what it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Requirement {
    /// Mutual exclusion: never two holders at once (the checker's overlaps).
    OneHolder,
    /// Fencing: tokens rise in grant order, and a resource accepts only the newest.
    TokensInOrder,
    NoDeadlock,
    Reentrancy,
    NonBlockingTry,
    HighAvailability,
    Performance,
    Fairness,
    NoHerd,
    Notification,
}

impl Requirement {
    /// The columns, in order.
    pub const ALL: [Requirement; 10] = [
        Requirement::OneHolder,
        Requirement::TokensInOrder,
        Requirement::NoDeadlock,
        Requirement::Reentrancy,
        Requirement::NonBlockingTry,
        Requirement::HighAvailability,
        Requirement::Performance,
        Requirement::Fairness,
        Requirement::NoHerd,
        Requirement::Notification,
    ];

    pub const fn title(self) -> &'static str {
        match self {
            Requirement::OneHolder => "one holder at a time",
            Requirement::TokensInOrder => "fencing tokens in order",
            Requirement::NoDeadlock => "no deadlock (expiry)",
            Requirement::Reentrancy => "reentrancy",
            Requirement::NonBlockingTry => "non-blocking try",
            Requirement::HighAvailability => "high availability",
            Requirement::Performance => "performance",
            Requirement::Fairness => "fairness",
            Requirement::NoHerd => "no herd",
            Requirement::Notification => "notification",
        }
    }
}

/// How long and how hard each row is measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Settings {
    pub quick: bool,
    /// Contention run: workers, the clients they are spread over, seconds.
    pub workers: usize,
    pub clients: usize,
    pub seconds: f64,
    /// Lease of the holder that is SIGKILLed (ZooKeeper: its session timeout).
    pub crash_lease_ms: u64,
    /// Waiters (each its own client) while one client holds the lock for `held_ms`.
    pub waiters: usize,
    pub held_ms: u64,
    /// Tries against a held lock.
    pub tries: usize,
    /// How long the holder's second acquire of a lock without re-entry waits.
    pub reentry_wait_ms: u64,
    /// Redlock: how long grants are counted with a minority of instances down.
    pub minority_window_ms: u64,
    /// ZooKeeper, etcd: how long the killed leader stays down.
    pub leader_down_ms: u64,
}

impl Settings {
    /// The full form (about half a minute per backend) or the quick one (seconds, for tests).
    pub fn new(quick: bool) -> Settings {
        if quick {
            Settings {
                quick,
                workers: 8,
                clients: 8,
                seconds: 1.0,
                crash_lease_ms: 2_000,
                waiters: 2,
                held_ms: 500,
                tries: 10,
                reentry_wait_ms: 300,
                minority_window_ms: 1_000,
                leader_down_ms: 6_000,
            }
        } else {
            Settings {
                quick,
                workers: 16,
                clients: 16,
                seconds: 5.0,
                crash_lease_ms: 10_000,
                waiters: 4,
                held_ms: 2_000,
                tries: 50,
                reentry_wait_ms: 1_000,
                minority_window_ms: 2_000,
                leader_down_ms: 10_000,
            }
        }
    }
}

/// What to measure, and the `seckill-bench` binary whose hidden `lock hold` plays the holder
/// that crashes.
#[derive(Debug, Clone)]
pub struct Options {
    pub settings: Settings,
    pub backends: Vec<Backend>,
    pub hold_binary: PathBuf,
}

/// One cell: a requirement and what was measured for it, in a few words.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub requirement: Requirement,
    pub text: String,
}

/// One backend: its cells and every figure behind them.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub backend: Backend,
    /// The servers the row ran on, e.g. `3-member ensemble`.
    pub deployment: &'static str,
    /// One per [`Requirement::ALL`], in that order.
    pub cells: Vec<Cell>,
    pub contention: LockReport,
    pub waiting: Waiting,
    pub try_once: TryOnce,
    pub reentry: Reentry,
    pub expiry: Expiry,
    pub availability: Availability,
}

impl Row {
    /// The text of `requirement`'s cell.
    pub fn cell(&self, requirement: Requirement) -> &str {
        self.cells
            .iter()
            .find(|c| c.requirement == requirement)
            .map_or("", |c| c.text.as_str())
    }
}

/// The whole matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    pub started_at: String,
    pub duration_seconds: f64,
    pub settings: Settings,
    pub versions: Option<sandbox::Versions>,
    /// The version of the PostgreSQL the advisory locks' rows ran on, when they ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres_version: Option<String>,
    pub rows: Vec<Row>,
}

impl Matrix {
    /// `started_at` as a directory name (`2026-11-23T06-10-00Z`).
    pub fn dir_name(&self) -> String {
        self.started_at.replace(':', "-")
    }
}

/// Measures every row of `opts.backends`.
pub async fn run(opts: &Options) -> Result<Matrix> {
    if let Err(why) = sandbox::faults_allowed() {
        bail!("the lock matrix kills its own servers: {why}");
    }
    let started = Instant::now();
    let (started_at, _) = utc_now();
    eprintln!("lock matrix: starting throwaway servers…");
    let servers = rig::Servers::start().await?;
    let versions = servers.versions().await;
    let (mut rows, mut postgres_version) = (Vec::new(), None);
    for &backend in &opts.backends {
        eprintln!("lock matrix: {backend}…");
        let rig = Rig::start(backend, servers.clone()).await?;
        if postgres_version.is_none() {
            postgres_version = rig.postgres_version().await;
        }
        rows.push(
            row(backend, &rig, opts)
                .await
                .with_context(|| format!("lock matrix, backend {backend}"))?,
        );
    }
    Ok(Matrix {
        started_at,
        duration_seconds: started.elapsed().as_secs_f64(),
        settings: opts.settings,
        versions,
        postgres_version,
        rows,
    })
}

async fn row(backend: Backend, rig: &Rig, opts: &Options) -> Result<Row> {
    let s = &opts.settings;
    let endpoints = rig.endpoints();
    let clients = connect_clients(backend, &endpoints, s.clients).await?;
    let contention = bench(
        backend,
        clients,
        &endpoints,
        s.workers,
        s.seconds,
        Duration::ZERO,
        true,
    )
    .await?;
    let waiting = waiting::measure(backend, &endpoints, s).await?;
    let try_once = try_once::measure(backend, &endpoints, s.tries).await?;
    let reentry = reentry::measure(backend, &endpoints, ms(s.reentry_wait_ms)).await?;
    let expiry =
        expiry::measure(backend, &endpoints, ms(s.crash_lease_ms), &opts.hold_binary).await?;
    let availability = availability::measure(backend, rig, s).await?;
    let texts = [
        contention::one_holder(&contention),
        contention::tokens_in_order(&contention),
        expiry.cell(backend),
        reentry.cell(),
        try_once.cell(),
        availability.cell(),
        contention::performance(&contention),
        contention::fairness(&contention),
        contention::herd(&contention),
        waiting.cell(backend),
    ];
    Ok(Row {
        backend,
        deployment: rig.deployment(),
        cells: Requirement::ALL
            .into_iter()
            .zip(texts)
            .map(|(requirement, text)| Cell { requirement, text })
            .collect(),
        contention,
        waiting,
        try_once,
        reentry,
        expiry,
        availability,
    })
}

/// Writes `matrix.md`, `matrix.json` and `matrix.html` (the same report as a page, its table
/// sortable) into `dir` (created if missing).
pub fn write(dir: &Path, matrix: &Matrix) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = serde_json::to_string_pretty(matrix)? + "\n";
    let md = markdown(matrix);
    let html = crate::report::html::page::of(report::TITLE, &report::document(matrix));
    for (name, text) in [
        ("matrix.json", json),
        ("matrix.md", md),
        ("matrix.html", html),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A lock name of its own for one probe.
fn fresh_key(probe: &str) -> String {
    format!("seckill-bench:matrix:{probe}:{}", locks::new_owner_id())
}

/// Takes and gives back a lock of its own once, so that `lock`'s connections (and sessions,
/// subscriptions) exist before anything is counted or timed.
async fn warm(lock: &dyn DistributedLock) -> Result<()> {
    let guard = lock
        .acquire(&fresh_key("warm"), AcquireOptions::new(LEASE).wait(WAIT))
        .await?;
    guard.release().await?;
    Ok(())
}

/// One try of `key` by `lock`: `true` if it answered that someone else holds it.
async fn busy(lock: &dyn DistributedLock, key: &str) -> Result<bool> {
    match lock.acquire(key, AcquireOptions::new(LEASE)).await {
        Ok(guard) => {
            guard.release().await?;
            Ok(false)
        }
        Err(e) if is_busy(&e) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// The answers that mean "held by someone else" (Redlock's is a missing majority).
fn is_busy(e: &LockError) -> bool {
    matches!(e, LockError::Timeout { .. } | LockError::NoQuorum { .. })
}

/// An acquire's outcome in a word, the guard given back.
async fn answer(outcome: Result<Guard, LockError>) -> &'static str {
    match outcome {
        Ok(guard) => {
            let _ = guard.release().await;
            "granted"
        }
        Err(LockError::Timeout { .. }) => "busy",
        Err(LockError::NoQuorum { .. }) => "no quorum",
        Err(LockError::Unavailable(_)) => "unavailable",
        Err(LockError::Unreplicated { .. }) => "unreplicated",
    }
}

/// A duration in milliseconds, as a cell shows it: `0.42 ms`, `12 ms`, `2.1 s`.
fn duration(ms: f64) -> String {
    match ms {
        ms if ms < 1.0 => format!("{ms:.2} ms"),
        ms if ms < 10.0 => format!("{ms:.1} ms"),
        ms if ms < 1_000.0 => format!("{ms:.0} ms"),
        ms => format!("{:.1} s", ms / 1_000.0),
    }
}

/// `12345` as `12,345`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }

    #[test]
    fn durations_keep_two_significant_digits_or_so() {
        assert_eq!(duration(0.417), "0.42 ms");
        assert_eq!(duration(4.24), "4.2 ms");
        assert_eq!(duration(123.4), "123 ms");
        assert_eq!(duration(10_300.0), "10.3 s");
    }
}
