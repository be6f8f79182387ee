//! `seckill-bench lock peers`: our locks' hand-off speed beside the Python lock libraries people
//! use today, measured in one run on the same servers and the same workload.
//!
//! The subjects, in the order each round measures them: `redis-watchdog` (ours), python-redis-lock
//! (as its README shows it, with a lease: no renewal), python-redis-lock with `auto_renewal`
//! (the like-for-like of our watchdog, slower), redis-py's `Lock`, `zookeeper` (ours) and kazoo's
//! `Lock`. Ours run through [`super::bench`]
//! with one lock client shared by the workers (`--clients 1`); the Python ones through
//! `loadtest/peers/lock_peers.py`, which does the same workload with worker threads sharing one
//! client object (its doc says how each library is used). Same workers, seconds, lease
//! ([`super::LEASE`], the ZooKeeper session timeout for the ZooKeeper locks) and wait per
//! acquire ([`super::WAIT`]). Rounds interleave the subjects (A B C D E, A B C D E, …), so that a
//! slow minute of a shared machine lands on one run of each; the report gives each figure's
//! median and min–max over the rounds, the ratios of the medians, and whether our locks hold
//! their targets against the peers: `redis-watchdog` ≥ 2× python-redis-lock's acquisitions/s
//! (the faster form, without renewal) with an acquire p99 ≤ 1/20 of redis-py's, `zookeeper` ≥
//! 2× kazoo's acquisitions/s.
//!
//! Server commands per grant are read from Redis's own counter for the Redis subjects, Python's
//! too ([`super::server_commands`]; the probe's GET and SET taken off); client requests per
//! grant only where the client counts them (ours).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use locks::Backend;
use sandbox::Endpoints;
use serde::{Deserialize, Serialize};

use super::server_commands::Counter;
use super::{LEASE, LockReport, WAIT, ZOOKEEPER_SESSION};
use crate::analyse::spread::interleaved;
use crate::report::section::Section;
use crate::report::table::Table;
use crate::report::tables::spread;
use crate::schema::Spread;

/// One lock under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Subject {
    RedisWatchdog,
    PythonRedisLock,
    PythonRedisLockRenewed,
    RedisPyLock,
    Zookeeper,
    Kazoo,
}

impl Subject {
    /// Every subject, in the order a round measures them.
    pub const ALL: [Subject; 6] = [
        Subject::RedisWatchdog,
        Subject::PythonRedisLock,
        Subject::PythonRedisLockRenewed,
        Subject::RedisPyLock,
        Subject::Zookeeper,
        Subject::Kazoo,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Subject::RedisWatchdog => "redis-watchdog",
            Subject::PythonRedisLock => "python-redis-lock",
            Subject::PythonRedisLockRenewed => "python-redis-lock auto_renewal",
            Subject::RedisPyLock => "redis-py Lock",
            Subject::Zookeeper => "zookeeper",
            Subject::Kazoo => "kazoo Lock",
        }
    }

    /// Our backend, or `None` for a Python library.
    fn ours(self) -> Option<Backend> {
        match self {
            Subject::RedisWatchdog => Some(Backend::RedisWatchdog),
            Subject::Zookeeper => Some(Backend::ZooKeeper),
            _ => None,
        }
    }

    /// The script's `--library`.
    fn library(self) -> &'static str {
        match self {
            Subject::PythonRedisLock | Subject::PythonRedisLockRenewed => "python-redis-lock",
            Subject::RedisPyLock => "redis-py",
            _ => "kazoo",
        }
    }

    /// Whether the lock lives in the harness's Redis (whose command counter then tells).
    fn in_redis(self) -> bool {
        !matches!(self, Subject::Zookeeper | Subject::Kazoo)
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to run the comparison.
#[derive(Debug, Clone)]
pub struct PeersOptions {
    pub workers: usize,
    pub seconds: f64,
    pub rounds: usize,
    /// The Python with the pinned libraries (`cargo xtask setup` makes it).
    pub python: PathBuf,
    /// `lock_peers.py`.
    pub script: PathBuf,
}

impl PeersOptions {
    /// The venv `cargo xtask setup` installs the libraries into:
    /// `$XDG_CACHE_HOME/seckill-bench/venv/bin/python`, else under `~/.cache`.
    pub fn default_python() -> PathBuf {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
            });
        cache.join("seckill-bench/venv/bin/python")
    }

    /// The script in this source tree.
    pub fn default_script() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/peers/lock_peers.py"))
    }
}

