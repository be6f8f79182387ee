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

use anyhow::{Context, Result};

use super::app::{Fleet, order, oversell};
use super::{Row, ScenarioOptions, ScenarioReport, Timeline};
use crate::wire::ErrorCode;

const STRATEGIES: [&str; 2] = ["redis-watchdog", "redis-watchdog-fenced"];

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts
        .app_binary
        .as_deref()
        .context("process-pause runs seckill-app: its binary is needed")?;
    let lease_ms: u64 = if opts.quick { 500 } else { 3000 };
    let hold_ms = lease_ms;
    let flags = [
        format!("--lock-lease-ms={lease_ms}"),
        format!("--lock-wait-ms={}", lease_ms * 10),
    ];
    let fleet = Fleet::start(binary, 2, &flags).await?;
    let mut rows = Vec::new();
    let mut timeline = Vec::new();
    for (n, strategy) in STRATEGIES.iter().enumerate() {
        let product = 200 + n as u64;
        fleet.reset(product, 1).await?;
        let tl = Timeline::new();
        let first = &fleet.apps.instances[0];

        tl.log("A@1", format!("orders the last unit ({hold_ms} ms inside)"));
        let api = fleet.api.clone();
        let a = tokio::spawn(
            async move { order(&api, 0, product, strategy, "buyer-a", hold_ms).await },
        );
        tokio::time::sleep(Duration::from_millis(lease_ms / 4)).await;
        first.pause()?;
        let paused_at = tl.now_ms();
        tl.log("instance 1", "frozen (SIGSTOP) while A holds the lock");

        tl.log("B@2", "orders the last unit");
        let b = fleet.order(1, product, strategy, "buyer-b", 0).await;
        tl.log("B@2", b.describe());
        let lock_back_ms = tl.now_ms() - paused_at;

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
        let p = fleet.product(product).await?;
        tl.log(
            "db",
            format!(
                "stock {} of {}, {} order(s)",
                p.stock, p.initial_stock, p.orders
            ),
        );

        let rejected = a.refused_with(ErrorCode::LockLost);
        let fenced = strategy.ends_with("-fenced");
        let (expected, ok) = if fenced {
            (
                "B sells the unit; A's late write is rejected by the fence (lock_lost); no oversell",
                b.created() && rejected && oversell(&p) == 0,
            )
        } else {
            (
                "the frozen watchdog renews nothing: B sells the unit, then A sells it again (oversell)",
                b.created() && oversell(&p) > 0,
            )
        };
        let observed = format!(
            "B: {}; A: {}; {} sold of {}",
            b.describe(),
            a.describe(),
            p.sold,
            p.initial_stock
        );
        rows.push(
            Row::new(*strategy, expected, observed, ok)
                .figure("oversell", oversell(&p) as f64)
                .figure("stale_writes_rejected", f64::from(u8::from(rejected)))
                .figure("b_served_after_freeze_ms", lock_back_ms),
        );
        timeline.extend(tl.events(Some(strategy)));
    }
    let figure = |s: &str, f: &str| {
        rows.iter()
            .find(|r| r.subject == s)
            .and_then(|r| r.get(f))
            .unwrap_or(f64::NAN)
    };
    let why = format!(
        "The watchdog renews the lease from inside the holder's process; frozen, it renewed \
         nothing, the lease ({lease_ms} ms) ran out and B was served {:.0} ms into the freeze. \
         On resuming, A's request went on from where it stopped — past every check — and wrote: \
         oversell {:.0} without fencing, {:.0} with it, where the product's fence (raised to B's \
         token) rejected A's write.",
        figure("redis-watchdog", "b_served_after_freeze_ms"),
        figure("redis-watchdog", "oversell"),
        figure("redis-watchdog-fenced", "oversell"),
    );
    Ok(ScenarioReport {
        scenario: "process-pause".into(),
        fault: format!(
            "two instances; the one holding the lock is SIGSTOPped for {} ms (lease {lease_ms} ms), then SIGCONTed",
            lease_ms * 3
        ),
        rows,
        timeline,
        why,
    })
}
