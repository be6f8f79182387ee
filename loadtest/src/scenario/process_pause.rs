//! `process-pause`: the app instance holding the lock is frozen (SIGSTOP) past the lease.
//!
//! A stop-the-world pause — a long GC, a VM migration, SIGSTOP here — freezes every thread of
//! the holder, its watchdog included. Instance 1 takes the watchdog lock for buyer A, reads the
//! last unit, and is frozen. Its lease is no longer renewed and runs out; instance 2 grants
//! buyer B the lock and sells the unit. Instance 1 resumes and, knowing nothing yet, writes
//! its decision: `redis-watchdog` sells the unit a second time. With `redis-watchdog-fenced`
//! the write carries A's older token and the product's fence — raised by B's grant — refuses
//! it. Renewal cannot cover a process that is not running; only the resource can.

use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, Strategy};

use super::figures::ProcessPause;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline};
use crate::rig::fleet::{Fleet, accounting, lock_flags, order};

const STRATEGIES: [Strategy; 2] = [Strategy::RedisWatchdog, Strategy::RedisWatchdogFenced];

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts.app_binary(Scenario::ProcessPause)?;
    let lease_ms: u64 = if opts.quick { 500 } else { 3000 };
    // A is frozen one lease after it sent its order, in the middle of a two-lease hold: late
    // enough that a loaded machine has let it read the stock (frozen before its read, it would
    // only find the unit sold after resuming, and the fence would have nothing to refuse),
    // early enough that its hold has not ended.
    let hold_ms = lease_ms * 2;
    let fleet = Fleet::start(binary, 2, &lock_flags(lease_ms, lease_ms * 10)).await?;
    let mut measured = Vec::new();
    let mut rows = Vec::new();
    let mut timeline = Vec::new();
    for (n, strategy) in STRATEGIES.into_iter().enumerate() {
        let product = 200 + n as u64;
        fleet.reset(product, 1).await?;
        let tl = Timeline::new();
        let first = &fleet.apps.instances[0];

        tl.log("A@1", format!("orders the last unit ({hold_ms} ms inside)"));
        let api = fleet.api.clone();
        let a = tokio::spawn(
            async move { order(&api, 0, product, strategy, "buyer-a", hold_ms).await },
        );
        tokio::time::sleep(Duration::from_millis(lease_ms)).await;
        first.pause()?;
        let paused_at = tl.now_ms();
        tl.log("instance 1", "frozen (SIGSTOP) while A holds the lock");

        tl.log("B@2", "orders the last unit");
        let b = order(&fleet.api, 1, product, strategy, "buyer-b", 0).await;
        tl.log("B@2", b.describe());
        let b_served_after_freeze_ms = tl.now_ms() - paused_at;

        // Keep the freeze at least three leases long, whatever B's timing.
        let frozen_for = Duration::from_millis(lease_ms * 3);
        let elapsed = Duration::from_secs_f64((tl.now_ms() - paused_at) / 1000.0);
        tokio::time::sleep(frozen_for.saturating_sub(elapsed)).await;
        first.resume()?;
        tl.log(
            "instance 1",
            "resumed (SIGCONT): A carries on with its decision",
        );
        let a = a.await?;
        tl.log("A@1", a.describe());
        let p = fleet.product_noted(product, &tl).await?;

        let f = ProcessPause {
            oversell: accounting(&p).oversell,
            a_created: a.created(),
            b_created: b.created(),
            stale_write_rejected: a.refused_with(ErrorCode::LockLost),
            b_served_after_freeze_ms,
        };
        let (expected, ok) = match strategy {
            Strategy::RedisWatchdogFenced => (
                "B sells the unit; A's late write is rejected by the fence (lock_lost); no oversell",
                f.b_created && f.stale_write_rejected && f.oversell == 0,
            ),
            _ => (
                "the frozen watchdog renews nothing: B sells the unit, then A sells it again (oversell)",
                f.b_created && f.oversell > 0,
            ),
        };
        let observed = format!(
            "B: {}; A: {}; {} sold of {}",
            b.describe(),
            a.describe(),
            p.sold,
            p.initial_stock
        );
        rows.push(Row::new(strategy.name(), expected, observed, ok, f));
        measured.push((strategy, f));
        timeline.extend(tl.events(Some(strategy.name())));
    }
    Ok(ScenarioReport {
        scenario: Scenario::ProcessPause,
        fault: format!(
            "two instances; the one holding the lock is SIGSTOPped for {} ms (lease {lease_ms} ms), then SIGCONTed",
            lease_ms * 3
        ),
        rows,
        timeline,
        why: why(&measured, lease_ms),
    })
}

/// What happened to each strategy, in words chosen by the figures.
fn why(measured: &[(Strategy, ProcessPause)], lease_ms: u64) -> String {
    let mut text = format!(
        "The watchdog renews the lease from inside the holder's process, so a frozen holder \
         renews nothing and its lease ({lease_ms} ms) runs out."
    );
    for (strategy, f) in measured {
        let b = if f.b_created {
            format!(
                "B was served {:.0} ms into the freeze and bought the unit",
                f.b_served_after_freeze_ms
            )
        } else {
            format!(
                "B was answered {:.0} ms into the freeze without buying",
                f.b_served_after_freeze_ms
            )
        };
        let a = match (f.a_created, f.stale_write_rejected) {
            (true, _) => "A, resumed past every check, wrote its decision and sold it again",
            (false, true) => "A's resumed write carried an older token and the fence refused it",
            (false, false) => "A's resumed request did not sell",
        };
        text.push_str(&format!(
            " With `{strategy}`, {b}; {a} (oversell {}).",
            f.oversell
        ));
    }
    text
}
