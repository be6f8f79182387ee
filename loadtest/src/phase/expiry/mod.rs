//! The expiry phase: what the expiry sweep costs the purchases running beside it.
//!
//! A strategy's closed loop buys a product with stock no loop exhausts and a short payment
//! window, every purchase by a buyer of its own (as in a sale of one per customer). A share of
//! the buyers never pays, as in a flash sale's flood; the others pay right after buying, beside
//! the purchases still going on (a payment is not part of the purchase it follows, and not
//! timed with it). An unpaid order falls due moments after it was placed, and the sweep of
//! every instance expires it and gives its unit back to the product's home — the row the
//! purchases deduct from, a bucket, or the Redis counter, inside the same locks and scripts.
//! With every buyer a non-payer it is the sweep's worst case: as many expiries as purchases.
//! The same loop then runs with every instance's sweep paused (`PUT /api/expiry`), the due
//! orders left waiting, the payments made as before. Rounds
//! alternate which goes first, each on a product reset to no orders, and each round's p99 with
//! the sweep is divided by the same round's p99 without it: the median of those ratios is what
//! the sweep added.
//!
//! The sweeps expire every product's due orders, oldest first: orders of another product due
//! during a loop would be expired ahead of the loop's own, and the round would measure their
//! expiry instead. No phase leaves any (the benchmark's products give their orders the longest
//! payment window); each loop with the sweep counts them first, and a count above zero is a
//! finding.
//!
//! Its figures and shape are in [`schema`], its bar in [`judge`], its section of the report and
//! its line of the README in [`section`].

pub mod judge;
pub mod schema;
pub mod section;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use app::db::Db;
use app::db::engine::Sql;

use super::{About, Allotment, Measured, Measuring, Needs, Phase, Recorded, Run, Turn};
use crate::analyse::spread;
use crate::drive::load::{Window, closed_loop_feeding};
use crate::measure::cashier::{Cashier, Till};
use crate::measure::throughput::{ThroughputPlan, UNLIMITED, settle};
use crate::report::section::Section;
use crate::schema::{Findings, LoadResult, RunReport, Settings};
use app::api::{ResetProduct, StrategyInfo};
use testkit::metrics::series_values;
use testkit::{Api, order_request};

pub use schema::{ExpiryCost, ExpiryMiss, ExpiryPayments, ExpiryShape, ReturnLockUse};

/// Its name: in the report, the settings, the findings and the errors.
pub const NAME: &str = "expiry";

/// The shape the run asked of it; `None`: not asked.
pub fn shape(settings: &Settings) -> Option<&ExpiryShape> {
    settings.phases.get(NAME)
}

/// Its bar missed, or its measurement spoilt, per strategy.
pub fn found(findings: &Findings) -> &[ExpiryMiss] {
    findings.phases.list(NAME)
}

/// The expiry phase's payment window: long enough for a buyer who pays at once to pay in time
/// on a loaded machine, short enough that the unpaid orders of a loop fall due early in it.
pub const PAYMENT_WINDOW_MS: u64 = 500;

/// The uncounted start of each loop: longer than the payment window and a round of the app's
/// sweep (1 s), so that the measured seconds see orders falling due, and being expired, at the
/// pace they are placed.
pub const WARMUP_SECONDS: f64 = 1.5;

/// One strategy's expiry phase.
pub struct ExpiryPlan<'a> {
    pub strategy: &'a StrategyInfo,
    pub shape: &'a ExpiryShape,
    /// The product, buyers, quantity and request ids of its loops; the window is the shape's.
    pub buyers: ThroughputPlan,
}

/// Runs the rounds; leaves every sweep running and the product with no stock and no orders.
pub async fn run_expiry(api: &Api, db: &Db, plan: &ExpiryPlan<'_>) -> Result<ExpiryCost> {
    let shape = plan.shape;
    let buyers = ThroughputPlan {
        window: Window::from_secs(shape.warmup, shape.seconds),
        ..plan.buyers.clone()
    };
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut p99_ratios = Vec::new();
    let (mut expired, mut expired_unswept, mut swept_seconds, mut others_due) = (0, 0, 0.0, 0);
    let mut payments = ExpiryPayments::default();
    let mut return_lock = ReturnLockUse::default();
    for round in 0..shape.rounds {
        let mut pair = [None, None];
        for sweeping in [round % 2 == 0, round % 2 != 0] {
            if sweeping {
                let lasts = buyers.window.warmup + buyers.window.measure;
                others_due += due_elsewhere(db, buyers.product, lasts).await?;
            }
            let before = match sweeping {
                true => Some(ReturnLockCounters::read(api).await),
                false => None,
            };
            let (run, till, ended, seconds) =
                one_loop(api, db, &buyers, shape, round, sweeping).await?;
            if let Some(before) = before {
                ReturnLockCounters::read(api)
                    .await
                    .add_since(&before, &mut return_lock);
            }
            payments.bought += till.won;
            payments.never_paid += till.never_paid;
            payments.paid += till.paid;
            payments.too_late += till.too_late;
            payments.refused += till.refused + till.failed;
            if sweeping {
                expired += ended;
                swept_seconds += seconds;
            } else {
                expired_unswept += ended;
            }
            pair[usize::from(sweeping)] = Some(run);
        }
        let [Some(unswept), Some(swept)] = pair else {
            unreachable!("each round runs both loops");
        };
        p99_ratios.push(swept.latency.p99_us as f64 / unswept.latency.p99_us.max(1) as f64);
        with.push(swept);
        without.push(unswept);
    }
    // Reset with the sweeps paused, as before each loop: a running sweep would be expiring
    // the last loop's due orders while the reset deletes them.
    api.pause_sweeps(true).await?;
    api.reset_product(buyers.product, 0, buyers.strategy.home())
        .await?;
    api.pause_sweeps(false).await?;
    Ok(ExpiryCost {
        with_sweep: spread::combine(with).context("no round")?,
        without_sweep: spread::combine(without).context("no round")?,
        p99_ratios,
        expired,
        swept_seconds,
        expired_unswept,
        others_due,
        payments,
        return_lock,
    })
}

