//! `return-crash`: the instance expiring an order of Redis-held stock is SIGKILLed after the
//! order left `reserved` and before its unit reached the Redis counter.
//!
//! The state change is in MariaDB, the counter in Redis: two writes in two systems, with no
//! transaction around both. The order is `expiring` — no longer holding its unit — and the
//! counter does not have it back: a unit sold to nobody and on sale nowhere (stranded:
//! undersell, never oversell). It stays so until someone finishes the return: `reconcile` at
//! once, or any instance's sweep once the return has been on its way longer than the return
//! grace. Either runs the give-back script, which adds the unit only if the purchase's charge
//! record still holds its charge and marks it ended in the same atomic step — so finishing twice,
//! or finishing a return the dead instance did complete after all, gives the unit back once.
//!
//! The instances' own sweeps are off and the return grace is long, so that the stranded unit
//! waits for `reconcile`; the window is measured from the moment the order was seen leaving
//! `reserved` to the end of the reconciliation.

use std::time::{Duration, Instant};

use anyhow::Result;
use app::api::{Home, Strategy};
use serde::{Deserialize, Serialize};
use testkit::Fault;

use super::{Judgement, Moment, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting};
use crate::rig::order_life::{await_all_due, buy, sell};

pub struct ReturnCrash;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    /// Units of expired orders on their way back, right after the crash.
    pub returning_after_crash: i64,
    /// Units stranded (in no order, not in the counter), right after the crash.
    pub stranded_after_crash: i64,
    /// The counter right after the crash.
    pub counter_after_crash: i64,
    /// Returns `reconcile` finished (and charges it gave back).
    pub released: u64,
    pub counter_after_reconcile: i64,
    pub stranded_after_reconcile: i64,
    /// From the order seen leaving `reserved` to the end of the reconciliation.
    pub stranded_ms: u64,
    /// Units sold when buyers then bought everything.
    pub units_sold_at_end: i64,
    pub oversell: i64,
}

const PRODUCT: u64 = 930;

impl Scenario for ReturnCrash {
    type Sizes = i64;
    const QUICK: i64 = 5;
    const FULL: i64 = 5;
    type Subject = Moment;
    type Figures = Figures;

    fn fault(stock: &i64) -> String {
        format!(
            "{stock} units in Redis; buyer A's order expires unpaid; the instance expiring it \
             is SIGKILLed after the order left `reserved` and before the unit reached the \
             counter; then `reconcile`, and buyers buy what is left"
        )
    }

