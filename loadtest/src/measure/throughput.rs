//! Phase 2, throughput: a product with effectively unlimited stock, closed loops of U buyers
//! (several runs, interleaved with the other strategies' by [`crate::run`]), then an open loop
//! at a fixed arrival rate (see [`crate::drive::load`] for why both). Both loops send the same
//! requests through the same client.

use std::sync::Arc;

use anyhow::Result;
use app::api::Strategy;

use crate::drive::load::{Window, closed_loop_feeding, open_loop_feeding};
use crate::live::Feed;
use crate::schema::{LoadResult, OPEN_RATE_SHARE};
use testkit::{Answer, Api, order_request};

/// Stock that no run can exhaust.
pub const UNLIMITED: i64 = 1_000_000_000;

#[derive(Debug, Clone)]
pub struct ThroughputPlan {
    pub product: u64,
    pub strategy: Strategy,
    pub users: usize,
    pub quantity: i64,
    pub window: Window,
    /// Open-loop arrival rate; `None`: [`OPEN_RATE_SHARE`] of the closed loop's attempts/s.
    pub rate: Option<f64>,
    pub id_prefix: String,
    /// Told of every answer counted (the live page).
    pub feed: Feed,
}

/// One closed-loop run (`round` keeps its request ids apart from the other rounds'), on a
/// product reset to unlimited stock and no orders.
pub async fn closed(api: &Api, plan: &ThroughputPlan, round: usize) -> Result<LoadResult> {
    api.reset_product(plan.product, UNLIMITED, plan.strategy.home())
        .await?;
    let buyers = Buyers::new(api, plan, format!("c{round}"));
    let closed = closed_loop_feeding(plan.users, plan.window, &plan.feed, move |_, i| {
        buyers.clone().send(i)
    })
    .await;
    settle(api, plan).await?;
    Ok(closed)
}

/// Waits until the orders a loop left queued (`redis-lua-stream`'s stream) are placed: the
/// consumers would otherwise go on writing them to MariaDB during the next strategy's run and
/// slow it down, and resetting a product scans what still waits.
pub(crate) async fn settle(api: &Api, plan: &ThroughputPlan) -> Result<()> {
    if plan.strategy.home().in_redis() {
        crate::measure::sale::drain(api, plan.product).await?;
    }
    Ok(())
}

/// The open-loop arrival rate after the closed loop `closed`: the plan's, or
/// [`OPEN_RATE_SHARE`] of the closed loop's attempts/s.
pub fn open_rate(plan: &ThroughputPlan, closed: &LoadResult) -> f64 {
    plan.rate
        .unwrap_or(closed.attempts_per_sec * OPEN_RATE_SHARE)
        .max(1.0)
}

/// The open-loop run at `rate`; afterwards the product is left with no stock and no orders,
/// so later strategies do not pay for this one's rows.
pub async fn open(api: &Api, plan: &ThroughputPlan, rate: f64) -> Result<LoadResult> {
    api.reset_product(plan.product, UNLIMITED, plan.strategy.home())
        .await?;
    let buyers = Buyers::new(api, plan, "o".into());
    let open = open_loop_feeding(plan.users, rate, plan.window, &plan.feed, move |i| {
        buyers.clone().send(i)
    })
    .await;
    settle(api, plan).await?;
    api.reset_product(plan.product, 0, plan.strategy.home())
        .await?;
    Ok(open)
}

/// The requests of a loop: request `i` is one order of the plan's product, from one of its U
/// users, to instance `i % K`, with a request id unique to the loop (`tag`).
#[derive(Clone)]
pub(crate) struct Buyers {
    api: Api,
    plan: ThroughputPlan,
    tag: Arc<str>,
}

impl Buyers {
    pub(crate) fn new(api: &Api, plan: &ThroughputPlan, tag: String) -> Buyers {
        Buyers {
            api: api.clone(),
            plan: plan.clone(),
            tag: tag.into(),
        }
    }

    pub(crate) async fn send(self, i: u64) -> Answer {
        let plan = &self.plan;
        let body = order_request(
            format!("u-{}", i % plan.users as u64),
            plan.strategy,
            format!("{}-{}-{i}", plan.id_prefix, self.tag),
            plan.quantity,
        );
        self.api.order(i as usize, plan.product, &body).await
    }
}
