//! `herd`: 64 waiters queue on one lock; what does each hand-off cost?
//!
//! How a lock *waits* decides what a release costs. The plain Redis lock polls: every waiter
//! asks again after a jittered back-off, so the requests per grant grow with the number of
//! waiters, and a release is noticed only at someone's next poll. The watchdog lock publishes
//! the release on a channel and wakes one waiter, and ZooKeeper waiters each watch only their
//! predecessor's node: a release wakes exactly one waiter, and waiting costs no requests (the
//! watchdog lock wakes one waiter *per client*: each client subscribes to the release). The
//! scenario counts the requests every client sent ([`locks::DistributedLock::backend_requests`])
//! and the wake-up latency: from the moment a holder releases to the next grant.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use locks::{AcquireOptions, Backend, DistributedLock};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::{Judgement, Scenario, Stage};
use crate::rig::start;

pub struct Herd;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// How long each holder keeps the lock: long enough that waiting, not handing off,
    /// dominates — what polling pays for.
    hold: Duration,
}

/// Many waiters on one lock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub requests_per_grant: f64,
    pub wake_p50_ms: f64,
    pub wake_p99_ms: f64,
    /// Grants that overlapped another holder's (must be 0).
    pub overlaps: usize,
}

const WAITERS: usize = 64;
/// Waiters share this many lock clients (connections / sessions), as app instances would.
const CLIENTS: usize = 8;
const BACKENDS: [Backend; 3] = [Backend::Redis, Backend::RedisWatchdog, Backend::ZooKeeper];
/// Requests a notifying backend may spend per grant, whatever the number of waiters: the
/// grant's own (attempt or create, list, watch, release: about 4), plus at most one woken
/// attempt per client (the watchdog lock's clients each subscribe to the release message and
/// each wakes its first local waiter).
const NOTIFIED_BOUND: f64 = CLIENTS as f64 + 4.0;

impl Scenario for Herd {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        hold: Duration::from_millis(20),
    };
    const FULL: Sizes = Sizes {
        hold: Duration::from_millis(50),
    };
    type Subject = Backend;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "{WAITERS} waiters over {CLIENTS} clients contend for one lock, each holding it {:?}",
            s.hold
        )
    }

    async fn play(s: Sizes, _: &Stage) -> Result<Vec<(Backend, Figures)>> {
        let redis = start(sandbox::Redis::start).await?;
        let zk = start(sandbox::ZooKeeper::start).await?;
        let endpoints = locks::Endpoints {
            redis: Some(redis.url()),
            zookeeper: Some(zk.connect_string()),
            zookeeper_session_timeout: Duration::from_secs(10),
            ..Default::default()
        };
        let mut rows = Vec::new();
        for backend in BACKENDS {
            let mut clients = Vec::new();
            for _ in 0..CLIENTS {
                clients.push(locks::connect(backend, &endpoints).await?);
            }
            rows.push((backend, herd(&clients, s.hold).await?));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, backend: &Backend, f: &Figures) -> Judgement {
        let observed = format!(
            "{:.1} requests per grant, wake-up p99 {:.1} ms",
            f.requests_per_grant, f.wake_p99_ms
        );
        match backend {
            Backend::Redis => Judgement::new(
                format!(
                    "polling: more requests per grant than a notifying lock may spend (> \
                     {NOTIFIED_BOUND})"
                ),
                observed,
                f.requests_per_grant > NOTIFIED_BOUND && f.overlaps == 0,
            ),
            _ => Judgement::new(
                format!(
                    "notification: requests per grant bounded by the clients, not the waiters \
                     (≤ {NOTIFIED_BOUND})"
                ),
                observed,
                f.requests_per_grant <= NOTIFIED_BOUND && f.overlaps == 0,
            ),
        }
    }

    fn why(_: &Sizes, rows: &[(Backend, Figures)]) -> String {
        let mut text = format!(
            "Each of {WAITERS} waiters was granted the lock once; a grant's cost is every \
             request all clients sent for it, and a hand-off's latency the time from one \
             release to the next grant."
        );
        for (backend, f) in rows {
            let how = match backend {
                Backend::Redis => {
                    "polls after a jittered back-off, so a release is noticed at someone's \
                     next poll"
                }
                Backend::RedisWatchdog => {
                    "publishes each release, and each client wakes one of its waiters"
                }
                _ => "lets each waiter watch only its predecessor, so a release wakes exactly one",
            };
            let overlaps = match f.overlaps {
                0 => String::new(),
                n => format!("; **{n} grant(s) overlapped another holder**"),
            };
            text.push_str(&format!(
                " `{backend}` {how}: {:.1} requests per grant, hand-off p50 {:.1} ms, p99 {:.1} \
                 ms{overlaps}.",
                f.requests_per_grant, f.wake_p50_ms, f.wake_p99_ms
            ));
        }
        text
    }
}

async fn herd(clients: &[Arc<dyn DistributedLock>], hold: Duration) -> Result<Figures> {
    let key = "scenario:herd:product:1";
    let before: u64 = clients.iter().map(|c| c.backend_requests()).sum();
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::default();
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for n in 0..WAITERS {
        let lock = Arc::clone(&clients[n % clients.len()]);
        let (last_release, holders, overlaps) =
            (last_release.clone(), holders.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let options =
                AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(60));
            let guard = lock.acquire(key, options).await?;
            let granted = Instant::now();
            if holders.fetch_add(1, Ordering::SeqCst) > 0 {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            let wake = last_release.lock().await.map(|r| granted.duration_since(r));
            tokio::time::sleep(hold).await;
            holders.fetch_sub(1, Ordering::SeqCst);
            *last_release.lock().await = Some(Instant::now());
            guard.release().await?;
            anyhow::Ok(wake)
        }));
    }
    let mut wakes = Vec::new();
    for t in tasks {
        if let Some(w) = t.await?? {
            wakes.push(w.as_secs_f64() * 1000.0);
        }
    }
    let after: u64 = clients.iter().map(|c| c.backend_requests()).sum();
    wakes.sort_by(f64::total_cmp);
    Ok(Figures {
        requests_per_grant: (after - before) as f64 / WAITERS as f64,
        wake_p50_ms: percentile(&wakes, 0.50),
        wake_p99_ms: percentile(&wakes, 0.99),
        overlaps: overlaps.load(Ordering::SeqCst),
    })
}

/// The `q` quantile of `sorted`; 0 for none.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
