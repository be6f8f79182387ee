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

use anyhow::{Context, Result};

use super::app::{Fleet, oversell};
use super::{Row, ScenarioOptions, ScenarioReport, Timeline};
use crate::client::Answer;
use crate::wire::{ErrorCode, ProductView};

const STRATEGIES: [&str; 3] = ["redis-lock", "redis-watchdog", "redis-lock-fenced"];

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts
        .app_binary
        .as_deref()
        .context("lease-expiry runs seckill-app: its binary is needed")?;
    let lease_ms: u64 = if opts.quick { 300 } else { 2000 };
    let hold_ms = lease_ms * 3;
    let flags = [
        format!("--lock-lease-ms={lease_ms}"),
        format!("--lock-wait-ms={}", hold_ms * 4),
    ];
    let fleet = Fleet::start(binary, 1, &flags).await?;
    let mut rows = Vec::new();
    let mut timeline = Vec::new();
    for (n, strategy) in STRATEGIES.iter().enumerate() {
        let product = 100 + n as u64;
        fleet.reset(product, 1).await?;
        let tl = Timeline::new();
        let (a, b) = race(&fleet, &tl, product, strategy, hold_ms, lease_ms).await?;
        let p = fleet.product(product).await?;
        tl.log(
            "db",
            format!(
                "stock {} of {}, {} order(s)",
                p.stock, p.initial_stock, p.orders
            ),
        );
        rows.push(row(strategy, &a, &b, &p));
        timeline.extend(tl.events(Some(strategy)));
    }
    let why = why(&rows, lease_ms, hold_ms);
    Ok(ScenarioReport {
        scenario: "lease-expiry".into(),
        fault: format!(
            "lease {lease_ms} ms; buyer A stalls {hold_ms} ms inside the critical section of the \
             last unit while buyer B asks for it"
        ),
        rows,
        timeline,
        why,
    })
}

/// A (stalling) and, a third of a lease later, B; both answers.
async fn race(
    fleet: &Fleet,
    tl: &Timeline,
    product: u64,
    strategy: &str,
    hold_ms: u64,
    lease_ms: u64,
) -> Result<(Answer, Answer)> {
    let a = async {
        tl.log(
            "A",
            format!("orders the last unit, stalls {hold_ms} ms inside"),
        );
        let a = fleet.order(0, product, strategy, "buyer-a", hold_ms).await;
        tl.log("A", a.describe());
        anyhow::Ok(a)
    };
    let b = async {
        tokio::time::sleep(Duration::from_millis(lease_ms / 3)).await;
        tl.log("B", "orders the last unit");
        let b = fleet.order(0, product, strategy, "buyer-b", 0).await;
        tl.log("B", b.describe());
        anyhow::Ok(b)
    };
    tokio::try_join!(a, b)
}

fn row(strategy: &str, a: &Answer, b: &Answer, p: &ProductView) -> Row {
    let rejected = u8::from(a.refused_with(ErrorCode::LockLost));
    let (expected, ok) = match strategy {
        "redis-lock" => (
            "B is granted the expired lock: two orders for one unit (oversell)",
            oversell(p) > 0,
        ),
        "redis-watchdog" => (
            "the lease is renewed: B waits, then finds it sold out; no oversell",
            oversell(p) == 0 && a.created() && !b.created(),
        ),
        _ => (
            "B is granted the expired lock, A's stale write is rejected (lock_lost); no oversell",
            oversell(p) == 0 && rejected == 1 && b.created(),
        ),
    };
    let observed = format!(
        "A: {}; B: {}; {} sold of {}",
        a.describe(),
        b.describe(),
        p.sold,
        p.initial_stock
    );
    Row::new(strategy, expected, observed, ok)
        .figure("oversell", oversell(p) as f64)
        .figure("orders", p.orders as f64)
        .figure("stale_writes_rejected", f64::from(rejected))
}

fn why(rows: &[Row], lease_ms: u64, hold_ms: u64) -> String {
    let oversell = |s: &str| {
        rows.iter()
            .find(|r| r.subject == s)
            .and_then(|r| r.get("oversell"))
            .unwrap_or(f64::NAN)
    };
    format!(
        "A lease is a guess about how long the critical section takes. A held the lock for \
         {hold_ms} ms on a {lease_ms} ms lease: `redis-lock` let B in after {lease_ms} ms, both \
         read the same last unit and both sold it (oversell {:.0}). The watchdog kept renewing \
         A's lease, so B waited (oversell {:.0}); it helps only while A's process runs. Fencing \
         does not prevent B's entry but makes A's late write fail against the product's fence \
         (oversell {:.0}), which holds even when renewal cannot (see `process-pause`).",
        oversell("redis-lock"),
        oversell("redis-watchdog"),
        oversell("redis-lock-fenced"),
    )
}
