//! `lease-expiry`: the critical section stalls longer than the lock's lease.
//!
//! Buyer A takes the lock, reads the last unit, and stalls (the injected `X-Seckill-Hold-Ms`,
//! three leases long) before writing. Buyer B asks once A is inside. With `redis-lock` the
//! lease runs out under A: B is granted the lock, reads the same last unit, sells it; A wakes
//! and sells it again — two orders for one unit. `redis-watchdog` renews A's lease while A's
//! process lives, so B waits and then finds the product sold out. `redis-lock-fenced` lets B in
//! as `redis-lock` does, but B's grant raised the product's fence, so A's late write carries
//! an older token and the database refuses it (`409 lock_lost`).

use anyhow::Result;
use app::api::{ErrorCode, Strategy};
use serde::{Deserialize, Serialize};
use testkit::{Answer, Api};

use super::{Judgement, Scenario, Stage, Timeline};
use crate::rig::fleet::{Fleet, accounting, lock_flags, order};

pub struct LeaseExpiry;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub(super) lease_ms: u64,
}

impl Sizes {
    /// How long A stays inside: three leases.
    pub(super) fn hold_ms(self) -> u64 {
        self.lease_ms * 3
    }
}

/// A stays inside the last unit's lock past its lease; B asks for the unit meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub oversell: i64,
    pub orders: i64,
    pub a: Answer,
    pub b: Answer,
    /// A's late write was refused by the product's fence (`409 lock_lost`).
    pub stale_write_rejected: bool,
}

impl Figures {
    /// What each buyer was answered and what the database holds, in a line.
    pub(super) fn observed(&self) -> String {
        format!(
            "A: {}; B: {}; {} order(s) for 1 unit",
            self.a.describe(),
            self.b.describe(),
            self.orders
        )
    }
}

const STRATEGIES: [Strategy; 3] = [
    Strategy::RedisLock,
    Strategy::RedisWatchdog,
    Strategy::RedisLockFenced,
];

impl Scenario for LeaseExpiry {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes { lease_ms: 300 };
    const FULL: Sizes = Sizes { lease_ms: 2000 };
    type Subject = Strategy;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "lease {} ms; buyer A stalls {} ms inside the critical section of the last unit \
             while buyer B asks for it",
            s.lease_ms,
            s.hold_ms()
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Strategy, Figures)>> {
        let flags = lock_flags(s.lease_ms, s.hold_ms() * 4);
        let fleet = Fleet::start(stage.app_binary()?, 1, &flags).await?;
        let mut rows = Vec::new();
        for (n, strategy) in STRATEGIES.into_iter().enumerate() {
            let product = 100 + n as u64;
            fleet.reset(product, 1).await?;
            let tl = stage.round(strategy.name());
            let buyers = (&fleet.api, &fleet.api);
            let figures =
                last_unit_race(s, &fleet, &tl, buyers, strategy, product, |_| {}, |_| {}).await?;
            rows.push((strategy, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, strategy: &Strategy, f: &Figures) -> Judgement {
        let (a, b) = (f.a.created(), f.b.created());
        let (expected, holds) = match strategy {
            Strategy::RedisWatchdog => (
                "the lease is renewed: B waits, then finds it sold out; no oversell",
                f.oversell == 0 && a && !b,
            ),
            Strategy::RedisLockFenced => (
                "B is granted the expired lock, A's stale write is rejected (lock_lost); no \
                 oversell",
                f.oversell == 0 && f.stale_write_rejected && b,
            ),
            _ => (
                "B is granted the expired lock: two orders for one unit (oversell)",
                f.oversell > 0,
            ),
        };
        Judgement::new(expected, f.observed(), holds)
    }

    fn why(s: &Sizes, rows: &[(Strategy, Figures)]) -> String {
        let mut text = format!(
            "A lease is a guess about how long the critical section takes. A stayed {} ms \
             inside on a {} ms lease.",
            s.hold_ms(),
            s.lease_ms
        );
        for (strategy, f) in rows {
            let what = match (f.a.created(), f.b.created(), f.stale_write_rejected) {
                (true, true, _) => format!(
                    "B was let in while A still worked, both read the same last unit and both \
                     sold it (oversell {})",
                    f.oversell
                ),
                (true, false, _) => format!(
                    "A's lease held (B was kept out until A had sold the unit; oversell {})",
                    f.oversell
                ),
                (false, true, true) => format!(
                    "B was let in and sold the unit; A's late write carried an older token and \
                     the product's fence refused it (oversell {})",
                    f.oversell
                ),
                (false, true, false) => format!(
                    "B sold the unit and A's write failed for another reason (oversell {})",
                    f.oversell
                ),
                (false, false, _) => {
                    format!("neither A nor B sold the unit (oversell {})", f.oversell)
                }
            };
            text.push_str(&format!(" With `{strategy}`, {what}."));
        }
        let watchdog_held = rows
            .iter()
            .any(|(s, f)| *s == Strategy::RedisWatchdog && f.a.created() && !f.b.created());
        if watchdog_held {
            text.push_str(
                " Renewal kept the lease alive only because A's process kept running; fencing \
                 does not depend on that (see `process-pause`).",
            );
        }
        text
    }
}

/// Buyer A orders the last unit of `product` and works three leases inside its lock; once A is
/// inside, `fault` strikes and buyer B orders the same unit; `mend` runs once B has its answer.
/// Then what the database holds.
#[allow(clippy::too_many_arguments)]
pub(super) async fn last_unit_race(
    s: Sizes,
    fleet: &Fleet,
    tl: &Timeline,
    (api_a, api_b): (&Api, &Api),
    strategy: Strategy,
    product: u64,
    fault: impl FnOnce(&Timeline),
    mend: impl FnOnce(&Timeline),
) -> Result<Figures> {
    let mut watch = fleet.watch_transactions().await?;
    let a = async {
        tl.log(
            "A",
            format!("orders the last unit, works {} ms inside", s.hold_ms()),
        );
        let a = order(api_a, 0, product, strategy, "buyer-a", s.hold_ms()).await;
        tl.log("A", a.describe());
        a
    };
    let b = async {
        watch.inside().await?;
        fault(tl);
        tl.log("B", "orders the last unit, A being inside");
        let b = order(api_b, 0, product, strategy, "buyer-b", 0).await;
        tl.log("B", b.describe());
        mend(tl);
        anyhow::Ok(b)
    };
    let (a, b) = tokio::join!(a, b);
    let b = b?;
    let p = fleet.product(product).await?;
    tl.log("db", format!("{} order(s) for 1 unit", p.orders));
    Ok(Figures {
        oversell: accounting(&p).oversell,
        orders: p.orders,
        a,
        b,
        stale_write_rejected: a.refused_with(ErrorCode::LockLost),
    })
}