/// One subject's figures in one round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub subject: Subject,
    pub round: usize,
    pub acquisitions: u64,
    pub acquisitions_per_sec: f64,
    pub acquire_p50_us: u64,
    pub acquire_p99_us: u64,
    pub violations: i64,
    /// From a release call to the next grant, median (µs).
    pub handoff_p50_us: Option<u64>,
    pub client_requests_per_grant: Option<f64>,
    pub server_commands_per_grant: Option<f64>,
    /// The Python library's version; `None` for ours.
    pub version: Option<String>,
}

/// A subject over all rounds: each figure's median and range.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubjectSummary {
    pub subject: Subject,
    pub version: Option<String>,
    pub acquisitions_per_sec: Spread,
    pub acquire_p50_us: Spread,
    pub acquire_p99_us: Spread,
    pub handoff_p50_us: Option<Spread>,
    pub client_requests_per_grant: Option<Spread>,
    pub server_commands_per_grant: Option<Spread>,
    /// Over all rounds.
    pub acquisitions: u64,
    pub violations: i64,
}

/// One target of ours against a peer, checked on the medians: `ratio` is ours over the peer's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetCheck {
    pub what: String,
    pub ours: f64,
    pub peer: f64,
    pub ratio: f64,
    /// `≥ 2` or `≤ 0.05`.
    pub required: String,
    pub holds: bool,
}

/// The comparison: every run, the summaries, the targets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeersReport {
    pub workers: usize,
    pub clients: usize,
    pub seconds: f64,
    pub rounds: usize,
    pub lease_s: f64,
    pub wait_s: f64,
    pub runs: Vec<Measured>,
    pub subjects: Vec<SubjectSummary>,
    pub targets: Vec<TargetCheck>,
}

/// Runs `options.rounds` interleaved rounds of every subject against the harness's servers.
pub async fn run(endpoints: &Endpoints, options: &PeersOptions) -> Result<PeersReport> {
    ensure!(options.workers >= 1, "--workers must be at least 1");
    ensure!(options.rounds >= 1, "--rounds must be at least 1");
    ensure!(options.seconds > 0.0, "--seconds must be positive");
    let mut runs = Vec::new();
    for (round, item) in interleaved(Subject::ALL.len(), options.rounds) {
        let subject = Subject::ALL[item];
        eprintln!(
            "lock peers: round {}/{}: {subject}…",
            round + 1,
            options.rounds
        );
        let measured = measure(subject, endpoints, options)
            .await
            .with_context(|| format!("measuring {subject}"))?;
        runs.push(Measured { round, ..measured });
    }
    let subjects: Vec<SubjectSummary> = Subject::ALL.iter().map(|&s| summary(s, &runs)).collect();
    let targets = targets(&subjects);
    Ok(PeersReport {
        workers: options.workers,
        clients: 1,
        seconds: options.seconds,
        rounds: options.rounds,
        lease_s: LEASE.as_secs_f64(),
        wait_s: WAIT.as_secs_f64(),
        runs,
        subjects,
        targets,
    })
}

async fn measure(
    subject: Subject,
    endpoints: &Endpoints,
    options: &PeersOptions,
) -> Result<Measured> {
    let Some(backend) = subject.ours() else {
        return python(subject, endpoints, options).await;
    };
    let clients = super::connect_clients(backend, endpoints, 1).await?;
    let seconds = options.seconds;
    let report = super::bench(
        backend,
        clients,
        endpoints,
        options.workers,
        seconds,
        Duration::ZERO,
        false,
    )
    .await?;
    Ok(ours(subject, &report))
}

