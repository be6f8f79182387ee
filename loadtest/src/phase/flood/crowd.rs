//! What the floods of a crowd share — the random door's flood (`flood.rs`), its first-come
//! sending (`first_come.rs`) and the refusals timed once sold out (`refusals.rs`): the plan, the
//! lead before the opening, the answers' latencies, the units beyond the per-user limit, and
//! what a crowd's clicks got ([`result`]).

use std::time::Duration;

use anyhow::{Context, Result};
use app::accounting::{Accounting, Ledger};
use app::api::{ResetProduct, StrategyInfo};
use app::db::Db;
use app::db::engine::Sql;
use testkit::{Answer, Answers, Api, Crowd};
use tokio::time::Instant;

use super::arrivals::Plan;
use super::figures::{self as analyse, ms_from};
use super::schema::{CrowdResult, FloodShape, Kind};
use crate::drive::latency::Latencies;
use crate::drive::load::Window;
use crate::live::Feed;
use crate::schema::LatencySummary;

/// How long the sale's opening is set ahead of the moment it is written: time to write it
/// through every instance before it comes.
pub const LEAD: Duration = Duration::from_millis(500);

/// How far off the opening is while the early clicks are answered: never reached.
const NOT_YET: time::Duration = time::Duration::days(1);

/// Sends `crowd`, arriving as `drawn` says, to `product` sold by `rules`, and opens the sale
/// after its early clicks: the product is written first with its opening a day off, so that
/// each early click is refused `sale_not_started` however late the machine sends it; once
/// every one has its answer (and no sooner than `drawn.opens_after` into the crowd), the
/// opening is written [`LEAD`] ahead through every instance, and the rest of the crowd is sent
/// on the opening's clock. The answers say when, from the crowd's start, the sale opened; the
/// instant is returned beside them.
pub async fn sell_after_early_clicks(
    api: &Api,
    product: u64,
    rules: &ResetProduct,
    crowd: Crowd,
    drawn: &Plan,
) -> Result<(Answers, std::time::Instant)> {
    let far = time::OffsetDateTime::now_utc() + NOT_YET;
    let closed = ResetProduct {
        sale_starts_at: Some(far),
        ..*rules
    };
    api.put_product(product, &closed).await?;
    let early = drawn.count(Kind::Early) as usize;
    let sale = crowd.opening(early, drawn.opens_after).start(api, product);
    sale.ahead_answered().await;
    let lead = LEAD.max(drawn.opens_after.saturating_sub(sale.elapsed()));
    let (opens, opens_at) = (
        time::OffsetDateTime::now_utc() + lead,
        Instant::now() + lead,
    );
    let open = ResetProduct {
        sale_starts_at: Some(opens),
        ..*rules
    };
    // Written through every instance, none remembers the opening a day off when the rest of
    // the crowd comes.
    api.put_product_through_each(product, &open).await?;
    sale.open(opens_at);
    Ok((sale.finish().await, opens_at.into_std()))
}

/// One strategy's flood of `product`.
pub struct FloodPlan<'a> {
    pub product: u64,
    pub strategy: &'a StrategyInfo,
    pub shape: &'a FloodShape,
    pub seed: u64,
    pub id_prefix: String,
    /// The closed loops that time refusals once sold out.
    pub refusal_window: Window,
    pub refusal_connections: usize,
    /// The live page: the flood is a sale on it, every click an answer.
    pub feed: Feed,
    /// Where the crowd is sent again, the product sold first come, first served (`None`: not
    /// sent again).
    pub first_come_product: Option<u64>,
}

/// What the clicks of the crowd `drawn` got from `product`, `units` on sale one per customer
/// and opened `opened` into the crowd: the answers, and the books as `ledger` read them once
/// the clicks were answered. Each person wants one unit: the shared account is one person,
/// however many bots.
pub async fn result(
    db: &Db,
    product: u64,
    units: i64,
    drawn: &Plan,
    answers: &Answers,
    opened: Duration,
    ledger: Ledger,
) -> Result<CrowdResult> {
    let (winners, refused) = latencies(&answers.clicks);
    Ok(CrowdResult {
        clicks: answers.clicks.len() as u64,
        outcomes: answers.outcomes(),
        accounting: Accounting::of(ledger, drawn.people() as i64),
        beyond_limit: beyond_limit(db, product, 1).await?,
        sold_out_after_ms: analyse::sold_out_after(&answers.clicks, opened, units),
        all_answered_after_ms: ms_from(opened, answers.elapsed),
        winners,
        refused,
        fairness: analyse::fairness(&answers.clicks, &drawn.kinds, units),
    })
}

/// The latency of the clicks that bought, and of those refused, from the send.
fn latencies(clicks: &[testkit::Click]) -> (LatencySummary, LatencySummary) {
    let (mut winners, mut refused) = (Latencies::default(), Latencies::default());
    for click in clicks {
        let latency = click.answered - click.sent;
        if click.answer.created() {
            winners.record(latency);
        } else if matches!(click.answer, Answer::Refused { .. }) {
            refused.record(latency);
        }
    }
    (winners.summary(), refused.summary())
}

/// Units buyers of `product` held beyond `limit` at once, summed over orders, from the
/// orders: each order counts the units its buyer already held when it was placed — every
/// earlier order not voided and not yet back home (an expired or cancelled order stops holding
/// when its units returned, and its buyer's quota with them: buying again after that is
/// within the limit).
pub async fn beyond_limit(db: &Db, product: u64, limit: i64) -> Result<i64> {
    /// The count in a whole-number type of each engine (MariaDB's `SUM` is a decimal).
    macro_rules! beyond {
        ($whole:literal) => {
            concat!(
                "SELECT CAST(SUM(LEAST(quantity, GREATEST(0, quantity + held - ?))) AS ",
                $whole,
                ") FROM (SELECT o.quantity, (SELECT COALESCE(SUM(a.quantity), 0) FROM orders a \
                   WHERE a.product_id = o.product_id AND a.user_id = o.user_id \
                     AND a.state <> 'voided' \
                     AND (a.created_at < o.created_at \
                          OR (a.created_at = o.created_at AND a.id < o.id)) \
                     AND NOT (a.state IN ('expired', 'cancelled') \
                              AND COALESCE(a.returned_at, a.ended_at) <= o.created_at)) AS held \
                 FROM orders o WHERE o.product_id = ? AND o.state <> 'voided') AS placed"
            )
        };
    }
    const BEYOND: Sql = app::sql!(mysql: beyond!("SIGNED"), postgres: beyond!("BIGINT"));
    let product = i64::try_from(product)?;
    let beyond: Option<i64> = app::each_engine!(db, |pool, e| sqlx::query_scalar(e.sql(BEYOND))
        .bind(limit)
        .bind(product)
        .fetch_one(pool)
        .await)
    .context("counting units beyond the per-user limit")?;
    Ok(beyond.unwrap_or(0))
}
