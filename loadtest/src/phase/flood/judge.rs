//! The flood's bars, judged once into the findings: the fastest safe strategy answers the
//! whole flood within [`FLOOD_BAR`] times what the same crowd asking `GET /api/noop` takes,
//! and every safe strategy that sold out refuses the rest at [`REFUSAL_BAR_PERCENT`] of the
//! no-op rate or more. A refusal's miss carries HTTP's floor of the same run: the share of
//! the no-op that a refusal with nothing of the service behind it reached. The same crowd sold
//! first come, first served: the first clicks bought, in order, and no unit was lost.

use app::api::Safety;

use super::schema::{CrowdResult, FloodMiss, FloodResult};
use crate::schema::{Baseline, BaselineName, Of};

/// The fastest safe strategy's time until every click was answered, over the no-op flood's.
pub const FLOOD_BAR: f64 = 2.0;
/// Refusals per second once sold out, as a share of `GET /api/noop`'s in the same loop.
pub const REFUSAL_BAR_PERCENT: f64 = 80.0;

/// HTTP's own refusal as a share of its own no-op, in percent, when both were measured: the
/// median of each round's ratio where the run recorded it (as the flood's refusals are
/// judged), else the quotient of their medians.
pub fn http_floor_percent(baselines: &[Baseline]) -> Option<f64> {
    let paired = baselines
        .iter()
        .find(|b| b.name == BaselineName::HttpFloorRefusal)
        .and_then(|b| b.paired_percent);
    if paired.is_some() {
        return paired;
    }
    let rate = |name| {
        let b = baselines.iter().find(|b| b.name == name)?;
        Some(b.result.attempts_per_sec).filter(|r| *r > 0.0)
    };
    let noop = rate(BaselineName::HttpFloorNoop)?;
    Some(100.0 * rate(BaselineName::HttpFloorRefusal)? / noop)
}

