//! `connection-cost`: the price of a lock held by an open transaction — every holder and every
//! waiter keeps a database connection for as long as it holds or waits.
//!
//! `db-row-lock` takes its lock with `SELECT … FOR UPDATE` in a transaction left open: a waiter
//! is a blocked statement on a connection of its own. More buyers than the pool has
//! connections, each pausing inside the lock, and beside them a few buyers of another product
//! through `conditional`, which needs no lock at all. Played three ways:
//!
//! * **one pool** (`--db-lock-pool-size=0`): the lock's waiters hold the purchases' own
//!   connections. The holder itself needs one more for its stock update and finds none, and
//!   the lock-free purchases wait behind the waiters for a connection until they give up: the
//!   pool runs dry ("连接爆满") and starves what never asked for the lock;
//! * **own pool**: the lock table has a pool of its own, as the service deploys it by default:
//!   the lock's waiters can only exhaust that one, and the lock-free purchases never wait;
//! * **own pool, bounded wait**: the lock wait is short, and it bounds the wait for a
//!   connection too: a buyer is told at the bound — `busy` if it reached the lock, `503` if it
//!   never got a connection to ask with, though the lock may have been free — and nobody waits
//!   out the pool's timeout.
//!
//! Every way is played without the service's latency budget, which admits only as many
//! purchases of a strategy as it answers within the budget: with it, the locked purchases come
//! in a few at a time and their waiters hold a few connections, however the pools are split —
//! the other cure for the same starvation.

use std::fmt;
use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, Strategy};
use serde::{Deserialize, Serialize};
use testkit::{Answers, Clicks, Crowd};

use super::{Judgement, Scenario, Stage};
use crate::drive::latency::Latencies;
use crate::rig::fleet::Fleet;

pub struct ConnectionCost;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Connections of each pool.
    pool: u32,
    /// Buyers of the locked product, all at once.
    waiters: usize,
    /// Concurrent buyers of the lock-free product.
    lock_free: usize,
}

/// How the lock's connections are provisioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Deployment {
    OnePool,
    OwnPool,
    BoundedWait,
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Deployment::OnePool => "one pool for purchases and locks",
            Deployment::OwnPool => "a pool of its own for the lock",
            Deployment::BoundedWait => "a pool of its own, lock wait bounded",
        })
    }
}

/// How one kind of buyer fared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Fared {
    pub clicks: usize,
    pub bought: usize,
    /// Answered `busy`: the lock was not obtained within its wait.
    pub busy: usize,
    /// Answered `backend_unavailable`: no database connection within the wait.
    pub no_connection: usize,
    /// Of those, answered only once the pool's own timeout had passed: they waited it out.
    pub waited_out_pool: usize,
    pub other: usize,
    pub p99_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub pool: u32,
    pub lock_wait_ms: u64,
    /// The buyers of the locked product (`db-row-lock`).
    pub locked: Fared,
    /// The buyers of the lock-free product (`conditional`), clicking until the others are done.
    pub lock_free: Fared,
}

impl Figures {
    /// Whether the lock-free purchases were starved of a connection: some gave up at the pool's
    /// timeout, or waited most of it.
    pub fn lock_free_starved(&self) -> bool {
        self.lock_free.no_connection > 0
            || self.lock_free.p99_ms >= STARVED * ACQUIRE_TIMEOUT_MS as f64
    }
}

const LOCKED: Strategy = Strategy::DbRowLock;
const LOCK_FREE: Strategy = Strategy::Conditional;
/// Each locked buyer pauses this long inside the lock.
const HOLD: Duration = Duration::from_millis(100);
/// How long a request waits for a connection before `backend_unavailable`.
const ACQUIRE_TIMEOUT_MS: u64 = 3_000;
/// A lock-free purchase that waited this share of the pool's timeout or more was starved of a
/// connection, whether it gave up at the timeout or got one as the waiters ahead of it gave
/// theirs up at theirs (the two timeouts end together).
const STARVED: f64 = 0.9;
/// The lock wait of the first two deployments: longer than the pool's timeout, as a lock wait
/// sized for a slow holder is.
const LONG_WAIT_MS: u64 = 5_000;
/// The bounded wait: a waiter gives its connection up after this.
const SHORT_WAIT_MS: u64 = 100;

