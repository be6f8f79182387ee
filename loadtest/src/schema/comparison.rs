//! What changed from one run to another, as data: computed by `analyse::compare`, printed by
//! `report::comparison`.

use serde::{Deserialize, Serialize};

use super::Fall;

/// Two runs set side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// When each run started.
    pub a: String,
    pub b: String,
    pub noise: Noise,
    /// The machines the runs were measured on: rates from different machines are shown, not
    /// judged.
    pub machines: Machines,
    /// The settings that differ (`buyers 200 → 50`): figures of runs with other settings
    /// measure other work.
    pub settings_changed: Vec<String>,
    /// B's strategies and baselines whose median is less than half of A's, however wide the
    /// rounds (runs of the same machine only; see `analyse::falls`).
    pub falls: Vec<Fall>,
    /// Accounting figures that went from 0 to anything for a strategy expected not to oversell.
    pub regressions: Vec<Regression>,
    /// Every change of a correctness figure (oversell, undersell, lost updates, negative
    /// stock), for any strategy in both runs, regressions first.
    pub correctness: Vec<CorrectnessChange>,
    /// The order of the strategies in both runs, when at least two ran in both.
    pub ranking: Option<Ranking>,
    pub baselines: Vec<Change>,
    pub strategies: Vec<Change>,
}

/// What a run was measured on (also as `results/history.json` keeps it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_model: Option<String>,
    pub cpus: usize,
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let model = self.cpu_model.as_deref().unwrap_or("unknown CPU");
        write!(f, "{model}, {} CPUs", self.cpus)
    }
}

/// The machines of run A and run B.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machines {
    pub a: Machine,
    pub b: Machine,
}

impl Machines {
    /// The same CPU model (known in both) and core count: absolute rates can be compared.
    pub fn same(&self) -> bool {
        self.a.cpu_model.is_some() && self.a == self.b
    }
}

/// The strategies' order in both runs: Spearman's ρ of their median rates, against the lowest
/// ρ between two rounds of one run (what noise alone did to the order).
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    pub strategies: usize,
    pub spearman: f64,
    /// `None` when neither run had two rounds.
    pub within_run: Option<f64>,
    /// ρ is below the within-run noise: the order changed more than noise moves it.
    pub beyond_noise: bool,
}

/// A strategy's place by median rate (1 = fastest; ties averaged), and the lowest and highest
/// place it had in the rounds of its run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rank {
    pub rank: f64,
    pub lowest: f64,
    pub highest: f64,
}

/// A strategy's rate over its own baseline's (measured in the same run), with the range its
/// rounds allow.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    pub baseline: String,
    pub median: f64,
    pub range: Option<(f64, f64)>,
}

/// A rank or a ratio in both runs, and whether it moved beyond the rounds' ranges: up
/// (`Some(true)`: a better place, a larger ratio), down, or not.
#[derive(Debug, Clone, PartialEq)]
pub struct Moved<T> {
    pub a: T,
    pub b: T,
    pub moved: Option<bool>,
}

/// A correctness figure of one strategy that differs between the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrectnessChange {
    pub strategy: String,
    pub field: &'static str,
    pub a: i64,
    pub b: i64,
    /// A strategy expected not to oversell went from 0 to anything.
    pub regression: bool,
}

/// The run-to-run noise of two runs, as a fraction of a figure, and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Noise {
    pub fraction: f64,
    pub source: NoiseSource,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NoiseSource {
    /// The median relative min–max of the baselines' figures in both runs.
    Ranges {
        figures: usize,
        widest: String,
        widest_fraction: f64,
    },
    /// No run has min–max: the median change of the baselines between the runs.
    Changes { baselines: usize },
    /// Nothing to estimate it from.
    Assumed,
}

/// A rate: its median, and min–max when it is the median of several runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub median: f64,
    pub min_max: Option<(f64, f64)>,
}

/// The figures of one baseline or strategy in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub rate: Range,
    pub p99_ms: f64,
    /// Strategies only.
    pub p99_open_ms: Option<f64>,
}

/// One baseline or strategy in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub name: String,
    /// In run A, and in run B.
    pub figures: (Option<Figures>, Option<Figures>),
    /// B's rate as a change from A's, in per cent (`None` when A's was 0 or one run lacks it).
    pub percent: Option<f64>,
    /// Up (`Some(true)`) or down beyond the noise, or not (always not when the runs come
    /// from different machines).
    pub moved: Option<bool>,
    /// The flash sale's accounting fields that differ (strategies in both runs).
    pub accounting: Vec<FieldChange>,
    /// Strategies in both runs: the place by rate.
    pub rank: Option<Moved<Rank>>,
    /// Strategies in both runs: the rate over the strategy's own baseline.
    pub ratio: Option<Moved<Ratio>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FieldChange {
    pub field: &'static str,
    pub a: i64,
    pub b: i64,
    /// A strategy expected not to oversell went from 0 to anything.
    pub regression: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    pub strategy: String,
    pub field: &'static str,
    pub b: i64,
}