    async fn play(stock: i64, stage: &Stage) -> Result<Vec<(Moment, Figures)>> {
        let flags = [
            "--expiry-interval-ms=0".to_string(),
            "--return-grace-ms=600000".to_string(),
        ];
        let mut fleet = Fleet::start(stage.app_binary()?, 2, &flags).await?;
        sell(
            &fleet,
            PRODUCT,
            stock,
            Home::Redis,
            Duration::from_millis(1),
        )
        .await?;
        let tl = stage.round(Strategy::RedisLua.name());
        let a = buy(&fleet, 0, PRODUCT, Strategy::RedisLua, "buyer-a", "a").await;
        tl.log("A@1", format!("buys: {}", a.describe()));
        await_all_due(&fleet).await?;

        // Instance 1 expires A's order and pauses before giving the unit back; it dies once
        // the order shows it left `reserved`.
        let api = fleet.api.clone();
        let stalled = tokio::spawn(async move {
            let hold = Fault {
                unchecked: false,
                hold: Duration::from_secs(60),
            };
            api.expire(0, PRODUCT, hold).await
        });
        let left = fleet.await_product(PRODUCT, |p| p.returning == 1).await?;
        let since = Instant::now();
        tl.log(
            "sweep@1",
            format!(
                "A's order expired ({} expiring); its unit not yet back in the counter",
                left.returning
            ),
        );
        fleet.apps.instances[0].kill()?;
        stalled.abort();
        tl.log(
            "instance 1",
            "killed (SIGKILL) between the expiry and the give-back",
        );

        let crashed = fleet.product(PRODUCT).await?;
        tl.log(
            "db+redis",
            format!(
                "counter {} of {}, {} unit(s) on their way, stranded {}",
                crashed.stock, crashed.initial_stock, crashed.returning, crashed.stranded
            ),
        );
        let reconciled = fleet.api.reconcile(PRODUCT).await?;
        let stranded_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let repaired = fleet.product(PRODUCT).await?;
        tl.log(
            "reconcile@2",
            format!(
                "{} return(s) finished; counter {}; stranded {} after {stranded_ms} ms",
                reconciled.released_requests, repaired.stock, repaired.stranded
            ),
        );

        for n in 0..stock + 1 {
            let user = format!("buyer-{n}");
            buy(&fleet, 1, PRODUCT, Strategy::RedisLua, &user, "late").await;
        }
        let end = fleet.product(PRODUCT).await?;
        let judged = accounting(&end);
        tl.log(
            "buyers@2",
            format!(
                "{} unit(s) held by orders of {}, counter {}: oversell {}",
                end.sold, end.initial_stock, end.stock, judged.oversell
            ),
        );
        let figures = Figures {
            stock,
            returning_after_crash: crashed.returning,
            stranded_after_crash: crashed.stranded,
            counter_after_crash: crashed.stock,
            released: reconciled.released_requests,
            counter_after_reconcile: repaired.stock,
            stranded_after_reconcile: repaired.stranded,
            stranded_ms,
            units_sold_at_end: end.sold,
            oversell: judged.oversell,
        };
        Ok(Moment::both(figures))
    }

    fn judge(_: &i64, moment: &Moment, f: &Figures) -> Judgement {
        match moment {
            Moment::AfterTheCrash => Judgement::new(
                "the expired order's unit in no order and not in the counter: stranded 1",
                format!(
                    "counter {} of {}; {} unit(s) on their way; stranded {}",
                    f.counter_after_crash, f.stock, f.returning_after_crash, f.stranded_after_crash
                ),
                f.stranded_after_crash == 1 && f.counter_after_crash == f.stock - 1,
            ),
            Moment::AfterReconcile => Judgement::new(
                format!(
                    "the unit back in the counter once ({}); all {} units sell, none twice",
                    f.stock, f.stock
                ),
                format!(
                    "counter {}, stranded {} after {} ms; {} unit(s) sold, oversell {}",
                    f.counter_after_reconcile,
                    f.stranded_after_reconcile,
                    f.stranded_ms,
                    f.units_sold_at_end,
                    f.oversell
                ),
                f.counter_after_reconcile == f.stock
                    && f.stranded_after_reconcile == 0
                    && f.units_sold_at_end == f.stock
                    && f.oversell == 0,
            ),
        }
    }

    fn why(_: &i64, rows: &[(Moment, Figures)]) -> String {
        let Some((_, f)) = rows.first() else {
            return String::new();
        };
        format!(
            "The expiry changed the order in MariaDB and was to give the unit back to the \
             Redis counter next; the instance died in between. For {} ms the unit was in no \
             order and not in the counter (stranded {}, counter {} of {}): undersell, the \
             failure a two-system step risks, never oversell. Reconcile read the order's state \
             (`expiring`), ran the give-back script — which adds the unit only while the \
             purchase's charge record holds its charge and marks it ended in the same step, so \
             a second run adds nothing — and recorded the order expired: counter {}, stranded {}, and {} of \
             {} units sold (oversell {}).",
            f.stranded_ms,
            f.stranded_after_crash,
            f.counter_after_crash,
            f.stock,
            f.counter_after_reconcile,
            f.stranded_after_reconcile,
            f.units_sold_at_end,
            f.stock,
            f.oversell
        )
    }
}
