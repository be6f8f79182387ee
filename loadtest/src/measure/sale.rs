//! The flash sale: S units, U concurrent buyers, D purchase requests (the one crowd,
//! [`testkit::Crowd`]); then the database tells what really happened (see
//! [`app::accounting`]).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use app::accounting::{Accounting, Ledger};
use app::api::{ErrorCode, Home, ProductView, Strategy};
use app::db::Db;
use testkit::{Api, Clicks, Crowd, Outcomes, Retry};

use crate::drive::latency::Latencies;
use crate::live::{Feed, Update};
use crate::schema::SaleResult;

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
    /// Told of the sale, each answer as it comes, and the ledger (the live page).
    pub feed: Feed,
}

/// A buyer turned away at the door (`503 overloaded`: the instance already works on as many
/// purchases of the strategy as it answers within its latency budget) clicks again, with the
/// same request id, 50–100 ms later, up to [`DOOR_RETRIES`] times: what a buyer facing a busy
/// shop does. The sale then counts what each strategy sells, not what the door sheds.
pub const DOOR_RETRIES: u32 = 100;
const AT_THE_DOOR: Retry = Retry {
    when: |answer| answer.refused_with(ErrorCode::Overloaded),
    times: DOOR_RETRIES,
    pause: Duration::from_millis(50),
    jitter: Duration::from_millis(50),
};

/// Longest wait for the stream to drain before the ledger is read anyway.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Resets the product, runs the sale, reads the ledger.
pub async fn run_sale(api: &Api, db: &Db, plan: &SalePlan) -> Result<SaleResult> {
    api.reset_product(plan.product, plan.stock, plan.strategy.home())
        .await?;
    let retries_before = retries_in_metrics(&api.metrics().await, plan.strategy);
    plan.feed.send(Update::Sale {
        strategy: plan.strategy,
        stock: plan.stock,
        requests: plan.requests,
    });
    let mut crowd = Crowd::new(
        plan.buyers,
        Clicks::Total(plan.requests),
        plan.strategy,
        &plan.id_prefix,
    )
    .quantity(plan.quantity)
    .retrying(AT_THE_DOOR);
    if plan.feed.is_on() {
        let feed = plan.feed.clone();
        crowd = crowd.watched(move |click| feed.answer(&click.answer, click.answered - click.sent));
    }
    let answers = crowd.run(api, plan.product).await;
    let retries_after = retries_in_metrics(&api.metrics().await, plan.strategy);
    let (ledger, drained) = read_ledger(api, db, plan.product, plan.strategy.home()).await?;
    let drain_seconds = drained.map(|d| d.as_secs_f64());
    let demand_units = plan.requests as i64 * plan.quantity;
    let outcomes = answers.outcomes();
    backend_answered(plan.strategy, &outcomes)?;
    let mut latencies = Latencies::default();
    for latency in answers.latencies() {
        latencies.record(latency);
    }
    let accounting = Accounting::of(ledger, demand_units);
    plan.feed.send(Update::SaleDone {
        strategy: plan.strategy,
        accounting,
        outcomes: Box::new(outcomes.clone()),
    });
    Ok(SaleResult {
        requests: plan.requests,
        buyers: plan.buyers,
        quantity: plan.quantity,
        seconds: answers.elapsed.as_secs_f64(),
        acknowledged_minus_orders: outcomes.created as i64 - ledger.orders,
        outcomes,
        accounting,
        retries: retries_after.map(|after| after - retries_before.unwrap_or(0.0)),
        latency: latencies.summary(),
        drain_seconds,
        door_retries: DOOR_RETRIES,
    })
}

/// The product's books: for stock held in Redis, read through the app once the stream has
/// drained (and how long the drain took); else from the database.
pub async fn read_ledger(
    api: &Api,
    db: &Db,
    product: u64,
    home: Home,
) -> Result<(Ledger, Option<Duration>)> {
    if home.in_redis() {
        // The counter lives in the app's Redis: read through the app, after the drain.
        let (view, drained) = drain(api, product).await?;
        return Ok((Ledger::of(view), Some(drained)));
    }
    let ledger = app::inventory::ledger(db, None, product)
        .await
        .with_context(|| format!("reading the ledger of product {product}"))?
        .with_context(|| format!("product {product} vanished during the sale"))?;
    Ok((ledger, None))
}

/// Waits (at most [`DRAIN_LIMIT`]) until no accepted order of `product` waits in the stream;
/// returns the product then and the time it took.
pub async fn drain(api: &Api, product: u64) -> Result<(ProductView, Duration)> {
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

/// Sums the Prometheus samples labelled `strategy="<strategy>"` whose metric name mentions
/// retries (`*retr*`, counters only: `_total` or no suffix). `None` when there are none.
pub fn retries_in_metrics(text: &str, strategy: Strategy) -> Option<f64> {
    let label = format!("strategy=\"{strategy}\"");
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or_default();
        let is_histogram_part = ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.ends_with(s));
        if name.contains("retr")
            && !is_histogram_part
            && series.contains(&label)
            && let Ok(v) = value.trim().parse::<f64>()
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// Fails when every purchase of a sale was answered `backend_unavailable`: the strategy's
/// backend is not running in this deployment (the app instances' logs say why — a lock service
/// that did not start, a statement the server refuses), and every figure the run would go on to
/// take of the strategy would time a refusal.
fn backend_answered(strategy: Strategy, outcomes: &Outcomes) -> Result<()> {
    let unavailable = outcomes.refused(ErrorCode::BackendUnavailable);
    ensure!(
        unavailable == 0 || unavailable < outcomes.total(),
        "every purchase of `{strategy}`'s flash sale ({unavailable}) was answered \
         backend_unavailable: its backend is not running in this deployment (the app \
         instances' logs in the run's `logs/` say why)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sale_answered_backend_unavailable_throughout_stops_the_run() {
        let mut outcomes = Outcomes::default();
        assert!(backend_answered(Strategy::DbLockFenced, &outcomes).is_ok());
        for _ in 0..3 {
            outcomes.count(&testkit::Answer::Refused {
                code: ErrorCode::BackendUnavailable,
                status: 503,
            });
        }
        let error = backend_answered(Strategy::DbLockFenced, &outcomes).unwrap_err();
        assert!(error.to_string().contains("`db-lock-fenced`"), "{error}");
        outcomes.count(&testkit::Answer::Refused {
            code: ErrorCode::SoldOut,
            status: 409,
        });
        assert!(backend_answered(Strategy::DbLockFenced, &outcomes).is_ok());
    }

    #[test]
    fn retries_are_summed_per_strategy_from_prometheus_text() {
        let text = "# HELP seckill_retries_total retries\n\
            seckill_retries_total{strategy=\"optimistic\",instance=\"a\"} 7\n\
            seckill_retries_total{strategy=\"optimistic\",instance=\"b\"} 5\n\
            seckill_retries_total{strategy=\"naive\"} 100\n\
            seckill_requests_total{strategy=\"optimistic\"} 9\n";
        assert_eq!(retries_in_metrics(text, Strategy::Optimistic), Some(12.0));
        assert_eq!(retries_in_metrics(text, Strategy::Conditional), None);
    }
}
