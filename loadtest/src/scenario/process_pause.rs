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
use serde::{Deserialize, Serialize};
use testkit::Answer;

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting, lock_flags, order};

pub struct ProcessPause;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    lease_ms: u64,
}

/// The instance holding the lock for A is frozen past the lease; B buys through the other
/// instance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub oversell: i64,
    pub sold: i64,
    pub a: Answer,
    pub b: Answer,
    pub stale_write_rejected: bool,
    /// How long into the freeze B was answered.
    pub b_served_after_freeze_ms: f64,
}

const STRATEGIES: [Strategy; 2] = [Strategy::RedisWatchdog, Strategy::RedisWatchdogFenced];

impl Scenario for ProcessPause {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes { lease_ms: 500 };
    const FULL: Sizes = Sizes { lease_ms: 3000 };
    type Subject = Strategy;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "two instances; the one holding the lock is SIGSTOPped for {} ms (lease {} ms) once \
             its buyer is inside the critical section, then SIGCONTed",
            s.lease_ms * 3,
            s.lease_ms
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Strategy, Figures)>> {
        // A stays inside two leases: it is frozen as soon as it has read the stock, and its
        // hold outlasts the freeze's start whatever the machine's load.
        let hold_ms = s.lease_ms * 2;
        let flags = lock_flags(s.lease_ms, s.lease_ms * 10);
        let fleet = Fleet::start(stage.app_binary()?, 2, &flags).await?;
        let mut rows = Vec::new();
        for (n, strategy) in STRATEGIES.into_iter().enumerate() {
            let product = 200 + n as u64;
            fleet.reset(product, 1).await?;
            let tl = stage.round(strategy.name());
            let first = &fleet.apps.instances[0];

            let mut watch = fleet.watch_transactions().await?;
            tl.log("A@1", format!("orders the last unit ({hold_ms} ms inside)"));
            let api = fleet.api.clone();
            let a =
                tokio::spawn(
                    async move { order(&api, 0, product, strategy, "buyer-a", hold_ms).await },
                );
            watch.inside().await?;
            first.pause()?;
            let paused_at = tl.now_ms();
            tl.log(
                "instance 1",
                "frozen (SIGSTOP) with A inside the critical section",
            );

            tl.log("B@2", "orders the last unit");
            let b = order(&fleet.api, 1, product, strategy, "buyer-b", 0).await;
            tl.log("B@2", b.describe());
            let b_served_after_freeze_ms = tl.now_ms() - paused_at;

            // Keep the freeze at least three leases long, whatever B's timing.
            let frozen_for = Duration::from_millis(s.lease_ms * 3);
            let elapsed = Duration::from_secs_f64((tl.now_ms() - paused_at) / 1000.0);
            tokio::time::sleep(frozen_for.saturating_sub(elapsed)).await;
            first.resume()?;
            tl.log(
                "instance 1",
                "resumed (SIGCONT): A carries on with its decision",
            );
            let a = a.await?;
            tl.log("A@1", a.describe());
            let p = fleet.product(product).await?;
            tl.log("db", format!("{} sold of {}", p.sold, p.initial_stock));
            let figures = Figures {
                oversell: accounting(&p).oversell,
                sold: p.sold,
                a,
                b,
                stale_write_rejected: a.refused_with(ErrorCode::LockLost),
                b_served_after_freeze_ms,
            };
            rows.push((strategy, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, strategy: &Strategy, f: &Figures) -> Judgement {
        let (expected, holds) = match strategy {
            Strategy::RedisWatchdogFenced => (
                "B sells the unit; A's late write is rejected by the fence (lock_lost); no \
                 oversell",
                f.b.created() && f.stale_write_rejected && f.oversell == 0,
            ),
            _ => (
                "the frozen watchdog renews nothing: B sells the unit, then A sells it again \
                 (oversell)",
                f.b.created() && f.oversell > 0,
            ),
        };
        let observed = format!(
            "B: {}; A: {}; {} sold of 1",
            f.b.describe(),
            f.a.describe(),
            f.sold
        );
        Judgement::new(expected, observed, holds)
    }

    fn why(s: &Sizes, rows: &[(Strategy, Figures)]) -> String {
        let mut text = format!(
            "The watchdog renews the lease from inside the holder's process, so a frozen holder \
             renews nothing and its lease ({} ms) runs out.",
            s.lease_ms
        );
        for (strategy, f) in rows {
            let b = if f.b.created() {
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
            let a = match (f.a.created(), f.stale_write_rejected) {
                (true, _) => "A, resumed past every check, wrote its decision and sold it again",
                (false, true) => {
                    "A's resumed write carried an older token and the fence refused it"
                }
                (false, false) => "A's resumed request did not sell",
            };
            text.push_str(&format!(
                " With `{strategy}`, {b}; {a} (oversell {}).",
                f.oversell
            ));
        }
        text
    }
}
