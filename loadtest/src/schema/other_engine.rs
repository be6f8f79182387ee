//! The same strategies on the other engine: the latest committed run on it, on the same machine
//! and otherwise the same servers (`analyse::other_engine`), its closed-loop medians kept beside
//! this run's so that a report on PostgreSQL shows MariaDB's figures for the same strategies,
//! and the other way round. Rates of two engines are read as shares of each engine's own
//! hot-row baseline, the ceiling of one row on it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::world::Engine;

/// The other engine's run, as far as this run's strategies go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherEngine {
    pub engine: Engine,
    /// Its folder under the results, or its start where it was read from no folder.
    pub run: String,
    /// Its `sql-hot-row` median: the bare hot-row `UPDATE`'s rate on that engine.
    pub hot_row: f64,
    /// Its closed-loop medians (deductions/s) of the strategies this run measured too, by name.
    pub strategies: BTreeMap<String, f64>,
}
