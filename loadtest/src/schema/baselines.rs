//! The baselines: the same work with nothing of ours in between, and the standard tool beside
//! each.

use serde::{Deserialize, Serialize};

use super::{CpuUse, LoadResult, Spread};

/// Every baseline, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BaselineName {
    HttpNoop,
    GooseNoop,
    SqlConditional,
    SqlHotRow,
    RedisLua,
    /// `GET /api/noop` on HTTP's floor (see [`crate::rig::http_floor`]).
    HttpFloorNoop,
    /// A purchase refused `sold_out` on HTTP's floor: HTTP's own cost of a refusal.
    HttpFloorRefusal,
}

impl BaselineName {
    pub const ALL: [BaselineName; 7] = [
        BaselineName::HttpNoop,
        BaselineName::GooseNoop,
        BaselineName::SqlConditional,
        BaselineName::SqlHotRow,
        BaselineName::RedisLua,
        BaselineName::HttpFloorNoop,
        BaselineName::HttpFloorRefusal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BaselineName::HttpNoop => "http-noop",
            BaselineName::GooseNoop => "goose-noop",
            BaselineName::SqlConditional => "sql-conditional",
            BaselineName::SqlHotRow => "sql-hot-row",
            BaselineName::RedisLua => "redis-lua",
            BaselineName::HttpFloorNoop => "http-floor-noop",
            BaselineName::HttpFloorRefusal => "http-floor-refusal",
        }
    }

    /// The process group that serves this baseline's work (see [`CpuUse::group`]).
    pub fn server_group(self) -> &'static str {
        match self {
            BaselineName::HttpNoop | BaselineName::GooseNoop => "app",
            BaselineName::SqlConditional | BaselineName::SqlHotRow => "mariadbd",
            BaselineName::RedisLua => "redis-server",
            BaselineName::HttpFloorNoop | BaselineName::HttpFloorRefusal => "http-floor",
        }
    }
}

impl std::fmt::Display for BaselineName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One baseline's measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub name: BaselineName,
    pub what: String,
    pub result: LoadResult,
    /// CPU of every process over its runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
    /// The same work through the standard tool, in the same rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standard_tool: Option<StandardTool>,
    /// `http-floor-refusal`'s rate as a share of `http-floor-noop`'s, in percent: the median of
    /// each round's own ratio, its no-op measured right before it (see
    /// [`crate::analyse::spread::paired_percent`]). `None` for the other baselines, and in runs
    /// that did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired_percent: Option<f64>,
}

/// What became of a standard tool's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Measured,
    #[serde(rename = "not installed")]
    NotInstalled,
    Failed,
}

/// A tool's figures for one baseline, over its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandardTool {
    /// `mysqlslap`, `redis-benchmark`, `wrk`.
    pub tool: String,
    /// The command line of the last run (no password: that goes through the environment).
    pub command: String,
    pub status: ToolStatus,
    /// Operations per second (transactions for the conditional transaction).
    pub per_sec: Option<Spread>,
    /// CPU-seconds the tool itself spent per 1,000 operations (all runs together).
    pub tool_cpu_per_1000: Option<f64>,
    /// Our median as a percentage of the tool's.
    pub ours_percent: Option<f64>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// CPU of the run's processes (the servers, the idle generator) during the tool's runs;
    /// the tool's own is `tool_cpu_per_1000`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
}
