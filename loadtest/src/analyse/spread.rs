//! Repeated measurements: every throughput figure is the median of several runs, taken in
//! rounds that interleave the things measured (A B C, A B C, …) so that a slow minute of a
//! shared machine lands on one run of each rather than on every run of one. The spread
//! (min–max) travels with the median into the JSON and the Markdown report, and is what
//! `seckill-bench compare` calls noise.

use serde::{Deserialize, Serialize};

use crate::drive::load::LoadResult;

/// The median of a figure's runs and their range. With an even number of runs the median is
/// the lower of the two middle runs, so that it is always a figure one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Every run's figure, in the order measured.
    pub runs: Vec<f64>,
}

impl Spread {
    /// `None` for no runs.
    pub fn of(runs: &[f64]) -> Option<Spread> {
        let mut sorted = runs.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = *sorted.get(sorted.len().checked_sub(1)? / 2)?;
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            runs: runs.to_vec(),
        })
    }

    /// (max − min) / median: how far apart the runs were, relative to the figure.
    pub fn relative_range(&self) -> Option<f64> {
        (self.median > 0.0).then(|| (self.max - self.min) / self.median)
    }

    /// `1,234 (1,100–1,300)`, whole numbers.
    pub fn display(&self) -> String {
        if self.runs.len() < 2 {
            return format!("{:.0}", self.median);
        }
        format!("{:.0} ({:.0}–{:.0})", self.median, self.min, self.max)
    }
}

/// The spread of a load result's figures over its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repetitions {
    pub runs: usize,
    pub attempts_per_sec: Spread,
    pub successes_per_sec: Spread,
    pub p99_us: Spread,
}

/// The figure a run is ranked by: successes/s where the work has successes (deductions),
/// attempts/s where it has none (`GET /api/noop`).
pub fn headline(r: &LoadResult) -> f64 {
    if r.outcomes.created > 0 {
        r.successes_per_sec
    } else {
        r.attempts_per_sec
    }
}

/// The median run (by [`headline`]), carrying the spread of every run. `None` for no runs.
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
    order.sort_by(|a, b| headline(&runs[*a]).total_cmp(&headline(&runs[*b])));
    let middle = order[(order.len() - 1) / 2];
    let mut median = runs.into_iter().nth(middle).expect("index in range");
    median.repetitions = Some(repetitions);
    Some(median)
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
    use crate::drive::load::Loop;
    use crate::measure::latency::Latencies;
    use testkit::Outcomes;

    fn run(created: u64, p99_ms: u64) -> LoadResult {
        let mut l = Latencies::default();
        l.record(Duration::from_millis(p99_ms));
        let outcomes = Outcomes {
            created,
            ..Outcomes::default()
        };
        LoadResult::new(Loop::Closed, 8, 1.0, outcomes, 0, &l)
    }

    #[test]
    fn the_median_of_an_odd_number_of_runs_is_the_middle_one_with_its_range() {
        let s = Spread::of(&[30.0, 10.0, 20.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (20.0, 10.0, 30.0));
        assert_eq!(s.runs, vec![30.0, 10.0, 20.0]);
        assert_eq!(s.display(), "20 (10–30)");
        assert_eq!(s.relative_range(), Some(1.0));
    }

    #[test]
    fn the_median_of_an_even_number_of_runs_is_the_lower_middle_run() {
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.0);
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[5.0]).unwrap().display(), "5");
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
