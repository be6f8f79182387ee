//! What a flood's answers say: its timeline by kind of answer, when it sold out, whether the
//! first to click were the first served, and the cores a bigger flood would take.

use std::time::Duration;

use app::api::ErrorCode;
use testkit::{Answer, Click};

use super::schema::{Fairness, FloodSlice, Kind, PROJECTED_CLICKS_PER_SECOND, Projection};
use crate::analyse::reproduce::spearman;
use crate::schema::{CpuUse, GROUPS};

/// A timeline slice's width.
pub const SLICE: Duration = Duration::from_millis(100);

/// The column of the timeline an answer counts in.
fn column(answer: &Answer) -> fn(&mut FloodSlice) -> &mut u64 {
    match answer {
        Answer::Created { .. } | Answer::Replayed { .. } => |s| &mut s.bought,
        Answer::Refused { code, .. } => match code {
            ErrorCode::SoldOut => |s| &mut s.sold_out,
            ErrorCode::LimitReached
            | ErrorCode::SaleNotStarted
            | ErrorCode::SaleEnded
            | ErrorCode::PurchaseTokenRequired
            | ErrorCode::PurchaseTokenMismatch
            | ErrorCode::PurchaseTokenExpired => |s| &mut s.rules,
            ErrorCode::Overloaded
            | ErrorCode::RateLimited
            | ErrorCode::Busy
            | ErrorCode::BackendUnavailable => |s| &mut s.shed,
            _ => |s| &mut s.failed,
        },
        _ => |s| &mut s.failed,
    }
}

/// Answers per [`SLICE`] by answer time; `opens_after` is where, from the crowd's start, the
/// sale opened, and slices are cut and labelled from it (the first begins at or before the
/// crowd's start).
pub fn timeline(clicks: &[Click], opens_after: Duration, units: i64) -> Vec<FloodSlice> {
    let Some(last) = clicks.iter().map(|c| c.answered).max() else {
        return Vec::new();
    };
    let slice = SLICE.as_nanos();
    // Slices before the opening, and the first slice's start before the crowd's.
    let before = opens_after.as_nanos().div_ceil(slice);
    let shift = before * slice - opens_after.as_nanos();
    let index = |t: Duration| ((t.as_nanos() + shift) / slice) as usize;
    let slices = index(last) + 1;
    let mut timeline: Vec<FloodSlice> = (0..slices)
        .map(|i| FloodSlice {
            from_ms: (i as i64 - before as i64) * SLICE.as_millis() as i64,
            bought: 0,
            sold_out: 0,
            rules: 0,
            shed: 0,
            failed: 0,
            units_left: units,
        })
        .collect();
    for click in clicks {
        *column(&click.answer)(&mut timeline[index(click.answered)]) += 1;
    }
    let mut left = units;
    for slice in &mut timeline {
        left -= slice.bought as i64;
        slice.units_left = left;
    }
    timeline
}

/// When the answer that sold the last unit came, from the opening: the last purchase, if the
/// purchases reached the stock.
pub fn sold_out_after(clicks: &[Click], opens_after: Duration, units: i64) -> Option<f64> {
    let bought: Vec<Duration> = (clicks.iter())
        .filter(|c| c.answer.created())
        .map(|c| c.answered)
        .collect();
    (bought.len() as i64 >= units).then(|| {
        let last = bought.iter().max().copied().unwrap_or_default();
        ms_from(opens_after, last)
    })
}

/// `t` (from the crowd's start) in ms from the opening.
pub fn ms_from(opens_after: Duration, t: Duration) -> f64 {
    (t.as_micros() as f64 - opens_after.as_micros() as f64) / 1000.0
}

/// Fairness over the regular clicks (the first click of each regular user), in send order.
pub fn fairness(clicks: &[Click], kinds: &[Kind], units: i64) -> Fairness {
    let mut regular: Vec<&Click> = (clicks.iter())
        .filter(|c| kinds[c.buyer] == Kind::Regular)
        .collect();
    regular.sort_by_key(|c| c.buyer);
    let first = regular.iter().take(units.max(0) as usize);
    let taken = first.clone().count().max(1);
    let won = first.filter(|c| c.answer.created()).count();
    // Earliness: the first sent ranks highest.
    let earliness: Vec<f64> = (0..regular.len()).map(|i| -(i as f64)).collect();
    let bought: Vec<f64> = (regular.iter())
        .map(|c| f64::from(u8::from(c.answer.created())))
        .collect();
    // As many bought, the first ones sent: first come, first served.
    let winners = bought.iter().filter(|b| **b > 0.0).count();
    let first_served: Vec<f64> = (0..regular.len())
        .map(|i| f64::from(u8::from(i < winners)))
        .collect();
    Fairness {
        first_clicks_won: won as f64 / taken as f64,
        earliness_rank_correlation: spearman(&earliness, &bought),
        attainable_correlation: spearman(&earliness, &first_served),
    }
}