impl Scenario for ConnectionCost {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        pool: 4,
        waiters: 24,
        lock_free: 2,
    };
    const FULL: Sizes = Sizes {
        pool: 8,
        waiters: 64,
        lock_free: 4,
    };
    type Subject = Deployment;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "{} buyers at once of a product under `{LOCKED}` ({} ms inside the lock), {} \
             connections per pool, a {} s pool timeout; beside them {} buyers of another product \
             under `{LOCK_FREE}` (no lock)",
            s.waiters,
            HOLD.as_millis(),
            s.pool,
            ACQUIRE_TIMEOUT_MS / 1000,
            s.lock_free
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Deployment, Figures)>> {
        let mut rows = Vec::new();
        for deployment in [
            Deployment::OnePool,
            Deployment::OwnPool,
            Deployment::BoundedWait,
        ] {
            let (lock_pool, wait) = match deployment {
                Deployment::OnePool => (0, LONG_WAIT_MS),
                Deployment::OwnPool => (s.pool, LONG_WAIT_MS),
                Deployment::BoundedWait => (s.pool, SHORT_WAIT_MS),
            };
            let flags = vec![
                format!("--db-pool-size={}", s.pool),
                format!("--db-lock-pool-size={lock_pool}"),
                format!("--db-acquire-timeout-ms={ACQUIRE_TIMEOUT_MS}"),
                format!("--lock-wait-ms={wait}"),
                // Every buyer admitted: the question is where admitted waiters wait. (The
                // latency budget would admit the slow locked purchases a few at a time, and a
                // few waiters never run a pool dry.)
                "--latency-budget-ms=0".to_owned(),
            ];
            let fleet = Fleet::start(stage.app_binary()?, 1, &flags).await?;
            stage
                .timeline()
                .log("scenario", format!("{deployment}: {}", flags.join(" ")));
            rows.push((deployment, sale(&fleet, s, s.pool, wait).await?));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, deployment: &Deployment, f: &Figures) -> Judgement {
        let observed = format!(
            "locked: {} bought, {} busy, {} without a connection ({} after the pool's timeout; \
             p99 {:.0} ms); lock-free: {} of {} bought, {} without a connection (p99 {:.0} ms)",
            f.locked.bought,
            f.locked.busy,
            f.locked.no_connection,
            f.locked.waited_out_pool,
            f.locked.p99_ms,
            f.lock_free.bought,
            f.lock_free.clicks,
            f.lock_free.no_connection,
            f.lock_free.p99_ms
        );
        let (expected, holds) = match deployment {
            Deployment::OnePool => (
                "the waiters hold the purchases' connections: lock-free purchases wait out the \
                 pool's timeout for one (and give up, or get one as it ends)",
                f.lock_free_starved(),
            ),
            Deployment::OwnPool => (
                "the waiters exhaust only the lock's pool: no lock-free purchase waits out the \
                 pool",
                f.lock_free.no_connection == 0,
            ),
            Deployment::BoundedWait => (
                "buyers the lock cannot serve are told at the bound: nobody waits out the pool, \
                 no lock-free purchase starves",
                f.locked.waited_out_pool == 0
                    && f.lock_free.no_connection == 0
                    && f.locked.busy + f.locked.no_connection > 0,
            ),
        };
        Judgement::new(expected, observed, holds)
    }

    fn why(s: &Sizes, rows: &[(Deployment, Figures)]) -> String {
        let mut text = format!(
            "A lock held by an open transaction costs a database connection per holder and per \
             waiter, for as long as it holds or waits: {} buyers wanted {} connections at once \
             from a pool of {}.",
            s.waiters, s.waiters, s.pool
        );
        for (deployment, f) in rows {
            let what = match deployment {
                Deployment::OnePool => format!(
                    "the waiters took every connection of the one pool, so a holder waited for \
                     one more for its own stock update: only {} of {} locked buyers bought \
                     (stock enough for all), {} waited out the pool; and the purchases that \
                     never asked for the lock waited behind them — {} of {} gave up, their p99 \
                     {:.0} ms",
                    f.locked.bought,
                    s.waiters,
                    f.locked.waited_out_pool,
                    f.lock_free.no_connection,
                    f.lock_free.clicks,
                    f.lock_free.p99_ms
                ),
                Deployment::OwnPool => format!(
                    "the waiters queued on the lock's own pool ({} of them gave up waiting for \
                     one of its connections, locked p99 {:.0} ms) while {} lock-free purchases \
                     went through (p99 {:.0} ms) and {} waited out the pool",
                    f.locked.no_connection,
                    f.locked.p99_ms,
                    f.lock_free.bought,
                    f.lock_free.p99_ms,
                    f.lock_free.no_connection
                ),
                Deployment::BoundedWait => format!(
                    "with a lock wait of {} ms, {} bought, {} reached the lock and were told \
                     `busy` at the bound, and {} were told `503` at the bound because no \
                     connection came free to ask the lock with — whether or not the lock was \
                     free; {} waited out the pool (locked p99 {:.0} ms)",
                    f.lock_wait_ms,
                    f.locked.bought,
                    f.locked.busy,
                    f.locked.no_connection,
                    f.locked.waited_out_pool,
                    f.locked.p99_ms
                ),
            };
            text.push_str(&format!(" With {deployment}, {what}."));
        }
        text.push_str(
            " Give a lock of this kind a pool of its own sized for its waiters, and bound the \
             wait below the pool's timeout; or choose a lock whose waiters hold no connection.",
        );
        text
    }
}