/// How many safe strategies of `floods` refused the sold-out product at the bar's share of the
/// no-op or more.
pub fn refusals_at_bar(floods: &[Of<'_, FloodResult>]) -> usize {
    (floods.iter())
        .filter(|f| f.strategy.safety == Safety::Safe)
        .filter_map(|f| f.after_sold_out)
        .filter(|rate| rate.percent_of_noop() >= REFUSAL_BAR_PERCENT)
        .count()
}

/// The bars `floods` missed; `http_floor_percent` (see [`http_floor_percent`]) goes with each
/// refusal's miss. The fastest safe strategy is the one with the least time over its own
/// no-op flood (each timed right after its flood, so the machine's moment is shared).
pub fn misses(floods: &[Of<'_, FloodResult>], http_floor_percent: Option<f64>) -> Vec<FloodMiss> {
    let safe = || floods.iter().filter(|f| f.strategy.safety == Safety::Safe);
    let mut misses = Vec::new();
    let fastest = safe()
        .filter_map(|f| Some((f, f.answered_over_noop()?)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((f, ratio)) = fastest
        && ratio > FLOOD_BAR
        && let Some(noop) = f.noop_flood
    {
        misses.push(FloodMiss::SlowFlood {
            strategy: f.strategy.name,
            answered_ms: f.crowd.all_answered_after_ms,
            noop_answered_ms: noop.all_answered_after_ms,
            bar_ratio: FLOOD_BAR,
        });
    }
    for f in safe() {
        if let Some(rate) = f.after_sold_out
            && rate.percent_of_noop() < REFUSAL_BAR_PERCENT
        {
            misses.push(FloodMiss::CostlyRefusals {
                strategy: f.strategy.name,
                percent_of_noop: rate.percent_of_noop(),
                bar_percent: REFUSAL_BAR_PERCENT,
                http_floor_percent,
            });
        }
    }
    misses
}

/// A flood sold first come, first served keeps its promise when the first clicks bought, in
/// the order they were sent, and nothing was oversold, sold past the limit or stranded.
/// Of the first clicks (as many as the units), the share that must buy.
pub const FIRST_CLICKS_BAR: f64 = 0.9;
/// The rank correlation between sending early and buying, as a share of the attainable, that
/// must be reached.
pub const RANK_SHARE_BAR: f64 = 0.9;

/// What a first-come flood missed, in words (empty: every bar met).
pub fn first_come_misses(f: &CrowdResult) -> Vec<String> {
    let mut missed = Vec::new();
    if f.fairness.first_clicks_won < FIRST_CLICKS_BAR {
        missed.push(format!(
            "{:.0}% of the first clicks bought (bar {:.0}%)",
            100.0 * f.fairness.first_clicks_won,
            100.0 * FIRST_CLICKS_BAR
        ));
    }
    match f.fairness.correlation_share() {
        Some(share) if share >= RANK_SHARE_BAR => {}
        Some(share) => missed.push(format!(
            "rank {share:.2} of the attainable (bar {RANK_SHARE_BAR:.2})"
        )),
        None => missed.push("no rank correlation (nobody bought, or everybody)".into()),
    }
    let a = &f.accounting;
    for (what, units) in [
        ("oversold", a.oversell),
        ("beyond the limit", f.beyond_limit),
        ("stranded", a.stranded),
    ] {
        if units != 0 {
            missed.push(format!("{units} unit(s) {what}"));
        }
    }
    missed
}

#[cfg(test)]
mod tests {
    use app::api::Strategy;

    use super::super::schema::Fairness;
    use super::super::schema::sample::flood;
    use super::*;

    #[test]
    fn the_fastest_safe_strategy_beyond_twice_the_noop_flood_misses_the_bar() {
        let floods = [
            flood(Strategy::Conditional, 3_000.0, 1_000.0, 90.0),
            flood(Strategy::Batched, 2_500.0, 1_000.0, 90.0),
        ];
        assert_eq!(
            misses(&crate::sample::of(&floods), None),
            [FloodMiss::SlowFlood {
                strategy: Strategy::Batched,
                answered_ms: 2_500.0,
                noop_answered_ms: 1_000.0,
                bar_ratio: FLOOD_BAR,
            }]
        );
    }

    #[test]
    fn only_the_fastest_safe_strategy_is_held_to_the_flood_bar() {
        let floods = [
            flood(Strategy::Conditional, 5_000.0, 1_000.0, 90.0),
            flood(Strategy::Batched, 1_900.0, 1_000.0, 90.0),
            // Unsafe: not a candidate for the fastest, however fast.
            flood(Strategy::Naive, 1_000.0, 1_000.0, 90.0),
        ];
        assert_eq!(misses(&crate::sample::of(&floods), None), []);
        let unsafe_only = [flood(Strategy::Naive, 9_000.0, 1_000.0, 10.0)];
        assert_eq!(misses(&crate::sample::of(&unsafe_only), None), []);
    }

    #[test]
    fn a_safe_strategy_refusing_below_the_share_of_noop_misses_the_refusal_bar() {
        let mut not_sold_out = flood(Strategy::Sharded, 1_500.0, 1_000.0, 10.0);
        not_sold_out.after_sold_out = None;
        let floods = [
            flood(Strategy::Batched, 1_500.0, 1_000.0, 63.0),
            flood(Strategy::RedisLua, 1_500.0, 1_000.0, 85.0),
            not_sold_out,
        ];
        assert_eq!(
            misses(&crate::sample::of(&floods), None),
            [FloodMiss::CostlyRefusals {
                strategy: Strategy::Batched,
                percent_of_noop: 63.0,
                bar_percent: REFUSAL_BAR_PERCENT,
                http_floor_percent: None,
            }]
        );
        assert_eq!(
            refusals_at_bar(&crate::sample::of(&floods)),
            1,
            "`redis-lua`'s 85%"
        );
    }

    #[test]
    fn a_refusals_miss_carries_the_share_a_refusal_with_nothing_behind_it_reached() {
        let baseline = |name, rate| {
            let mut b = crate::sample::baseline();
            b.name = name;
            b.result.attempts_per_sec = rate;
            b
        };
        let baselines = [
            baseline(BaselineName::HttpNoop, 900.0),
            baseline(BaselineName::HttpFloorNoop, 1_000.0),
            baseline(BaselineName::HttpFloorRefusal, 720.0),
        ];
        let floor = http_floor_percent(&baselines).unwrap();
        assert!((floor - 72.0).abs() < 1e-9, "{floor}");
        let floods = [flood(Strategy::Batched, 1_500.0, 1_000.0, 70.0)];
        let found = misses(&crate::sample::of(&floods), Some(floor));
        let [
            FloodMiss::CostlyRefusals {
                http_floor_percent: carried,
                ..
            },
        ] = found.as_slice()
        else {
            panic!("one refusal miss expected");
        };
        assert_eq!(*carried, Some(floor));
        assert_eq!(http_floor_percent(&baselines[..2]), None);
    }

    #[test]
    fn the_floor_is_the_median_of_its_rounds_own_ratios_where_the_run_recorded_them() {
        let mut refusal = crate::sample::baseline();
        refusal.name = BaselineName::HttpFloorRefusal;
        refusal.result.attempts_per_sec = 720.0;
        refusal.paired_percent = Some(81.5);
        let mut noop = crate::sample::baseline();
        noop.name = BaselineName::HttpFloorNoop;
        noop.result.attempts_per_sec = 1_000.0;
        // The medians' quotient (72%) mixes rounds; the paired share is what the run judged by.
        let floor = http_floor_percent(&[noop, refusal]).unwrap();
        assert!((floor - 81.5).abs() < 1e-9, "{floor}");
    }

    fn first_come(first_clicks_won: f64, rank: f64, oversell: i64) -> CrowdResult {
        let mut f = super::super::schema::sample::first_come_flood();
        f.fairness = Fairness {
            first_clicks_won,
            earliness_rank_correlation: Some(rank),
            attainable_correlation: Some(0.4),
        };
        f.accounting.oversell = oversell;
        f
    }

    #[test]
    fn a_first_come_flood_meets_its_bars_only_with_the_first_clicks_served_in_order_and_no_unit_lost()
     {
        assert!(first_come_misses(&first_come(0.95, 0.38, 0)).is_empty());
        assert_eq!(
            first_come_misses(&first_come(0.5, 0.38, 0)).len(),
            1,
            "first clicks"
        );
        assert_eq!(
            first_come_misses(&first_come(0.95, 0.2, 0)).len(),
            1,
            "rank, 0.5 of the attainable"
        );
        assert_eq!(
            first_come_misses(&first_come(0.95, 0.38, 1)).len(),
            1,
            "oversold"
        );
    }
}
