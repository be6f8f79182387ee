//! `lease-expiry`: the critical section stalls longer than the lock's lease.
//!
//! Buyer A takes the lock, reads the last unit, and stalls (the injected `X-Seckill-Hold-Ms`,
//! three leases long) before writing. Buyer B arrives meanwhile. With `redis-lock` the lease
//! runs out under A: B is granted the lock, reads the same last unit, sells it; A wakes and
//! sells it again — two orders for one unit. `redis-watchdog` renews A's lease while A's
//! process lives, so B waits and then finds the product sold out. `redis-lock-fenced` lets B in
//! as `redis-lock` does, but B's grant raised the product's fence, so A's late write carries
//! an older token and the database refuses it (`409 lock_lost`).

use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, Strategy};

use super::figures::LeaseExpiry;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline};
use crate::rig::fleet::{Fleet, accounting, lock_flags, order};
use testkit::Answer;

const STRATEGIES: [Strategy; 3] = [
    Strategy::RedisLock,
    Strategy::RedisWatchdog,
    Strategy::RedisLockFenced,
];

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts.app_binary(Scenario::LeaseExpiry)?;
    let lease_ms: u64 = if opts.quick { 300 } else { 2000 };
    let hold_ms = lease_ms * 3;
    let fleet = Fleet::start(binary, 1, &lock_flags(lease_ms, hold_ms * 4)).await?;
    let mut measured = Vec::new();
    let mut rows = Vec::new();
    let mut timeline = Vec::new();
    for (n, strategy) in STRATEGIES.into_iter().enumerate() {
        let product = 100 + n as u64;
        fleet.reset(product, 1).await?;
        let tl = Timeline::new();
        let (a, b) = race(&fleet, &tl, product, strategy, hold_ms, lease_ms).await;
        let p = fleet.product_noted(product, &tl).await?;
        let f = LeaseExpiry {
            oversell: accounting(&p).oversell,
            orders: p.orders,
            a_created: a.created(),
            b_created: b.created(),
            stale_write_rejected: a.refused_with(ErrorCode::LockLost),
        };
        rows.push(row(strategy, &a, &b, f));
        measured.push((strategy, f));
        timeline.extend(tl.events(Some(strategy.name())));
    }
    Ok(ScenarioReport {
        scenario: Scenario::LeaseExpiry,
        fault: format!(
            "lease {lease_ms} ms; buyer A stalls {hold_ms} ms inside the critical section of the \
             last unit while buyer B asks for it"
        ),
        rows,
        timeline,
        why: why(&measured, lease_ms, hold_ms),
    })
}

/// A (stalling) and, a third of a lease later, B; both answers.
async fn race(
    fleet: &Fleet,
    tl: &Timeline,
    product: u64,
    strategy: Strategy,
    hold_ms: u64,
    lease_ms: u64,
) -> (Answer, Answer) {
    let a = async {
        tl.log(
            "A",
            format!("orders the last unit, stalls {hold_ms} ms inside"),
        );
        let a = order(&fleet.api, 0, product, strategy, "buyer-a", hold_ms).await;
        tl.log("A", a.describe());
        a
    };
    let b = async {
        tokio::time::sleep(Duration::from_millis(lease_ms / 3)).await;
        tl.log("B", "orders the last unit");
        let b = order(&fleet.api, 0, product, strategy, "buyer-b", 0).await;
        tl.log("B", b.describe());
        b
    };
    tokio::join!(a, b)
}

fn row(strategy: Strategy, a: &Answer, b: &Answer, f: LeaseExpiry) -> Row {
    let (expected, ok) = match strategy {
        Strategy::RedisWatchdog => (
            "the lease is renewed: B waits, then finds it sold out; no oversell",
            f.oversell == 0 && f.a_created && !f.b_created,
        ),
        Strategy::RedisLockFenced => (
            "B is granted the expired lock, A's stale write is rejected (lock_lost); no oversell",
            f.oversell == 0 && f.stale_write_rejected && f.b_created,
        ),
        _ => (
            "B is granted the expired lock: two orders for one unit (oversell)",
            f.oversell > 0,
        ),
    };
    let observed = format!(
        "A: {}; B: {}; {} order(s) for 1 unit",
        a.describe(),
        b.describe(),
        f.orders
    );
    Row::new(strategy.name(), expected, observed, ok, f)
}

/// What happened to each strategy, in words chosen by the figures.
fn why(measured: &[(Strategy, LeaseExpiry)], lease_ms: u64, hold_ms: u64) -> String {
    let mut text = format!(
        "A lease is a guess about how long the critical section takes. A stayed {hold_ms} ms \
         inside on a {lease_ms} ms lease."
    );
    for (strategy, f) in measured {
        let what = match (f.a_created, f.b_created, f.stale_write_rejected) {
            (true, true, _) => format!(
                "B was let in while A still worked, both read the same last unit and both sold \
                 it (oversell {})",
                f.oversell
            ),
            (true, false, _) => format!(
                "A's lease held (B was kept out until A had sold the unit; oversell {})",
                f.oversell
            ),
            (false, true, true) => format!(
                "B was let in and sold the unit; A's late write carried an older token and the \
                 product's fence refused it (oversell {})",
                f.oversell
            ),
            (false, true, false) => format!(
                "B sold the unit and A's write failed for another reason (oversell {})",
                f.oversell
            ),
            (false, false, _) => format!("neither A nor B sold the unit (oversell {})", f.oversell),
        };
        text.push_str(&format!(" With `{strategy}`, {what}."));
    }
    let watchdog_held = measured
        .iter()
        .any(|(s, f)| *s == Strategy::RedisWatchdog && f.a_created && !f.b_created);
    if watchdog_held {
        text.push_str(
            " Renewal kept the lease alive only because A's process kept running; fencing \
             does not depend on that (see `process-pause`).",
        );
    }
    text
}