/// The locked buyers click once each, all at once; the lock-free ones click until the locked
/// ones are done.
async fn sale(fleet: &Fleet, s: Sizes, pool: u32, wait_ms: u64) -> Result<Figures> {
    const LOCKED_PRODUCT: u64 = 700;
    const LOCK_FREE_PRODUCT: u64 = 701;
    fleet.reset(LOCKED_PRODUCT, s.waiters as i64).await?;
    fleet.reset(LOCK_FREE_PRODUCT, 1_000_000).await?;
    let lock_free = Crowd::new(s.lock_free, Clicks::Total(u64::MAX), LOCK_FREE, "free")
        .start(&fleet.api, LOCK_FREE_PRODUCT);
    let locked = Crowd::new(s.waiters, Clicks::Each(1), LOCKED, "locked")
        .holding(HOLD)
        .run(&fleet.api, LOCKED_PRODUCT)
        .await;
    let lock_free = lock_free.stop().await;
    Ok(Figures {
        pool,
        lock_wait_ms: wait_ms,
        locked: fared(&locked),
        lock_free: fared(&lock_free),
    })
}

fn fared(answers: &Answers) -> Fared {
    let clicks = answers.clicks.len();
    let bought = answers.created();
    let busy = answers.refused(ErrorCode::Busy);
    let no_connection = answers.refused(ErrorCode::BackendUnavailable);
    let pool_timeout = Duration::from_millis(ACQUIRE_TIMEOUT_MS);
    let waited_out_pool = (answers.clicks.iter())
        .filter(|c| c.answer.refused_with(ErrorCode::BackendUnavailable))
        .filter(|c| c.answered - c.sent >= pool_timeout)
        .count();
    let mut latencies = Latencies::default();
    for latency in answers.latencies() {
        latencies.record(latency);
    }
    Fared {
        clicks,
        bought,
        busy,
        no_connection,
        waited_out_pool,
        other: clicks - bought - busy - no_connection,
        p99_ms: latencies.summary().p99_us as f64 / 1000.0,
    }
}
