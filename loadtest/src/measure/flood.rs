//! The flood: one product, a per-user limit of one, a sale that opens at a set moment, and a
//! crowd that arrives as [`crate::drive::flood`] draws it. Then the stock's home and the
//! orders say what happened ([`app::accounting`]), the answers say what the buyers saw and
//! when, and — the product sold out — refusals are timed beside `GET /api/noop`
//! ([`crate::measure::refusals`]). Last, the
//! same crowd asks `GET /api/noop` instead of buying: what the HTTP stack alone takes to
//! answer that flood.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use app::api::ResetProduct;
use app::db::Db;
use testkit::{Answer, Api, Apps, Crowd, Retry};

use crate::analyse::flood::{self as analyse, ms_from};
use crate::drive::flood as drive;
use crate::live::Update;
use crate::measure::cashier::Cashier;
use crate::measure::cpu::Sampler;
use crate::measure::crowd::{self, FloodPlan, sell_after_early_clicks};
use crate::measure::first_come;
use crate::measure::refusals;
use crate::measure::resale;
use crate::measure::sale::read_ledger;
use crate::schema::Kind;
use crate::schema::{FloodResult, NoopFlood};

/// Runs one flood and reads what it did.
pub async fn run_flood(
    api: &Api,
    db: &Db,
    sampler: &Sampler,
    plan: &FloodPlan<'_>,
    apps: Option<&mut Apps>,
) -> Result<FloodResult> {
    let shape = plan.shape;
    let drawn = drive::plan(shape, plan.seed);
    let home = plan.strategy.name.home();
    let rules = ResetProduct {
        per_user_limit: Some(1),
        payment_window_ms: (shape.payment_window_ms > 0).then_some(shape.payment_window_ms as i64),
        ..ResetProduct::new(shape.units, home)
    };
    let before = sampler.sample();
    plan.feed.send(Update::Sale {
        strategy: plan.strategy.name,
        stock: shape.units,
        requests: drawn.arrivals.len() as u64,
    });
    let mut crowd = Crowd::arriving(drawn.arrivals.clone(), plan.strategy.name, &plan.id_prefix);
    let second_act = shape.payment_window_ms > 0;
    let cashier = second_act.then(|| {
        let window = Duration::from_millis(shape.payment_window_ms);
        Arc::new(Cashier::open(
            api,
            plan.product,
            plan.seed,
            shape.non_payer_share,
            window,
        ))
    });
    if plan.feed.is_on() || second_act {
        let (feed, cashier) = (plan.feed.clone(), cashier.clone());
        let users: Arc<[String]> = drawn.arrivals.iter().map(|a| a.user.clone()).collect();
        crowd = crowd.watched(move |click| {
            feed.answer(&click.answer, click.answered - click.sent);
            if let Some(cashier) = &cashier {
                cashier.win(click, &users[click.buyer]);
            }
        });
    }
    if shape.retries > 0 {
        crowd = crowd.retrying(Retry {
            when: |a| matches!(a, Answer::Refused { status: 503, .. }),
            times: shape.retries,
            pause: Duration::from_secs(1),
            jitter: Duration::from_secs(3),
        });
    }
    let (answers, opening) =
        sell_after_early_clicks(api, plan.product, &rules, crowd, &drawn).await?;
    let opened = answers.opened.context("the flood's sale opened")?;
    let mut span = sampler.between(&before, &sampler.sample());
    span.successes = answers.clicks.len() as f64;
    let cpu = span.usage(&sampler.processes);

    // The books of the clicks, read when no unit is on its way back: an unpaid order may be
    // expiring already, its unit between the order and the counter for a moment.
    let mut ledger = read_ledger(api, db, plan.product, home).await?.0;
    for _ in 0..RETURNING_READS {
        if ledger.returning == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        ledger = read_ledger(api, db, plan.product, home).await?.0;
    }
    // Its units beyond the limit counted before the second act, whose buyers are others.
    let answered = crowd::result(
        db,
        plan.product,
        shape.units,
        &drawn,
        &answers,
        opened,
        ledger,
    )
    .await?;
    plan.feed.send(Update::SaleDone {
        strategy: plan.strategy.name,
        accounting: answered.accounting,
        outcomes: Box::new(answered.outcomes.clone()),
    });
    let resale = match cashier {
        Some(cashier) => Some(
            resale::second_act(
                api,
                apps,
                plan.product,
                shape,
                &drawn,
                &answers,
                Arc::into_inner(cashier).context("the crowd kept its cashier")?,
                opening,
                plan.strategy.name,
                &plan.id_prefix,
            )
            .await?,
        ),
        None => None,
    };
    // Not sold out (after the second act, when there was one), the loop would time purchases
    // that buy, not refusals: what is left is sold first.
    let left = resale.map_or(answered.accounting.final_stock, |r| r.left);
    let after_sold_out = match plan.refusal_window {
        Some(window) => refusals::after_sold_out(api, plan, window, left).await?,
        None => None,
    };
    let noop_flood = noop_flood(api, plan, drawn.arrivals.clone(), drawn.opens_after).await;
    let first_come = match plan.first_come_product {
        Some(product) => Some(first_come::flood(api, db, plan, product, &drawn).await?),
        None => None,
    };
    Ok(FloodResult {
        crowd: answered,
        early_clicks: drawn.count(Kind::Early),
        shared_account_clicks: drawn.count(Kind::SharedAccount),
        timeline: analyse::timeline(&answers.clicks, opened, shape.units),
        resale,
        projection: analyse::projection(&cpu),
        cpu: Some(cpu),
        after_sold_out,
        noop_flood: Some(noop_flood),
        first_come,
    })
}

/// The flood's crowd, arriving as it did, asking `GET /api/noop` through the same instances
/// and client.
async fn noop_flood(
    api: &Api,
    plan: &FloodPlan<'_>,
    arrivals: Vec<testkit::Arrival>,
    opens_after: Duration,
) -> NoopFlood {
    let prefix = format!("{}-noop", plan.id_prefix);
    let answers = Crowd::arriving(arrivals, plan.strategy.name, &prefix)
        .asking_noop()
        .run(api, plan.product)
        .await;
    NoopFlood {
        clicks: answers.clicks.len() as u64,
        served: (answers.clicks.iter())
            .filter(|c| matches!(c.answer, Answer::Served { .. }))
            .count() as u64,
        all_answered_after_ms: ms_from(opens_after, answers.elapsed),
    }
}

/// Reads of the books, at most, while units are on their way back (a return takes
/// milliseconds; one a crash left half-way stays, and is counted as stranded).
const RETURNING_READS: u32 = 100;
