//! `isolation.json`: what `seckill-bench isolation` measured, cell by cell.

use serde::{Deserialize, Serialize};

use super::engine::{Engine, Level};
use super::failure::{Clicks, Failure};

/// Bumped when a field changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IsolationReport {
    pub schema: u32,
    pub started_at: String,
    pub duration_seconds: f64,
    pub settings: IsolationSettings,
    pub servers: Vec<ServerInfo>,
    pub cells: Vec<Cell>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IsolationSettings {
    /// Connections clicking at once in every cell.
    pub sessions: usize,
    /// The units of the one product the stock failures sell out, one per click.
    pub stock: i64,
    /// Buyers of the write skew, each clicking `clicks_per_buyer` times at once.
    pub buyers: u64,
    pub clicks_per_buyer: usize,
    /// Sales of 4 units to two buyers at once (3 and 2) in the phantom inventory.
    pub sales: u64,
    /// Every cell runs once a round, the cells' order rotated each round.
    pub rounds: usize,
    /// Attempts of a correct client before it gives a click up.
    pub max_attempts: u32,
    pub quick: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub engine: Engine,
    pub version: String,
}

/// One failure on one engine at one level, once per round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub failure: Failure,
    pub engine: Engine,
    pub level: Level,
    pub rounds: Vec<Round>,
}

/// One run of a cell, judged from the database once its clicks were answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Round {
    pub clicks: Clicks,
    /// From the first click to the last answer.
    pub seconds: f64,
    /// Units on sale at the start, over every product of the round.
    pub units: i64,
    /// Units the orders hold.
    pub sold: i64,
    /// Units the stock rows still hold (below zero when oversold by a relative deduction).
    pub left: i64,
    /// What [`Failure::counted`] counts.
    pub failures: i64,
}

impl Cell {
    /// The rounds' clicks summed.
    pub fn clicks(&self) -> Clicks {
        let mut all = Clicks::default();
        for r in &self.rounds {
            all.add(&r.clicks);
        }
        all
    }

    /// The failures of every round.
    pub fn failures(&self) -> i64 {
        self.rounds.iter().map(|r| r.failures).sum()
    }

    /// Purchases per second, the median of the rounds.
    pub fn rate(&self) -> f64 {
        let mut rates: Vec<f64> = (self.rounds.iter())
            .filter(|r| r.seconds > 0.0)
            .map(|r| r.clicks.bought as f64 / r.seconds)
            .collect();
        rates.sort_by(f64::total_cmp);
        match rates.len() {
            0 => 0.0,
            n if n % 2 == 1 => rates[n / 2],
            n => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
        }
    }

    /// Transactions begun per purchase made.
    pub fn attempts_per_purchase(&self) -> Option<f64> {
        let c = self.clicks();
        (c.bought > 0).then(|| c.attempts as f64 / c.bought as f64)
    }
}

impl IsolationReport {
    pub fn cell(&self, failure: Failure, engine: Engine, level: Level) -> Option<&Cell> {
        (self.cells.iter()).find(|c| c.failure == failure && c.engine == engine && c.level == level)
    }

    pub fn version(&self, engine: Engine) -> Option<&str> {
        (self.servers.iter())
            .find(|s| s.engine == engine)
            .map(|s| s.version.as_str())
    }
}
