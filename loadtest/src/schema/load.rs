//! A closed- or open-loop run, its latencies, and the spread of repeated runs.

use app::api::ErrorCode;
use serde::{Deserialize, Serialize};
use testkit::Outcomes;

/// Which loop produced a result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Loop {
    Closed,
    /// At `target_rate` requests/s.
    Open {
        target_rate: f64,
    },
}

/// The result of a closed- or open-loop run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    #[serde(flatten)]
    pub mode: Loop,
    pub concurrency: usize,
    /// Measured seconds (the window).
    pub seconds: f64,
    pub outcomes: Outcomes,
    /// Open loop: tickets due in the window that could not be sent before the hard stop.
    pub not_sent: u64,
    pub attempts_per_sec: f64,
    /// New orders (201; for the direct baselines: deductions) per second.
    pub successes_per_sec: f64,
    pub latency: LatencySummary,
    pub histogram: HistogramData,
    /// When this is the median of several runs: every run's figures (`analyse::spread`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetitions: Option<Repetitions>,
}

impl LoadResult {
    /// The figure a run is ranked by: successes/s where the work has successes (deductions),
    /// attempts/s where it has none (`GET /api/noop`).
    pub fn headline(&self) -> f64 {
        if self.outcomes.created > 0 {
            self.successes_per_sec
        } else {
            self.attempts_per_sec
        }
    }

    /// The share of its attempts, in percent, that the service's door refused `503
    /// overloaded` before any strategy ran; `None` when it refused none.
    pub fn door_percent(&self) -> Option<f64> {
        let at_door = self.outcomes.refused(ErrorCode::Overloaded);
        (at_door > 0).then(|| 100.0 * at_door as f64 / self.outcomes.total() as f64)
    }
}

/// Percentiles, max and mean of a run's latencies, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

/// The whole latency histogram: the percentile distribution (readable) and HdrHistogram's V2
/// deflate format, base64 (exact, loadable by any HdrHistogram tool).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramData {
    pub distribution: Vec<Bucket>,
    pub hdr_v2_deflate_base64: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub value_us: u64,
    pub percentile: f64,
    pub count: u64,
}

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
}

/// The spread of a load result's figures over its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repetitions {
    pub runs: usize,
    pub attempts_per_sec: Spread,
    pub successes_per_sec: Spread,
    pub p99_us: Spread,
}
