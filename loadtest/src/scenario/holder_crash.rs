//! `holder-crash`: the app instance inside the critical section is SIGKILLed.
//!
//! A lock held by a dead process must come back by itself, or every later buyer waits for an
//! operator. How soon it comes back is each lock's answer to "how do you know the holder is
//! dead?": a Redis key's TTL or a lock row's expiry (one lease), ZooKeeper's session timeout
//! (the server stops hearing the session's pings), and for `pessimistic` no time at all — the
//! row lock belongs to a database transaction, and the database rolls back the transaction of
//! a connection that closed, which the kernel does the moment the process dies. A lock with no
//! expiry (`redis-setnx-no-ttl`, whose holder died between `SETNX` and `EXPIRE` — simulated,
//! since no signal can be timed into that window) never comes back. Whatever the lock, the
//! dead buyer's uncommitted order must vanish and no other order may be lost or doubled.
//!
//! The holder is killed once its transaction is open in the database (it holds the lock and
//! has read the stock), not after a guessed delay.

use std::time::{Duration, Instant};

use anyhow::Result;
use app::api::{ErrorCode, Strategy};
use locks::redis::SetnxNoTtlLock;
use locks::{AcquireOptions, DistributedLock};
use serde::{Deserialize, Serialize};

use super::{Judgement, Scenario, Stage, Timeline};
use crate::rig::fleet::{Fleet, accounting, lock_flags, order};

pub struct HolderCrash;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    lease_ms: u64,
    session_ms: u64,
}

impl Sizes {
    /// How long the probes try before the lock counts as never coming back.
    fn bound(self) -> Duration {
        Duration::from_millis(self.lease_ms.max(self.session_ms) * 4)
    }
}

/// The holder dies inside the critical section; probes on the other instance try to buy until
/// one does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// A probe bought within the bound.
    pub recovered: bool,
    /// How long after the crash it did.
    pub lock_back_ms: Option<f64>,
    /// How long the dead holder had been inside its critical section (its transaction open)
    /// when it was killed.
    pub inside_before_kill_ms: Option<f64>,
    /// Probes refused `busy` (the lock or row lock still held) before one bought or the bound
    /// ran out.
    pub probes_busy: u64,
    /// Probes refused or failed otherwise.
    pub probes_other: u64,
    /// Orders beyond those the probes were told of, plus units the stock counter and the
    /// orders disagree on: 0 when no order was lost or doubled.
    pub orders_lost_or_duplicated: i64,
}

const STRATEGIES: [Strategy; 5] = [
    Strategy::RedisSetnxNoTtl,
    Strategy::RedisLock,
    Strategy::Zookeeper,
    Strategy::DbLock,
    Strategy::Pessimistic,
];
/// How long each probe buyer waits for the lock before answering `busy`.
const PROBE_WAIT_MS: u64 = 150;
const STOCK: i64 = 10;

