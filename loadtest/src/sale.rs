//! Phase 1, the flash sale: S units, U concurrent buyers, D purchase requests; then the
//! database tells what really happened (see [`app::accounting`]).

use anyhow::Result;
use serde::Serialize;
use sqlx::MySqlPool;

use anyhow::Context;
use app::accounting::Accounting;
use app::api::Strategy;

use crate::client::{Answer, Api, Outcomes, order_request, retries_in_metrics};
use crate::latency::LatencySummary;
use crate::load::{Budget, closed_loop};

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
}

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
    let ledger = app::db::products::ledger(db, plan.product)
        .await
        .with_context(|| format!("reading the ledger of product {}", plan.product))?
        .with_context(|| format!("product {} vanished during the sale", plan.product))?;
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
    })
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
