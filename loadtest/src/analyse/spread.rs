//! Repeated measurements: every throughput figure is the median of several runs, taken in
//! rounds that interleave the things measured (A B C, A B C, …) so that a slow minute of a
//! shared machine lands on one run of each rather than on every run of one. The spread
//! (min–max) travels with the median into the JSON and the Markdown report, and is what
//! `seckill-bench compare` calls noise.

use crate::schema::{LoadResult, Repetitions, Spread};

/// The median run (by [`LoadResult::headline`]), carrying the spread of every run. `None` for no runs.
pub fn combine(runs: Vec<LoadResult>) -> Option<LoadResult> {
    let figure = |f: fn(&LoadResult) -> f64| {
        Spread::of(&runs.iter().map(f).collect::<Vec<_>>()).expect("at least one run")
    };
    if runs.is_empty() {
        return None;
    }
    let repetitions = Repetitions {
        runs: runs.len(),
        attempts_per_sec: figure(|r| r.attempts_per_sec),
        successes_per_sec: figure(|r| r.successes_per_sec),
        p99_us: figure(|r| r.latency.p99_us as f64),
    };
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|a, b| runs[*a].headline().total_cmp(&runs[*b].headline()));
    let middle = order[(order.len() - 1) / 2];
    let mut median = runs.into_iter().nth(middle).expect("index in range");
    median.repetitions = Some(repetitions);
    Some(median)
}

/// The median, in percent, of each round's figure over its pair's in the same round (`of[r]`
/// over `to[r]`): a round's pair ran back to back, so a machine that sped up or slowed down
/// between rounds moves both alike, where the medians of each kind may come from rounds far
/// apart. `None` without a round whose `to` was counted.
pub fn paired_percent(of: &[f64], to: &[f64]) -> Option<f64> {
    let ratios: Vec<f64> = (of.iter().zip(to))
        .filter(|(_, to)| **to > 0.0)
        .map(|(of, to)| 100.0 * of / to)
        .collect();
    Spread::of(&ratios).map(|spread| spread.median)
}

/// The order of measurement: `rounds` rounds, each measuring every one of `items` once, in the
/// same order: `(round, item)` pairs.
pub fn interleaved(items: usize, rounds: usize) -> Vec<(usize, usize)> {
    (0..rounds)
        .flat_map(|round| (0..items).map(move |item| (round, item)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::drive::latency::Latencies;
    use crate::schema::Loop;
    use testkit::Outcomes;

    fn run(created: u64, p99_ms: u64) -> LoadResult {
        let mut l = Latencies::default();
        l.record(Duration::from_millis(p99_ms));
        let outcomes = Outcomes {
            created,
            ..Outcomes::default()
        };
        l.result(Loop::Closed, 8, 1.0, outcomes, 0)
    }

    #[test]
    fn the_median_of_an_odd_number_of_runs_is_the_middle_one_with_its_range() {
        let s = Spread::of(&[30.0, 10.0, 20.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (20.0, 10.0, 30.0));
        assert_eq!(s.runs, vec![30.0, 10.0, 20.0]);
        assert_eq!(s.relative_range(), Some(1.0));
    }

    #[test]
    fn the_median_of_an_even_number_of_runs_is_the_lower_middle_run() {
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.0);
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn combining_runs_keeps_the_median_run_whole_and_the_spread_of_each_figure() {
        let r = combine(vec![run(300, 9), run(100, 30), run(200, 20)]).unwrap();
        assert_eq!(r.outcomes.created, 200, "the median run itself");
        let rep = r.repetitions.unwrap();
        assert_eq!(rep.runs, 3);
        assert_eq!(
            (rep.successes_per_sec.min, rep.successes_per_sec.max),
            (100.0, 300.0)
        );
        assert!(rep.p99_us.max > rep.p99_us.min);
        assert!(combine(Vec::new()).is_none());
    }

    #[test]
    fn rounds_measure_every_item_once_in_the_same_order() {
        assert_eq!(
            interleaved(3, 2),
            vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
        );
        assert!(interleaved(0, 3).is_empty());
    }
}