impl Scenario for HolderCrash {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        lease_ms: 1500,
        session_ms: 1500,
    };
    const FULL: Sizes = Sizes {
        lease_ms: 5000,
        session_ms: 4000,
    };
    type Subject = Strategy;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "the instance holding the lock is SIGKILLed inside the critical section (lease {} \
             ms, ZooKeeper session {} ms); buyers on the other instance probe until one buys, \
             for at most {:?}",
            s.lease_ms,
            s.session_ms,
            s.bound()
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Strategy, Figures)>> {
        let mut flags = lock_flags(s.lease_ms, PROBE_WAIT_MS);
        flags.push(format!("--zookeeper-session-timeout-ms={}", s.session_ms));
        let mut fleet = Fleet::start_with(stage.app_binary()?, 2, &flags, true).await?;
        let mut rows = Vec::new();
        for (n, strategy) in STRATEGIES.into_iter().enumerate() {
            let product = 400 + n as u64;
            fleet.reset(product, STOCK).await?;
            let tl = stage.round(strategy.name());
            let simulated = strategy == Strategy::RedisSetnxNoTtl;
            let inside_before_kill = if simulated {
                crash_between_setnx_and_expire(&fleet, product, s.lease_ms).await?;
                tl.log(
                    "A",
                    "SETNX granted, then died before EXPIRE (simulated crash)",
                );
                None
            } else {
                Some(kill_inside(&mut fleet, product, strategy, s.bound(), &tl).await?)
            };
            let probed = probe(&fleet, product, strategy, s.bound(), &tl).await;
            let p = fleet.product(product).await?;
            let created = i64::from(probed.back.is_some());
            let damage = (p.orders - created).abs() + accounting(&p).unaccounted().abs();
            tl.log(
                "db",
                format!(
                    "{} order(s), stock {} of {}",
                    p.orders, p.stock, p.initial_stock
                ),
            );
            if !simulated {
                fleet.restart(0).await?;
            }
            let figures = Figures {
                recovered: probed.back.is_some(),
                lock_back_ms: probed.back.map(|d| d.as_secs_f64() * 1000.0),
                inside_before_kill_ms: inside_before_kill.map(|d| d.as_secs_f64() * 1000.0),
                probes_busy: probed.busy,
                probes_other: probed.other,
                orders_lost_or_duplicated: damage,
            };
            rows.push((strategy, figures));
        }
        Ok(rows)
    }

    fn judge(s: &Sizes, strategy: &Strategy, f: &Figures) -> Judgement {
        // Came back within the bound, and no sooner than half of `expected` after the dead
        // holder was seen inside (it had taken its lock just before).
        let held = f.inside_before_kill_ms.unwrap_or(0.0);
        let about = |expected: u64| {
            f.lock_back_ms
                .is_some_and(|b| held + b >= expected as f64 / 2.0)
        };
        let (expected, holds) = match strategy {
            Strategy::RedisSetnxNoTtl => (
                format!(
                    "never: the key has no expiry (still held after {:?})",
                    s.bound()
                ),
                !f.recovered,
            ),
            Strategy::Zookeeper => (
                format!(
                    "≈ session timeout ({} ms): the server expires the dead session and its node",
                    s.session_ms
                ),
                about(s.session_ms),
            ),
            Strategy::DbLock => (
                format!(
                    "≈ lease ({} ms): a waiter reaps the expired lock row",
                    s.lease_ms
                ),
                about(s.lease_ms),
            ),
            Strategy::Pessimistic => (
                "≈ immediately: the database rolls back the dead connection's transaction".into(),
                f.lock_back_ms.is_some_and(|b| b < s.lease_ms as f64 / 2.0),
            ),
            _ => (
                format!("≈ lease ({} ms): the key's TTL runs out", s.lease_ms),
                about(s.lease_ms),
            ),
        };
        let observed = match f.lock_back_ms {
            Some(b) => format!("buyable again after {b:.0} ms"),
            None => format!("not buyable within {:?}", s.bound()),
        };
        let observed = match f.orders_lost_or_duplicated {
            0 => format!("{observed}; no order lost or duplicated"),
            d => format!("{observed}; {d} order(s) lost or duplicated"),
        };
        Judgement::new(
            format!("{expected}; no order lost or duplicated"),
            observed,
            holds && f.orders_lost_or_duplicated == 0,
        )
    }

    fn why(_: &Sizes, rows: &[(Strategy, Figures)]) -> String {
        let mut text = String::from(
            "A dead holder cannot release; the lock comes back only through what the backend \
             uses to detect death.",
        );
        for (strategy, f) in rows {
            let how = match strategy {
                Strategy::RedisSetnxNoTtl => "a `SETNX` key without an expiry",
                Strategy::Zookeeper => "ZooKeeper's session expiry",
                Strategy::DbLock => "the expiry of the lock row",
                Strategy::Pessimistic => "the rollback of the dead connection's transaction",
                _ => "the Redis key's TTL",
            };
            let back = match f.lock_back_ms {
                Some(ms) => format!("gave the product back after {ms:.0} ms"),
                None => "never gave the product back within the bound".to_string(),
            };
            let refusals = match (f.probes_busy, f.probes_other) {
                (0, 0) => "the first probe bought".to_string(),
                (busy, 0) => format!("{busy} probe(s) were told `busy` first"),
                (0, other) => format!("{other} probe(s) were refused otherwise first"),
                (busy, other) => {
                    format!("{busy} probe(s) were told `busy` and {other} refused otherwise first")
                }
            };
            let damage = match f.orders_lost_or_duplicated {
                0 => "no order was lost or doubled".to_string(),
                d => format!("**{d} order(s) were lost or doubled**"),
            };
            text.push_str(&format!(
                " With `{strategy}`, {how} {back}; {refusals}; {damage}."
            ));
        }
        text
    }
}