fn ours(subject: Subject, r: &LockReport) -> Measured {
    Measured {
        subject,
        round: 0,
        acquisitions: r.acquisitions,
        acquisitions_per_sec: r.acquisitions_per_sec,
        acquire_p50_us: r.acquire_p50_us,
        acquire_p99_us: r.acquire_p99_us,
        violations: r.violations,
        handoff_p50_us: r.handoff_p50_us,
        client_requests_per_grant: r.client_requests_per_grant,
        server_commands_per_grant: r.server_commands_per_grant,
        version: None,
    }
}

/// What `lock_peers.py` prints.
#[derive(Debug, Deserialize)]
struct PythonRun {
    version: String,
    acquisitions: u64,
    acquisitions_per_sec: f64,
    acquire_p50_us: u64,
    acquire_p99_us: u64,
    violations: i64,
    handoff_p50_us: Option<u64>,
    errors: Vec<String>,
}

async fn python(
    subject: Subject,
    endpoints: &Endpoints,
    options: &PeersOptions,
) -> Result<Measured> {
    let lease = if subject.in_redis() {
        LEASE
    } else {
        ZOOKEEPER_SESSION
    };
    let mut command = Command::new(&options.python);
    command
        .arg(&options.script)
        .args(["--library", subject.library()])
        .args(["--redis-url", &endpoints.redis_url])
        .args(["--zookeeper", &endpoints.zookeeper])
        .arg("--workers")
        .arg(options.workers.to_string())
        .arg("--seconds")
        .arg(options.seconds.to_string())
        .arg("--lease")
        .arg(lease.as_secs_f64().to_string())
        .arg("--wait")
        .arg(WAIT.as_secs_f64().to_string());
    if subject == Subject::PythonRedisLockRenewed {
        command.arg("--renewal");
    }
    let mut counter = if subject.in_redis() {
        Some(Counter::open(std::slice::from_ref(&endpoints.redis_url)).await?)
    } else {
        None
    };
    let before = match &mut counter {
        Some(c) => Some(c.read().await?),
        None => None,
    };
    let program = options.python.display().to_string();
    let output = tokio::task::spawn_blocking(move || command.output())
        .await?
        .with_context(|| format!("running {program} (try `cargo xtask setup`)"))?;
    ensure!(
        output.status.success(),
        "{} {} failed ({}): {}",
        program,
        options.script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let run: PythonRun = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "reading the script's JSON: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })?;
    ensure!(run.errors.is_empty(), "workers failed: {:?}", run.errors);
    let commands = match (&mut counter, before) {
        (Some(c), Some(before)) => {
            Some(c.since(before).await?.saturating_sub(2 * run.acquisitions))
        }
        _ => None,
    };
    Ok(Measured {
        subject,
        round: 0,
        acquisitions: run.acquisitions,
        acquisitions_per_sec: run.acquisitions_per_sec,
        acquire_p50_us: run.acquire_p50_us,
        acquire_p99_us: run.acquire_p99_us,
        violations: run.violations,
        handoff_p50_us: run.handoff_p50_us,
        client_requests_per_grant: None,
        server_commands_per_grant: commands
            .filter(|_| run.acquisitions > 0)
            .map(|c| c as f64 / run.acquisitions as f64),
        version: Some(run.version),
    })
}

fn summary(subject: Subject, runs: &[Measured]) -> SubjectSummary {
    let mine: Vec<&Measured> = runs.iter().filter(|m| m.subject == subject).collect();
    let spread = |f: &dyn Fn(&Measured) -> f64| {
        Spread::of(&mine.iter().map(|&m| f(m)).collect::<Vec<_>>()).expect("at least one round")
    };
    let optional = |f: &dyn Fn(&Measured) -> Option<f64>| {
        let values: Option<Vec<f64>> = mine.iter().map(|&m| f(m)).collect();
        values.and_then(|v| Spread::of(&v))
    };
    SubjectSummary {
        subject,
        version: mine.first().and_then(|m| m.version.clone()),
        acquisitions_per_sec: spread(&|m| m.acquisitions_per_sec),
        acquire_p50_us: spread(&|m| m.acquire_p50_us as f64),
        acquire_p99_us: spread(&|m| m.acquire_p99_us as f64),
        handoff_p50_us: optional(&|m| m.handoff_p50_us.map(|v| v as f64)),
        client_requests_per_grant: optional(&|m| m.client_requests_per_grant),
        server_commands_per_grant: optional(&|m| m.server_commands_per_grant),
        acquisitions: mine.iter().map(|m| m.acquisitions).sum(),
        violations: mine.iter().map(|m| m.violations).sum(),
    }
}

/// Our three targets against the peers, on the medians.
fn targets(subjects: &[SubjectSummary]) -> Vec<TargetCheck> {
    let of = |s: Subject| {
        subjects
            .iter()
            .find(|x| x.subject == s)
            .expect("every subject summarised")
    };
    let faster = |ours: Subject, peer: Subject| {
        let (o, p) = (
            of(ours).acquisitions_per_sec.median,
            of(peer).acquisitions_per_sec.median,
        );
        let ratio = o / p;
        TargetCheck {
            what: format!("{ours} acquisitions/s ≥ 2× {peer}'s"),
            ours: o,
            peer: p,
            ratio,
            required: "≥ 2".to_owned(),
            holds: ratio >= 2.0,
        }
    };
    let (o, p) = (
        of(Subject::RedisWatchdog).acquire_p99_us.median,
        of(Subject::RedisPyLock).acquire_p99_us.median,
    );
    let tail = TargetCheck {
        what: format!(
            "{} acquire p99 ≤ 1/20 of {}'s",
            Subject::RedisWatchdog,
            Subject::RedisPyLock
        ),
        ours: o,
        peer: p,
        ratio: o / p,
        required: "≤ 0.05".to_owned(),
        holds: o / p <= 0.05,
    };
    vec![
        faster(Subject::RedisWatchdog, Subject::PythonRedisLock),
        tail,
        faster(Subject::Zookeeper, Subject::Kazoo),
    ]
}

impl PeersReport {
    /// The comparison as Markdown: the settings, one row per subject, the targets.
    pub fn markdown(&self) -> String {
        let mut section = Section::titled(TITLE);
        section.append(self.body());
        section.markdown()
    }

    /// The comparison without its title, printed as Markdown and as HTML.
    pub fn body(&self) -> Section {
        let mut body = Section::default();
        body.prose(format!(
            "{} workers sharing one client per lock, one lock, a Redis GET then SET inside; \
             {:.1} s per run, median (min–max) of {} interleaved round(s); lease {:.0} s, \
             each acquire waits at most {:.0} s.",
            self.workers, self.seconds, self.rounds, self.lease_s, self.wait_s
        ));
        let optional = |s: &Option<Spread>, digits: usize| {
            s.as_ref().map_or_else(
                || "n/a".to_owned(),
                |s| match s.runs.len() {
                    0 | 1 => format!("{:.digits$}", s.median),
                    _ => format!(
                        "{:.digits$} ({:.digits$}–{:.digits$})",
                        s.median, s.min, s.max
                    ),
                },
            )
        };
        let mut t = Table::left([
            "lock",
            "acquisitions/s",
            "acquire p50 µs",
            "acquire p99 µs",
            "release → next grant p50 µs",
            "client requests/grant",
            "server commands/grant",
            "violations",
        ]);
        for s in &self.subjects {
            t.row([
                match &s.version {
                    Some(v) => format!("{} {v}", s.subject),
                    None => format!("{} (ours)", s.subject),
                },
                spread(&s.acquisitions_per_sec),
                spread(&s.acquire_p50_us),
                spread(&s.acquire_p99_us),
                optional(&s.handoff_p50_us, 0),
                optional(&s.client_requests_per_grant, 2),
                optional(&s.server_commands_per_grant, 2),
                s.violations.to_string(),
            ]);
        }
        body.table(t);
        let mut t = Table::left(["target", "ours", "peer", "ratio", "required", "holds"]);
        for target in &self.targets {
            t.row([
                target.what.clone(),
                format!("{:.0}", target.ours),
                format!("{:.0}", target.peer),
                format!("{:.3}", target.ratio),
                target.required.clone(),
                if target.holds { "yes" } else { "no" }.to_string(),
            ]);
        }
        body.table(t);
        body
    }
}

/// The comparison's title.
pub const TITLE: &str = "Lock hand-off beside the Python peers";