/// Cores per process group at [`PROJECTED_CLICKS_PER_SECOND`], from the CPU the flood took
/// per click (its successes are its clicks).
pub fn projection(cpu: &CpuUse) -> Vec<Projection> {
    GROUPS
        .iter()
        .filter_map(|(group, _)| {
            let (per_1000, _) = cpu.group(group)?;
            let per_1000 = per_1000?;
            Some(Projection {
                group: (*group).to_owned(),
                cpu_ms_per_1000_clicks: per_1000 * 1000.0,
                cores: per_1000 / 1000.0 * PROJECTED_CLICKS_PER_SECOND,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn click(buyer: usize, answered_ms: u64, answer: Answer) -> Click {
        Click {
            buyer,
            request_id: format!("r-{buyer}"),
            sent: Duration::ZERO,
            answered: Duration::from_millis(answered_ms),
            tries: 1,
            answer,
        }
    }

    const BOUGHT: Answer = Answer::Created {
        fencing_token: None,
    };

    #[test]
    fn first_come_first_served_correlates_fully_and_a_reversed_order_negatively() {
        let kinds = vec![Kind::Regular; 4];
        let fcfs: Vec<Click> = (0..4)
            .map(|b| click(b, 10, if b < 2 { BOUGHT } else { Answer::SOLD_OUT }))
            .collect();
        let f = fairness(&fcfs, &kinds, 2);
        assert_eq!(f.first_clicks_won, 1.0);
        assert!((f.earliness_rank_correlation.unwrap() - 0.8944).abs() < 1e-3);
        assert_eq!(
            f.correlation_share(),
            Some(1.0),
            "all that a yes or no allows"
        );
        let reversed: Vec<Click> = (0..4)
            .map(|b| click(b, 10, if b >= 2 { BOUGHT } else { Answer::SOLD_OUT }))
            .collect();
        let r = fairness(&reversed, &kinds, 2);
        assert_eq!(r.first_clicks_won, 0.0);
        assert!(r.earliness_rank_correlation.unwrap() < 0.0);
        assert!(r.correlation_share().unwrap() < 0.0);
    }

    #[test]
    fn the_attainable_correlation_of_one_winner_in_twenty_is_near_root_three_p_one_minus_p() {
        let kinds = vec![Kind::Regular; 2_000];
        let clicks: Vec<Click> = (0..2_000)
            .map(|b| {
                click(
                    b,
                    10,
                    if b % 20 == 0 {
                        BOUGHT
                    } else {
                        Answer::SOLD_OUT
                    },
                )
            })
            .collect();
        let f = fairness(&clicks, &kinds, 100);
        let best = f.attainable_correlation.unwrap();
        let p: f64 = 0.05;
        assert!((best - (3.0 * p * (1.0 - p)).sqrt()).abs() < 0.01, "{best}");
        let share = f.correlation_share().unwrap();
        assert!(
            share.abs() < 0.1,
            "evenly spread winners are no better than a lottery: {share}"
        );
    }

    #[test]
    fn the_timeline_counts_answers_per_slice_and_the_units_they_sold() {
        let clicks = [
            click(0, 310, BOUGHT),
            click(1, 350, BOUGHT),
            click(2, 420, Answer::SOLD_OUT),
        ];
        let t = timeline(&clicks, Duration::from_millis(300), 2);
        assert_eq!(t.len(), 5);
        assert_eq!((t[3].from_ms, t[3].bought, t[3].units_left), (0, 2, 0));
        assert_eq!((t[4].sold_out, t[4].units_left), (1, 0));
        assert_eq!(
            sold_out_after(&clicks, Duration::from_millis(300), 2),
            Some(50.0)
        );
        assert_eq!(sold_out_after(&clicks, Duration::from_millis(300), 3), None);
    }

    #[test]
    fn the_timeline_is_sliced_from_the_opening_wherever_it_falls() {
        let not_yet = Answer::Refused {
            status: 409,
            code: ErrorCode::SaleNotStarted,
        };
        let early = |buyer, ms| click(buyer, ms, not_yet);
        let clicks = [early(0, 10), early(1, 536), click(2, 537, BOUGHT)];
        let t = timeline(&clicks, Duration::from_millis(537), 1);
        let at = |from_ms| t.iter().find(|s| s.from_ms == from_ms).unwrap();
        assert_eq!(t.first().map(|s| s.from_ms), Some(-600));
        assert_eq!((at(-600).rules, at(-100).rules, at(0).bought), (1, 1, 1));
        assert_eq!(t.len(), 7);
    }
}
