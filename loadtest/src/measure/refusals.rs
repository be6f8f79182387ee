//! How cheap a refusal is once a product is sold out: purchases of the sold-out product in a
//! closed loop beside `GET /api/noop` in the same loop, on the same connections and client,
//! alternated three times (which goes first alternating too); the medians.
//!
//! A flood that left units — a strategy that answered most of its crowd `busy` or `overloaded`
//! — has them bought first, by buyers who click until one of them is told `sold_out` (each
//! instance learns it so), so that every strategy's refusals are timed after a sell-out, as
//! a sale's would be once its last unit went.

use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, OrderRequest, Strategy};
use testkit::{Api, Clicks, Crowd, order_request};

use crate::analyse::spread::combine;
use crate::drive::load::{Window, closed_loop};
use crate::measure::flood::FloodPlan;
use crate::report::schema::RefusalRate;

/// How long the buyers of what a flood left keep trying before the product counts as never
/// sold out (its refusals are then not timed).
const PATIENCE: Duration = Duration::from_secs(120);
/// A buyer's pause after an answer that bought nothing and did not say `sold_out`.
const PAUSE: Duration = Duration::from_millis(50);

/// The refusal rate of `plan`'s product, after selling the `left` units the flood left; `None`
/// when they could not be sold within [`PATIENCE`].
pub async fn after_sold_out(
    api: &Api,
    plan: &FloodPlan<'_>,
    window: Window,
    left: i64,
) -> Result<Option<RefusalRate>> {
    let mut sold_after_flood = 0;
    if left > 0 {
        // One buyer per unit left and a few more: the product sells one per customer.
        let buyers = usize::try_from(left)? + 16;
        let prefix = format!("{}-rest", plan.id_prefix);
        let answers = Crowd::new(
            buyers,
            Clicks::UntilSoldOut {
                pause: PAUSE,
                patience: PATIENCE,
            },
            plan.strategy.name,
            &prefix,
        )
        .users(&prefix)
        .run(api, plan.product)
        .await;
        if answers.refused(ErrorCode::SoldOut) == 0 {
            return Ok(None);
        }
        sold_after_flood = answers.created() as u64;
    }
    let mut rate = refusal_rate(api, plan, window).await;
    rate.sold_after_flood = sold_after_flood;
    Ok(Some(rate))
}

/// Refusals of the sold-out product per second beside `GET /api/noop`, each in a closed loop
/// of the same connections and client, alternated three times (which goes first alternating
/// too); the medians.
async fn refusal_rate(api: &Api, plan: &FloodPlan<'_>, window: Window) -> RefusalRate {
    let (mut refusals, mut noops) = (Vec::new(), Vec::new());
    let connections = plan.refusal_connections;
    for round in 0..3 {
        let (a, p, strategy) = (api.clone(), plan.product, plan.strategy.name);
        let prefix = format!("{}-after-{round}", plan.id_prefix);
        let refused = move || {
            closed_loop(connections, window, move |i| {
                let (a, prefix) = (a.clone(), prefix.clone());
                async move {
                    a.order(i as usize, p, &late_buyer(&prefix, strategy, i))
                        .await
                }
            })
        };
        let a = api.clone();
        let noop = move || {
            closed_loop(connections, window, move |i| {
                let a = a.clone();
                async move { a.noop(i as usize).await }
            })
        };
        if round % 2 == 0 {
            refusals.push(refused().await);
            noops.push(noop().await);
        } else {
            noops.push(noop().await);
            refusals.push(refused().await);
        }
    }
    let median = |runs| combine(runs).map_or(0.0, |run| run.attempts_per_sec);
    RefusalRate {
        refusals_per_second: median(refusals),
        noop_per_second: median(noops),
        connections,
        sold_after_flood: 0,
    }
}

/// The `i`-th purchase of the sold-out product: a buyer of its own, whom the sale refuses.
fn late_buyer(prefix: &str, strategy: Strategy, i: u64) -> OrderRequest {
    order_request(format!("late-{i}"), strategy, format!("{prefix}-{i}"), 1)
}
