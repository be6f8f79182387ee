//! What a run can reproduce on another day or another machine: not its absolute rates (a
//! machine with other cores, another network stack or another disk moves them all), but the
//! order of the strategies and each strategy's rate in proportion to its own baseline, measured
//! in the same run on the same machine. Both are judged against the noise the runs themselves
//! measured: every figure is the median of repeated runs taken in interleaved rounds, and the
//! rounds say how much the order and the ratios moved while nothing changed.
//!
//! * Ranks: the strategies ranked by their median rate, and by each round's rate; a strategy's
//!   rank moved when its ranks over the rounds of A and of B do not overlap. The whole order is
//!   compared by Spearman's ρ; its noise is the lowest ρ between two rounds of the same run.
//! * Ratios: a strategy's rate over its baseline's, with the range its rounds allow (lowest
//!   over highest, highest over lowest); it moved when the two ranges do not overlap.

use crate::schema::comparison::{Rank, Ranking, Ratio};
use crate::schema::{LoadResult, RunReport, Sold, Spread};

/// The rate a strategy is ranked by, with its rounds: deductions/s where there were any.
fn rate(l: &LoadResult) -> (f64, Vec<f64>) {
    let by_successes = l.successes_per_sec > 0.0;
    let runs = l
        .repetitions
        .as_ref()
        .map_or_else(Vec::new, |r| match by_successes {
            true => r.successes_per_sec.runs.clone(),
            false => r.attempts_per_sec.runs.clone(),
        });
    let median = match by_successes {
        true => l.successes_per_sec,
        false => l.attempts_per_sec,
    };
    (median, runs)
}

/// Ranks (1 = largest; ties share their average rank) of `values`.
pub fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|a, b| values[*b].total_cmp(&values[*a]));
    let mut ranks = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let shared = (i + j) as f64 / 2.0 + 1.0;
        for k in &order[i..=j] {
            ranks[*k] = shared;
        }
        i = j + 1;
    }
    ranks
}

/// Spearman's ρ of two lists of figures of the same items: the correlation of their ranks
/// (a run's rates against another's, a flood's earliness against who bought).
/// `None` for fewer than two items or when one list ranks them all alike.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        cov += (x - mean) * (y - mean);
        va += (x - mean).powi(2);
        vb += (y - mean).powi(2);
    }
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

/// The strategies of both runs, in B's order: (name, A's rate and rounds, B's).
type Paired = Vec<(String, (f64, Vec<f64>), (f64, Vec<f64>))>;

fn paired(a: &RunReport, b: &RunReport) -> Paired {
    b.sold()
        .filter_map(|sb| {
            let sa = a.strategy(sb.strategy.name)?;
            Some((
                sb.strategy.name.to_string(),
                rate(&sa.throughput.closed),
                rate(&sb.throughput.closed),
            ))
        })
        .collect()
}

/// Each strategy's rank by its median rate, and the lowest and highest rank it had in the
/// rounds (every round in which every strategy was measured).
fn ranked(rates: &[(f64, Vec<f64>)]) -> Vec<Rank> {
    let medians: Vec<f64> = rates.iter().map(|(m, _)| *m).collect();
    let by_median = ranks(&medians);
    let rounds = rates.iter().map(|(_, r)| r.len()).min().unwrap_or(0);
    let per_round: Vec<Vec<f64>> = (0..rounds)
        .map(|i| ranks(&rates.iter().map(|(_, r)| r[i]).collect::<Vec<_>>()))
        .collect();
    by_median
        .iter()
        .enumerate()
        .map(|(k, rank)| {
            let seen = per_round.iter().map(|r| r[k]).chain([*rank]);
            Rank {
                rank: *rank,
                lowest: seen.clone().fold(f64::INFINITY, f64::min),
                highest: seen.fold(0.0, f64::max),
            }
        })
        .collect()
}

/// The lowest Spearman's ρ between two rounds of one run: how far the order moves by noise.
fn within(rates: &[(f64, Vec<f64>)]) -> Option<f64> {
    let rounds = rates.iter().map(|(_, r)| r.len()).min().unwrap_or(0);
    let round = |i: usize| rates.iter().map(|(_, r)| r[i]).collect::<Vec<f64>>();
    (0..rounds)
        .flat_map(|i| (i + 1..rounds).map(move |j| (i, j)))
        .filter_map(|(i, j)| spearman(&round(i), &round(j)))
        .reduce(f64::min)
}