/// One closed loop with every sweep running or every sweep paused; its result, its buyers'
/// payments, the orders expired by its end, and how long it lasted.
async fn one_loop(
    api: &Api,
    db: &Db,
    buyers: &ThroughputPlan,
    shape: &ExpiryShape,
    round: usize,
    sweeping: bool,
) -> Result<(LoadResult, Till, u64, f64)> {
    // Paused while the product is reset, so that no sweep works on the orders being deleted.
    api.pause_sweeps(true).await?;
    let product = ResetProduct {
        per_user_limit: Some(app::api::MAX_STOCK),
        payment_window_ms: Some(i64::try_from(shape.payment_window_ms)?),
        ..ResetProduct::new(UNLIMITED, buyers.strategy.home())
    };
    api.put_product(buyers.product, &product).await?;
    if sweeping {
        api.pause_sweeps(false).await?;
    }
    let tag: Arc<str> = format!(
        "{}-x{round}{}",
        buyers.id_prefix,
        if sweeping { "s" } else { "p" }
    )
    .into();
    let started = std::time::Instant::now();
    let window = Duration::from_millis(shape.payment_window_ms);
    let cashier = Arc::new(Cashier::open(
        api,
        buyers.product,
        round as u64,
        shape.non_payer_share,
        window,
    ));
    let (client, plan, till) = (api.clone(), buyers.clone(), cashier.clone());
    let run = closed_loop_feeding(buyers.users, buyers.window, &buyers.feed, move |_, i| {
        // Every purchase a buyer of its own, as in a sale with a limit per customer: a buyer's
        // count is claimed once, and the sweep gives back counts no purchase waits on.
        let id = format!("{tag}-{i}");
        let body = order_request(id.clone(), plan.strategy, id.clone(), plan.quantity);
        let (client, product, till) = (client.clone(), plan.product, till.clone());
        async move {
            let answer = client.order(i as usize, product, &body).await;
            if answer.created() {
                till.bought(&id, &id);
            }
            answer
        }
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let till = Cashier::close_shared(cashier).await?;
    let expired = expired_orders(db, buyers.product).await?;
    ensure!(
        run.outcomes.created > 0,
        "the expiry loop of `{}` bought nothing: {:?}",
        buyers.strategy,
        run.outcomes
    );
    settle(api, buyers).await?;
    Ok((run, till, expired, seconds))
}

/// Reserved orders of products other than `product` that are due, or fall due within
/// `within`: what the sweeps would expire ahead of `product`'s during a loop that long.
async fn due_elsewhere(db: &Db, product: u64, within: Duration) -> Result<u64> {
    const DUE: Sql = app::sql!(
        mysql: "SELECT COUNT(*) FROM orders WHERE state = 'reserved' AND product_id <> ? \
                AND pay_by <= NOW(6) + INTERVAL ? MICROSECOND",
        postgres: "SELECT COUNT(*) FROM orders WHERE state = 'reserved' AND product_id <> ? \
                   AND pay_by <= clock_timestamp() + INTERVAL '1 microsecond' * ?",
    );
    let (product, within) = (i64::try_from(product)?, i64::try_from(within.as_micros())?);
    let n: i64 = app::each_engine!(db, |pool, e| sqlx::query_scalar(e.sql(DUE))
        .bind(product)
        .bind(within)
        .fetch_one(pool)
        .await)
    .context("counting the other products' due orders")?;
    Ok(u64::try_from(n)?)
}

/// Orders of `product` that expired (their units back, or on their way).
async fn expired_orders(db: &Db, product: u64) -> Result<u64> {
    const EXPIRED: Sql = app::sql!(
        "SELECT COUNT(*) FROM orders WHERE product_id = ? AND state IN ('expired', 'expiring')"
    );
    let product_id = i64::try_from(product)?;
    let n: i64 = app::each_engine!(db, |pool, e| sqlx::query_scalar(e.sql(EXPIRED))
        .bind(product_id)
        .fetch_one(pool)
        .await)
    .with_context(|| format!("counting the expired orders of product {product}"))?;
    Ok(u64::try_from(n)?)
}

/// Every instance's counters of the seller's lock that returns take, added together.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct ReturnLockCounters {
    taken: f64,
    waited: f64,
    held: f64,
}

impl ReturnLockCounters {
    async fn read(api: &Api) -> ReturnLockCounters {
        ReturnLockCounters::of(&api.metrics().await)
    }

    /// The counters in `text`, every instance's `/metrics` one after the other.
    fn of(text: &str) -> ReturnLockCounters {
        ReturnLockCounters {
            taken: series_values(text, "seckill_return_locks_total").sum(),
            waited: series_values(text, "seckill_return_lock_wait_seconds_total").sum(),
            held: series_values(text, "seckill_return_lock_held_seconds_total").sum(),
        }
    }

    /// Adds to `into` what the counters grew by since `before` (nothing where one shrank: an
    /// instance restarted in between and its counters began again).
    fn add_since(&self, before: &ReturnLockCounters, into: &mut ReturnLockUse) {
        into.taken += (self.taken - before.taken).max(0.0).round() as u64;
        into.waited_seconds += (self.waited - before.waited).max(0.0);
        into.held_seconds += (self.held - before.held).max(0.0);
    }
}

/// The expiry phase, as the registry holds it.
pub struct Expiry;

impl Phase for Expiry {
    fn about(&self) -> About {
        About {
            name: NAME,
            label: "expiry sweep",
            needs: Needs {
                before_sale: false,
                deployable: true,
                products: 1,
                refusal_ceiling: false,
            },
        }
    }

    fn asked(&self, settings: &Settings) -> bool {
        shape(settings).is_some()
    }

    fn doing(&self, _: &Settings, _: &Measuring<'_>) -> String {
        "expiry sweep, with and without".to_string()
    }

    fn measure<'a>(&'a self, run: &'a Run<'a>, turn: Turn<'a>) -> Measured<'a> {
        Box::pin(measure_one(run, turn.strategy, turn.allotment))
    }

    fn judge(&self, report: &RunReport, findings: &mut Findings) {
        findings
            .phases
            .put(NAME, judge::misses(&report.each::<ExpiryCost>(NAME)));
    }

    fn section(&self, r: &RunReport) -> Section {
        section::section(
            shape(&r.settings),
            &r.each::<ExpiryCost>(NAME),
            found(&r.findings),
        )
    }

    fn went_wrong(&self, r: &RunReport) -> Option<String> {
        let misses = found(&r.findings);
        (!misses.is_empty()).then(|| section::went_wrong(misses))
    }

    fn readme(&self, r: &RunReport) -> Option<String> {
        section::readme(
            shape(&r.settings)?,
            &r.each::<ExpiryCost>(NAME),
            found(&r.findings),
        )
    }
}

/// The phase on one strategy, its loops' buyers on the allotment's product.
async fn measure_one(
    run: &Run<'_>,
    strategy: &Measuring<'_>,
    allotment: &Allotment,
) -> Result<Recorded> {
    let shape = shape(run.settings).context("the run has no expiry shape")?;
    let plan = ExpiryPlan {
        strategy: strategy.info,
        shape,
        buyers: strategy.looped()?.buyers(allotment),
    };
    let cost = run_expiry(run.api, run.db, &plan).await?;
    Ok(Recorded::new(cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_return_lock_counters_are_summed_over_every_instance_and_only_their_growth_counts() {
        let instance = |taken: u32, waited: f64, held: f64| {
            format!(
                "# TYPE seckill_return_locks_total counter\n\
                 seckill_return_locks_total {taken}\n\
                 seckill_return_lock_wait_seconds_total {waited}\n\
                 seckill_return_lock_held_seconds_total {held}\n\
                 seckill_return_locks_totally_unrelated 99\n"
            )
        };
        let before = ReturnLockCounters::of(&(instance(2, 0.5, 0.01) + &instance(1, 0.25, 0.02)));
        let after = ReturnLockCounters::of(&(instance(5, 1.5, 0.04) + &instance(4, 0.75, 0.11)));
        let mut used = ReturnLockUse::default();
        after.add_since(&before, &mut used);
        assert_eq!(used.taken, 6);
        assert!((used.waited_seconds - 1.5).abs() < 1e-9, "{used:?}");
        assert!((used.held_seconds - 0.12).abs() < 1e-9, "{used:?}");
        assert_eq!(used.held_ms_each().map(|ms| ms.round()), Some(20.0));
        // A restarted instance's counters start again from zero: no negative growth.
        let restarted = ReturnLockCounters::of(&instance(1, 0.1, 0.001));
        restarted.add_since(&after, &mut used);
        assert_eq!(used.taken, 6);
    }
}
