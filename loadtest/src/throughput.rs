//! Phase 2, throughput: a product with effectively unlimited stock, a closed loop of U
//! buyers, then an open loop at a fixed arrival rate (see [`crate::load`] for why both). Both
//! loops send the same requests through the same client.

use anyhow::Result;
use app::api::Strategy;
use serde::Serialize;

use crate::client::{Answer, Api, order_request};
use crate::load::{Budget, LoadResult, Window, closed_loop, open_loop};

/// Stock that no run can exhaust.
pub const UNLIMITED: i64 = 1_000_000_000;

/// Share of the closed loop's attempts/s used as open-loop rate when none is given: enough
/// load to matter, below saturation so the latencies describe the service, not a queue that
/// grows without bound.
pub const DEFAULT_RATE_SHARE: f64 = 0.7;

#[derive(Debug, Clone)]
pub struct ThroughputPlan {
    pub product: u64,
    pub strategy: Strategy,
    pub users: usize,
    pub quantity: i64,
    pub window: Window,
    /// Open-loop arrival rate; `None`: [`DEFAULT_RATE_SHARE`] of the closed loop's attempts/s.
    pub rate: Option<f64>,
    pub id_prefix: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputResult {
    pub closed: LoadResult,
    pub open: LoadResult,
}

/// Runs the closed loop, then the open loop; `on_phase` is told which starts.
pub async fn run_throughput(
    api: &Api,
    plan: &ThroughputPlan,
    on_phase: &(dyn Fn(&str) + Sync),
) -> Result<ThroughputResult> {
    api.reset_product(plan.product, UNLIMITED, plan.strategy.home())
        .await?;
    on_phase("closed loop");
    let buyers = Buyers::new(api, plan, "c");
    let closed = closed_loop(plan.users, Budget::Window(plan.window), move |i| {
        buyers.clone().send(i)
    })
    .await;
    let rate = plan
        .rate
        .unwrap_or(closed.attempts_per_sec * DEFAULT_RATE_SHARE)
        .max(1.0);
    on_phase(&format!("open loop {rate:.0}/s"));
    let buyers = Buyers::new(api, plan, "o");
    let open = open_loop(plan.users, rate, plan.window, move |i| {
        buyers.clone().send(i)
    })
    .await;
    // Zero stock and no orders: later strategies do not pay for this one's rows.
    api.reset_product(plan.product, 0, plan.strategy.home())
        .await?;
    Ok(ThroughputResult { closed, open })
}

/// The requests of a loop: request `i` is one order of the plan's product, from one of its U
/// users, to instance `i % K`, with a request id unique to the loop (`tag`).
#[derive(Clone)]
struct Buyers {
    api: Api,
    plan: ThroughputPlan,
    tag: &'static str,
}

impl Buyers {
    fn new(api: &Api, plan: &ThroughputPlan, tag: &'static str) -> Buyers {
        Buyers {
            api: api.clone(),
            plan: plan.clone(),
            tag,
        }
    }

    async fn send(self, i: u64) -> Answer {
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
