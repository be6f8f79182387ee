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
}

impl Fall {
    /// Below this share of the best, a median has fallen, however wide its rounds: a drop
    /// that deep is no machine's moment.
    pub const BELOW: f64 = 0.5;

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