/// How the probes after the crash fared.
struct Probed {
    back: Option<Duration>,
    busy: u64,
    other: u64,
}

/// The dead holder of `redis-setnx-no-ttl`: a client of the same Redis takes the app's lock
/// key with `SETNX` and "dies" before `EXPIRE`.
async fn crash_between_setnx_and_expire(fleet: &Fleet, product: u64, lease_ms: u64) -> Result<()> {
    let lock = SetnxNoTtlLock::connect(&fleet.redis_url())?.crash_between_setnx_and_expire();
    let key = format!("product:{product}");
    let lease = Duration::from_millis(lease_ms);
    match lock.acquire(&key, AcquireOptions::new(lease)).await {
        Err(locks::LockError::Unavailable(_)) => Ok(()),
        other => anyhow::bail!("expected the simulated crash, got {other:?}"),
    }
}

/// Buyer A enters the critical section on instance 1 (pausing there); once its transaction is
/// open in the database, instance 1 is killed. Returns how long A had been inside.
async fn kill_inside(
    fleet: &mut Fleet,
    product: u64,
    strategy: Strategy,
    bound: Duration,
    tl: &Timeline,
) -> Result<Duration> {
    let hold_ms = bound.as_millis() as u64 * 2;
    let mut watch = fleet.watch_transactions().await?;
    let api = fleet.api.clone();
    tl.log(
        "A@1",
        format!("orders, pauses {hold_ms} ms inside the critical section"),
    );
    // Its answer never comes: the connection dies with the instance.
    let a =
        tokio::spawn(async move { order(&api, 0, product, strategy, "buyer-a", hold_ms).await });
    let inside = watch.inside().await?;
    fleet.apps.instances[0].kill()?;
    let inside_for = inside.elapsed();
    tl.log(
        "instance 1",
        format!(
            "killed (SIGKILL) with A inside the critical section for {} ms",
            inside_for.as_millis()
        ),
    );
    a.abort();
    Ok(inside_for)
}

/// Probe buyers through instance 2 until one buys: how long after the crash, if within
/// `bound`, and how the refused ones were answered.
async fn probe(
    fleet: &Fleet,
    product: u64,
    strategy: Strategy,
    bound: Duration,
    tl: &Timeline,
) -> Probed {
    let start = Instant::now();
    let mut probed = Probed {
        back: None,
        busy: 0,
        other: 0,
    };
    for n in 0.. {
        let answer = order(&fleet.api, 1, product, strategy, &format!("probe-{n}"), 0).await;
        if answer.created() {
            let back = start.elapsed();
            tl.log(
                "probe@2",
                format!(
                    "{} after {} refusals: lock back after {} ms",
                    answer.describe(),
                    probed.busy + probed.other,
                    back.as_millis()
                ),
            );
            probed.back = Some(back);
            return probed;
        }
        if answer.refused_with(ErrorCode::Busy) {
            probed.busy += 1;
        } else {
            probed.other += 1;
        }
        if start.elapsed() > bound {
            tl.log(
                "probe@2",
                format!(
                    "still refused ({}) after {} probes over {bound:?}",
                    answer.describe(),
                    probed.busy + probed.other
                ),
            );
            return probed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!("the loop returns")
}
