//! What fell by more than half against the best committed run on the same machine: each run
//! compares itself with the run before it, whose noise can hide a fall that happened a few
//! runs back; this holds the comparison with the best ever measured (`analyse::falls`).

use app::api::Strategy;
use serde::{Deserialize, Serialize};

use super::BaselineName;

/// A strategy or baseline whose median is less than [`Fall::BELOW`] of the best median another
/// run on the same machine measured for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fall {
    pub fallen: Fallen,
    /// This run's median: closed-loop deductions/s for a strategy, a baseline's headline rate.
    pub median: f64,
    /// The best median of the other runs.
    pub best_median: f64,
    /// The run of the best median: its folder (when it was read from one) and its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_dir: Option<String>,
    pub best_started_at: String,
    /// `median / best_median`.
    pub ratio: f64,
    /// How far the fallen's reference fell between the same two runs: a strategy's own baseline
    /// (`analyse::ratios::baseline_of`), what its store and the machine fell by, which the
    /// strategy falls by too without any change of its own; `http-noop`, the machine alone,
    /// for any other baseline. `None` for `http-noop` itself, or where either run lacks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineFall>,
    /// For a strategy, the share of this run's closed-loop attempts its door refused `503
    /// overloaded`, when it was most of them: a rate that is what the strategy answers within
    /// the door's latency budget. `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door_percent: Option<f64>,
}

/// A baseline's rate in this run over its rate in the run a fall is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BaselineFall {
    pub name: BaselineName,
    pub ratio: f64,
}

impl Fall {
    /// Below this share of the best, a median has fallen, however wide its rounds: a drop
    /// that deep is no machine's moment.
    pub const BELOW: f64 = 0.5;

    /// Whether the fall is the machine's: the fallen kept at least [`Fall::BELOW`] of its ratio
    /// to its reference ([`Fall::baseline`]), which fell with it between the same two runs; or
    /// it is `http-noop`, the machine measured. On a slow day every rate halves, and a real
    /// fall is the one that fell beyond that.
    pub fn with_the_machine(&self) -> bool {
        match (self.fallen, self.baseline) {
            (Fallen::Baseline(BaselineName::HttpNoop), _) => true,
            (_, Some(reference)) => self.ratio >= Fall::BELOW * reference.ratio,
            (_, None) => false,
        }
    }

    /// The run of the best median, by folder where known.
    pub fn best_run(&self) -> &str {
        self.best_dir.as_deref().unwrap_or(&self.best_started_at)
    }
}

/// What fell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "lowercase")]
pub enum Fallen {
    Strategy(Strategy),
    Baseline(BaselineName),
}
