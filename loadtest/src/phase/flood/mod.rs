//! The flood: one product, a per-user limit of one, a sale that opens at a set moment, and a
//! crowd that arrives as `arrivals` draws it. Then the stock's home and the orders say what
//! happened ([`app::accounting`]), the answers say what the buyers saw and when; with a payment
//! window, a second act (`resale`) lets the unpaid orders expire, one app instance killed in
//! the middle, and the units go back on sale; and — the product sold out — refusals are timed
//! beside `GET /api/noop` (`refusals`). Last, the same crowd asks `GET /api/noop` instead of
//! buying: what the HTTP stack alone takes to answer that flood; and, when asked, buys again a
//! product sold first come, first served (`first_come`).
//!
//! It is measured before the sale, for every strategy before any is sold, and alone in
//! `seckill-bench flood`. Its figures and shape are in [`schema`], its bars in [`judge`], its
//! section of the report and its charts in [`section`].

mod arrivals;
mod crowd;
mod figures;
mod first_come;
pub mod judge;
mod refusals;
mod resale;
pub mod schema;
pub mod section;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use app::api::ResetProduct;
use app::db::Db;
use testkit::{Answer, Api, Apps, Crowd, Retry};

use super::{About, Measured, Measuring, Needs, Phase, Recorded, Run, Turn};
use crate::live::Update;
use crate::measure::cashier::Cashier;
use crate::measure::cpu::Sampler;
use crate::measure::sale::read_ledger;
use crate::report::charts::Chart;
use crate::report::section::Section;
use crate::schema::{Findings, RunReport, Settings};
use crowd::{FloodPlan, sell_after_early_clicks};
use figures::ms_from;
use schema::{Kind, NoopFlood};

pub use schema::{FloodMiss, FloodResult, FloodShape};

/// Its name: in the report, the settings, the findings and the errors.
pub const NAME: &str = "flood";

/// The shape the run asked of it; `None`: not asked.
pub fn shape(settings: &Settings) -> Option<&FloodShape> {
    settings.phases.get(NAME)
}

/// The bars the run's floods missed.
pub fn found(findings: &Findings) -> &[FloodMiss] {
    findings.phases.list(NAME)
}

/// The flood, as the registry holds it.
pub struct Flood;

impl Phase for Flood {
    fn about(&self) -> About {
        About {
            name: NAME,
            label: "flood",
            needs: Needs {
                before_sale: true,
                deployable: false,
                // A second product for the same crowd sold first come, when asked for.
                products: 2,
                refusal_ceiling: false,
            },
        }
    }

    fn asked(&self, settings: &Settings) -> bool {
        shape(settings).is_some()
    }

    fn doing(&self, _: &Settings, _: &Measuring<'_>) -> String {
        "flood".to_owned()
    }

    fn measure<'a>(&'a self, run: &'a Run<'a>, turn: Turn<'a>) -> Measured<'a> {
        Box::pin(async move {
            let shape = shape(run.settings).context("the run has no flood shape")?;
            let plan = FloodPlan {
                product: turn.allotment.product(),
                first_come_product: shape.first_come.then(|| turn.allotment.product() + 1),
                strategy: turn.strategy.info,
                shape,
                seed: turn.strategy.place as u64,
                id_prefix: turn.allotment.prefix.clone(),
                refusal_window: crate::measure::refusals::window(run.settings.quick),
                refusal_connections: run.settings.buyers,
                feed: run.feed.clone(),
            };
            let flood = run_flood(run.api, run.db, turn.sampler, &plan, turn.instances).await?;
            Ok(Recorded::new(flood))
        })
    }

    fn judge(&self, report: &RunReport, findings: &mut Findings) {
        let floods = report.each::<FloodResult>(NAME);
        let floor = judge::http_floor_percent(&report.baselines);
        findings.phases.put(NAME, judge::misses(&floods, floor));
    }

    fn section(&self, r: &RunReport) -> Section {
        section::section(
            shape(&r.settings),
            &r.each::<FloodResult>(NAME),
            found(&r.findings),
        )
    }

    fn charts(&self, r: &RunReport) -> Result<Vec<Chart>> {
        section::chart::all(&r.each::<FloodResult>(NAME))
    }

    /// Its misses are worded in its own section, beside the table that shows them.
    fn went_wrong(&self, _: &RunReport) -> Option<String> {
        None
    }

    fn shape_words(&self, settings: &Settings) -> Option<String> {
        shape(settings).map(|s| format!("{} people for {} units", s.users, s.units))
    }
}

/// Runs one flood and reads what it did.
async fn run_flood(
    api: &Api,
    db: &Db,
    sampler: &Sampler,
    plan: &FloodPlan<'_>,
    apps: &mut Apps,
) -> Result<FloodResult> {
    let shape = plan.shape;
    let drawn = arrivals::plan(shape, plan.seed);
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
    let after_sold_out = refusals::after_sold_out(api, plan, left).await?;
    let noop_flood = noop_flood(api, plan, drawn.arrivals.clone(), drawn.opens_after).await;
    let first_come = match plan.first_come_product {
        Some(product) => Some(first_come::flood(api, db, plan, product, &drawn).await?),
        None => None,
    };
    Ok(FloodResult {
        crowd: answered,
        early_clicks: drawn.count(Kind::Early),
        shared_account_clicks: drawn.count(Kind::SharedAccount),
        timeline: figures::timeline(&answers.clicks, opened, shape.units),
        resale,
        projection: figures::projection(&cpu),
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
