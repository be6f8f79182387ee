//! Phase 1, the flash sale: S units, U concurrent buyers, D purchase requests; then the
//! database tells what really happened (see [`app::accounting`]).

use anyhow::Result;
use serde::Serialize;
use sqlx::MySqlPool;

use anyhow::Context;
use std::time::{Duration, Instant};

use app::accounting::{Accounting, Ledger};
use app::api::{Home, ProductView, Strategy};

use crate::drive::client::{Answer, Api, Outcomes, order_request, retries_in_metrics};
use crate::drive::load::{Budget, closed_loop};
use crate::measure::latency::LatencySummary;

/// What to sell and how hard.
#[derive(Debug, Clone)]
pub struct SalePlan {
    pub product: u64,
    pub strategy: Strategy,
    pub stock: i64,
    pub buyers: usize,
    pub requests: u64,
    pub quantity: i64,
    /// Prefix of the request ids, unique per run.
    pub id_prefix: String,
}

/// The flash sale's result: HTTP outcomes next to the database's truth.
#[derive(Debug, Clone, Serialize)]
pub struct SaleResult {
    pub requests: u64,
    pub buyers: usize,
    pub quantity: i64,
    pub seconds: f64,
    /// What the clients were told.
    pub outcomes: Outcomes,
    /// What the database holds.
    pub accounting: Accounting,
    /// 201 answers whose order is not in the database (negative: orders nobody was told of).
    pub acknowledged_minus_orders: i64,
    /// Retries the app reported in `/metrics` during the sale, where it reports them.
    pub retries: Option<f64>,
    pub latency: LatencySummary,
    /// Seconds from the end of the load until no accepted order was waiting in the stream
    /// (stream strategies only); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_seconds: Option<f64>,
}

/// Longest wait for the stream to drain before the ledger is read anyway.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Resets the product, runs the sale, reads the ledger.
pub async fn run_sale(api: &Api, db: &MySqlPool, plan: &SalePlan) -> Result<SaleResult> {
    api.reset_product(plan.product, plan.stock, plan.strategy.home())
        .await?;
    let retries_before = retries_in_metrics(&api.metrics().await, plan.strategy);
    let buyers = Buyers {
        api: api.clone(),
        plan: plan.clone(),
    };
    let load = closed_loop(plan.buyers, Budget::Requests(plan.requests), move |i| {
        buyers.clone().send(i)
    })
    .await;
    let retries_after = retries_in_metrics(&api.metrics().await, plan.strategy);
    let (ledger, drain_seconds) = if plan.strategy.home() == Home::Redis {
        // The counter lives in the app's Redis: read through the app, after the drain.
        let (view, drained) = drain(api, plan.product).await?;
        (Ledger::of(view), Some(drained.as_secs_f64()))
    } else {
        let ledger = app::db::products::ledger(db, None, plan.product)
            .await
            .with_context(|| format!("reading the ledger of product {}", plan.product))?
            .with_context(|| format!("product {} vanished during the sale", plan.product))?;
        (ledger, None)
    };
    let demand_units = plan.requests as i64 * plan.quantity;
    let accounting = Accounting::of(ledger, demand_units);
    Ok(SaleResult {
        requests: plan.requests,
        buyers: plan.buyers,
        quantity: plan.quantity,
        seconds: load.seconds,
        acknowledged_minus_orders: load.outcomes.created as i64 - ledger.orders,
        outcomes: load.outcomes,
        accounting,
        retries: retries_after.map(|after| after - retries_before.unwrap_or(0.0)),
        latency: load.latency,
        drain_seconds,
    })
}

/// Waits (at most [`DRAIN_LIMIT`]) until no accepted order of `product` waits in the stream;
/// returns the product then and the time it took.
pub(crate) async fn drain(api: &Api, product: u64) -> Result<(ProductView, Duration)> {
    let started = Instant::now();
    loop {
        let view = api.product(product).await?;
        if view.pending == 0 || started.elapsed() >= DRAIN_LIMIT {
            if view.pending > 0 {
                tracing::warn!(product, pending = view.pending, "the stream did not drain");
            }
            return Ok((view, started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Request `i` of the sale: one order from the buyer `i % U` to instance `i % K`.
#[derive(Clone)]
struct Buyers {
    api: Api,
    plan: SalePlan,
}

impl Buyers {
    async fn send(self, i: u64) -> Answer {
        let plan = &self.plan;
        let body = order_request(
            format!("u-{}", i % plan.buyers as u64),
            plan.strategy,
            format!("{}-{i}", plan.id_prefix),
            plan.quantity,
        );
        self.api.order(i as usize, plan.product, &body).await
    }
}
