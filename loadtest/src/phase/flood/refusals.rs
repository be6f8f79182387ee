//! How cheap a refusal is once a product is sold out: purchases of the sold-out product in a
//! closed loop beside `GET /api/noop` in the same loop, on the same connections and client,
//! alternated [`ROUNDS`] times (which goes first alternating too); the medians.
//!
//! A flood that left units — a strategy that answered most of its crowd `busy` or `overloaded`
//! — has them bought first, by buyers who click until one of them is told `sold_out` (each
//! instance learns it so), so that every strategy's refusals are timed after a sell-out, as
//! a sale's would be once its last unit went. The buyers come in rounds, one buyer per unit
//! the product shows and a few more: a strategy that loses updates (`naive`) still shows units
//! once every buyer of a round holds one, and only new buyers, who hold none, can buy them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use app::api::{ErrorCode, Safety};
use testkit::{Api, Clicks, Crowd, user_id};

use super::crowd::FloodPlan;
use super::schema::RefusalRate;
use crate::analyse::spread::{combine, paired_percent};
use crate::drive::load::closed_loop;
use crate::measure::cashier::Cashier;
use crate::measure::refusals::refused;
use crate::schema::LoadResult;

/// How long the buyers of what a flood left keep trying before the product counts as never
/// sold out (its refusals are then not timed).
const PATIENCE: Duration = Duration::from_secs(120);
/// The same for a strategy meant to be unsafe, on which no bar is judged: one that loses
/// updates needs many more orders than units to empty its stock row, and would hold the run
/// for all of [`PATIENCE`].
const UNSAFE_PATIENCE: Duration = Duration::from_secs(30);
/// Rounds of refusals beside no-ops: a round of a second swings by a tenth or more on a
/// machine this size, and each round's refusals are set beside the no-ops of the same moment
/// before the median is taken. The median of five was steadier than that of three, but two
/// rounds more cost 6 s a strategy, nearly four minutes of the default run: three keep the
/// run under 75 minutes on two cores.
const ROUNDS: usize = 3;
/// A buyer's pause after an answer that bought nothing and did not say `sold_out`.
const PAUSE: Duration = Duration::from_millis(50);

/// The refusal rate of `plan`'s product, after selling the `left` units the flood left; `None`
/// when they could not be sold within [`PATIENCE`] ([`UNSAFE_PATIENCE`]).
pub async fn after_sold_out(
    api: &Api,
    plan: &FloodPlan<'_>,
    left: i64,
) -> Result<Option<RefusalRate>> {
    let sold_after_flood = match left > 0 {
        true => match sell_the_rest(api, plan, left).await? {
            Some(sold) => sold,
            None => return Ok(None),
        },
        false => 0,
    };
    let mut rate = refusal_rate(api, plan).await?;
    rate.sold_after_flood = sold_after_flood;
    Ok(Some(rate))
}

/// Sells what the flood left, in rounds of new buyers who pay at once, until one of them is
/// told `sold_out`: how many orders they placed, or `None` if the patience ran out first. A
/// round ends when every one of its buyers bought (they would hear only `limit_reached` from
/// then on); the next has one buyer per unit the product then shows, and a few more.
async fn sell_the_rest(api: &Api, plan: &FloodPlan<'_>, mut left: i64) -> Result<Option<u64>> {
    let began = Instant::now();
    let (mut sold, mut round) = (0, 0);
    let whole = match plan.strategy.safety {
        Safety::Unsafe => UNSAFE_PATIENCE,
        _ => PATIENCE,
    };
    loop {
        let Some(patience) = whole.checked_sub(began.elapsed()) else {
            return Ok(None);
        };
        // One buyer per unit left and a few more: the product sells one per customer.
        let buyers = usize::try_from(left.max(0))? + 16;
        let prefix = format!("{}-rest-{round}", plan.id_prefix);
        let clicks = Clicks::UntilSoldOut {
            pause: PAUSE,
            patience,
        };
        // They pay at once: an unpaid order would give its unit back at its deadline, and
        // the product, on sale again, would be forgotten as sold out by every instance.
        let cashier = Arc::new(Cashier::open(api, plan.product, plan.seed, 0.0, PATIENCE));
        let till = cashier.clone();
        let users = prefix.clone();
        let sale = Crowd::new(buyers, clicks, plan.strategy.name, &prefix)
            .users(&prefix)
            .watched(move |click| till.win(click, &user_id(&users, click.buyer)))
            .start(api, plan.product);
        while !sale.sold_out() && sale.placed() < buyers && sale.elapsed() < patience {
            tokio::time::sleep(PAUSE).await;
        }
        let answers = sale.stop().await;
        Cashier::close_shared(cashier).await?;
        sold += answers.created() as u64;
        if answers.refused(ErrorCode::SoldOut) > 0 {
            return Ok(Some(sold));
        }
        left = api.product(plan.product).await?.stock;
        round += 1;
    }
}

/// Refusals of the sold-out product per second beside `GET /api/noop`, each in a closed loop
/// of the same connections and client, alternated [`ROUNDS`] times (which goes first
/// alternating too); the medians.
async fn refusal_rate(api: &Api, plan: &FloodPlan<'_>) -> Result<RefusalRate> {
    let (mut refusals, mut noops) = (Vec::new(), Vec::new());
    let (connections, window) = (plan.refusal_connections, plan.refusal_window);
    for round in 0..ROUNDS {
        let prefix = format!("{}-after-{round}", plan.id_prefix);
        let (product, strategy) = (plan.product, plan.strategy.name);
        let refused = || refused(api, product, strategy, &prefix, connections, window);
        let a = api.clone();
        let noop = move || {
            closed_loop(connections, window, move |i| {
                let a = a.clone();
                async move { a.noop(i as usize).await }
            })
        };
        if round % 2 == 0 {
            refusals.push(refused().await?);
            noops.push(noop().await);
        } else {
            noops.push(noop().await);
            refusals.push(refused().await?);
        }
    }
    let rate = |runs: &[LoadResult]| runs.iter().map(|r| r.attempts_per_sec).collect::<Vec<_>>();
    let paired_percent = paired_percent(&rate(&refusals), &rate(&noops));
    let median = |runs| combine(runs).map_or(0.0, |run| run.attempts_per_sec);
    Ok(RefusalRate {
        refusals_per_second: median(refusals),
        noop_per_second: median(noops),
        connections,
        sold_after_flood: 0,
        rounds: ROUNDS,
        paired_percent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusals_share_is_the_median_of_each_rounds_own_ratio_not_of_medians_far_apart() {
        // The machine ran twice as fast in the second round: both kinds doubled alike.
        let refusals = [70.0, 140.0, 75.0];
        let noops = [100.0, 200.0, 95.0];
        let paired = paired_percent(&refusals, &noops).unwrap();
        assert!((paired - 70.0).abs() < 1e-9, "{paired}");
        // The medians' quotient mixes rounds: 75 of the third over 100 of the first.
        let rate = RefusalRate {
            refusals_per_second: 75.0,
            noop_per_second: 100.0,
            connections: 2,
            sold_after_flood: 0,
            rounds: 3,
            paired_percent: Some(paired),
        };
        assert!((rate.percent_of_noop() - 70.0).abs() < 1e-9);
        let unpaired = RefusalRate {
            paired_percent: None,
            ..rate
        };
        assert!((unpaired.percent_of_noop() - 75.0).abs() < 1e-9);
        assert_eq!(paired_percent(&[10.0], &[0.0]), None);
    }
}