/// The order of the strategies in both runs, and each one's rank in each (in B's order, for
/// the strategies of both runs).
pub fn ranking(a: &RunReport, b: &RunReport) -> (Option<Ranking>, Vec<(String, Rank, Rank)>) {
    let pairs = paired(a, b);
    let (rates_a, rates_b): (Vec<_>, Vec<_>) =
        pairs.iter().map(|(_, a, b)| (a.clone(), b.clone())).unzip();
    let medians = |rates: &[(f64, Vec<f64>)]| rates.iter().map(|(m, _)| *m).collect::<Vec<_>>();
    let ranking = spearman(&medians(&rates_a), &medians(&rates_b)).map(|rho| {
        let noise = [within(&rates_a), within(&rates_b)]
            .into_iter()
            .flatten()
            .reduce(f64::min);
        Ranking {
            strategies: pairs.len(),
            spearman: rho,
            within_run: noise,
            beyond_noise: noise.is_some_and(|n| rho < n),
        }
    });
    let ranks = pairs
        .iter()
        .map(|(name, _, _)| name.clone())
        .zip(ranked(&rates_a).into_iter().zip(ranked(&rates_b)))
        .map(|(name, (ra, rb))| (name, ra, rb))
        .collect();
    (ranking, ranks)
}

/// Whether a rank moved beyond its rounds: up (`Some(true)`, a better place), down, or not.
pub fn rank_moved(a: &Rank, b: &Rank) -> Option<bool> {
    if b.highest < a.lowest {
        Some(true)
    } else if b.lowest > a.highest {
        Some(false)
    } else {
        None
    }
}

/// A strategy's rate over its own baseline's in `run`, with the range its rounds allow.
pub fn ratio(run: &RunReport, s: &Sold) -> Option<Ratio> {
    let base = run.baseline(s.baseline)?;
    let (ours, our_runs) = rate(&s.throughput.closed);
    let (theirs, their_runs) = rate(&base.result);
    if theirs <= 0.0 {
        return None;
    }
    let range = match (Spread::of(&our_runs), Spread::of(&their_runs)) {
        (Some(o), Some(t)) if t.min > 0.0 => Some((o.min / t.max, o.max / t.min)),
        _ => None,
    };
    Some(Ratio {
        baseline: s.baseline.to_string(),
        median: ours / theirs,
        range,
    })
}

/// Whether a ratio moved beyond its rounds: up, down, or not (or not measured in rounds).
pub fn ratio_moved(a: &Ratio, b: &Ratio) -> Option<bool> {
    let ((alo, ahi), (blo, bhi)) = (a.range?, b.range?);
    if blo > ahi {
        Some(true)
    } else if bhi < alo {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_share_their_average_rank_and_the_fastest_is_first() {
        assert_eq!(ranks(&[10.0, 30.0, 20.0, 30.0]), vec![4.0, 1.5, 3.0, 1.5]);
    }

    #[test]
    fn spearman_is_one_for_the_same_order_and_minus_one_for_the_reverse() {
        let a = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(spearman(&a, &[10.0, 20.0, 30.0, 40.0]), Some(1.0));
        assert_eq!(spearman(&a, &[40.0, 30.0, 20.0, 10.0]), Some(-1.0));
        let swapped = spearman(&a, &[20.0, 10.0, 30.0, 40.0]).unwrap();
        assert!((swapped - 0.8).abs() < 1e-12, "{swapped}");
        assert_eq!(spearman(&a, &[5.0; 4]), None);
    }

    #[test]
    fn a_rank_or_a_ratio_moves_only_when_the_ranges_of_the_rounds_are_apart() {
        let rank = |rank, lowest, highest| Rank {
            rank,
            lowest,
            highest,
        };
        assert_eq!(rank_moved(&rank(3.0, 2.0, 4.0), &rank(4.0, 4.0, 5.0)), None);
        assert_eq!(
            rank_moved(&rank(3.0, 2.0, 4.0), &rank(6.0, 5.0, 7.0)),
            Some(false)
        );
        assert_eq!(
            rank_moved(&rank(6.0, 5.0, 7.0), &rank(1.0, 1.0, 2.0)),
            Some(true)
        );
        let ratio = |lo, hi| Ratio {
            baseline: "sql-conditional".into(),
            median: (lo + hi) / 2.0,
            range: Some((lo, hi)),
        };
        assert_eq!(ratio_moved(&ratio(0.4, 0.5), &ratio(0.45, 0.6)), None);
        assert_eq!(ratio_moved(&ratio(0.4, 0.5), &ratio(0.55, 0.6)), Some(true));
        assert_eq!(ratio_moved(&ratio(0.4, 0.5), &ratio(0.2, 0.3)), Some(false));
        let unmeasured = Ratio {
            range: None,
            ..ratio(0.1, 0.1)
        };
        assert_eq!(ratio_moved(&unmeasured, &ratio(0.9, 0.9)), None);
    }
}
