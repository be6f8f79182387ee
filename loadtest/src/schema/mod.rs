//! The report's schema: every type `report.json` is made of, written and read by the same
//! types ([`RunReport`] is the whole), with a version ([`SCHEMA_VERSION`]) so that a reader
//! knows a report written by another `seckill-bench` when it sees one (see `schema::json`).
//! The registered phases' own types are in their folders (`crate::phase`): the schema keeps
//! what each put under its name ([`ByPhase`]).
//!
//! The measuring code fills these types and judges nothing; `analyse` computes the
//! [`Findings`] from them, and the [`Fall`]s from them and the runs beside them; `report`
//! renders them.

mod baselines;
mod by_phase;
pub mod comparison;
mod cpu;
mod environment;
mod falls;
mod findings;
pub mod history;
pub mod json;
mod load;
mod other_engine;
mod record;
mod sale;
mod scenario;
mod stages;
pub mod world;

pub use baselines::{Baseline, BaselineName, StandardTool, ToolStatus};
pub use by_phase::ByPhase;
pub use cpu::{CpuUse, GROUPS, ProcessCpu, SATURATED_CORES};
pub use environment::{DiskFlush, Environment};
pub use falls::{BaselineFall, Fall, Fallen};
pub use findings::{
    BelowBaseline, ClientCheck, DoorRefused, Findings, GroupCpu, GroupWait, MachineLoad, Pace,
    Peer, SaleFinding, SaleReading, ServerCpu, StagePart, TimeFinding, ToolComparison, ToolFinding,
    ToolReading, ToolVerdict, WaitedIn,
};
pub use load::{Bucket, HistogramData, LatencySummary, LoadResult, Loop, Repetitions, Spread};
pub use other_engine::OtherEngine;
pub use record::{Of, Sold, StrategyReport, Unmeasured};
pub use sale::{Loops, ReplicaLag, SaleResult, ThroughputResult};
pub use scenario::{Event, Row, ScenarioReport, Verdict};
pub use stages::{StageTime, StageTimes};

use app::api::{Strategy, StrategyInfo};
use serde::{Deserialize, Serialize};

use world::World;

/// The schema this program writes: one record per strategy ([`StrategyReport`]). Version 2
/// kept each phase's results in lists of their own; version 1 is the layout written before the
/// version was (no `schema_version` key, no findings); see `schema::json` for how both are read.
pub const SCHEMA_VERSION: u32 = 3;

/// Everything one `seckill-bench run` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub started_at: String,
    pub finished_at: String,
    pub duration_seconds: f64,
    pub settings: Settings,
    /// What the rig started and how the app reached it: how far the servers stood (absent
    /// from the reports written before a run could stand elsewhere than on loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<World>,
    pub environment: Environment,
    pub baselines: Vec<Baseline>,
    /// The bare hot-row UPDATE at several connection counts.
    pub hot_row_sweep: Vec<LoadResult>,
    /// One record per strategy: its sale, its loops and each phase's result.
    pub strategies: Vec<StrategyReport>,
    /// The fault scenarios, each expected against observed.
    pub scenarios: Vec<ScenarioReport>,
    /// What the figures say (absent from a version 1 report).
    #[serde(default)]
    pub findings: Findings,
    /// What fell by more than half against the best run on the same machine among the runs
    /// found beside this one when it was written (`analyse::falls`; absent from the reports
    /// written before it was judged).
    #[serde(default)]
    pub falls: Vec<Fall>,
    /// The same strategies on the other engine, from its latest committed run on this machine
    /// (absent where there is none, and from the reports written before a run could choose
    /// its engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_engine: Option<OtherEngine>,
}

impl RunReport {
    /// The machine the run was measured on.
    pub fn machine(&self) -> comparison::Machine {
        comparison::Machine {
            cpu_model: self.environment.cpu_model.clone(),
            cpus: self.environment.cpus,
        }
    }

    /// The baseline named `name`, if it was measured.
    pub fn baseline(&self, name: BaselineName) -> Option<&Baseline> {
        self.baselines.iter().find(|b| b.name == name)
    }

    /// The sale and loops of `strategy`, if it was sold and looped.
    pub fn strategy(&self, strategy: Strategy) -> Option<Sold<'_>> {
        self.record(strategy).and_then(StrategyReport::sold)
    }

    /// The record of `strategy`, if the run measured anything of it.
    pub fn record(&self, strategy: Strategy) -> Option<&StrategyReport> {
        self.strategies.iter().find(|s| s.strategy.name == strategy)
    }

    /// The record of `strategy`, made if the run has none yet.
    pub fn record_mut(&mut self, strategy: &StrategyInfo) -> &mut StrategyReport {
        let at = match self
            .strategies
            .iter()
            .position(|s| s.strategy.name == strategy.name)
        {
            Some(at) => at,
            None => {
                self.strategies.push(StrategyReport::of(strategy.clone()));
                self.strategies.len() - 1
            }
        };
        &mut self.strategies[at]
    }

    /// Each strategy's sale and loops, in the run's order; a strategy of a run of the phases
    /// before the sale alone has none.
    pub fn sold(&self) -> impl Iterator<Item = Sold<'_>> + Clone {
        self.strategies.iter().filter_map(StrategyReport::sold)
    }

    /// Whether the registered phase `name` measured any strategy.
    pub fn measured(&self, name: &str) -> bool {
        self.strategies.iter().any(|s| s.phases.has(name))
    }

    /// Each strategy's result of the registered phase `name`, read as `T`, in the run's order.
    pub fn each<T>(&self, name: &str) -> Vec<Of<'_, T>>
    where
        T: serde::de::DeserializeOwned + std::any::Any + Send + Sync,
    {
        (self.strategies.iter())
            .filter_map(|s| {
                Some(Of {
                    strategy: &s.strategy,
                    result: s.phases.get(name)?,
                })
            })
            .collect()
    }

    /// The CPU groups ([`GROUPS`]' order) measured for at least one strategy.
    pub fn cpu_groups(&self) -> Vec<&'static str> {
        GROUPS
            .iter()
            .map(|(g, _)| *g)
            .filter(|g| {
                self.sold()
                    .any(|x| x.cpu.as_ref().and_then(|c| c.group(g)).is_some())
            })
            .collect()
    }
}

/// The settings of a run, every default applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub strategies: Vec<Strategy>,
    pub instances: usize,
    pub stock: i64,
    pub buyers: usize,
    pub demand: u64,
    pub quantity: i64,
    pub seconds: f64,
    pub warmup: f64,
    /// Runs per throughput figure.
    pub repetitions: usize,
    /// The open loop's rate; `None`: [`Settings::open_rate_share`] of each closed loop's.
    pub rate: Option<f64>,
    /// Share of the closed loop's attempts/s used as open-loop rate when no rate is given.
    #[serde(default = "default_open_rate_share")]
    pub open_rate_share: f64,
    pub quick: bool,
    pub baselines: bool,
    pub scenarios: bool,
    /// Baselines and standard tools only (`--only-baselines`).
    pub only_baselines: bool,
    /// Only the phases measured before the sale, for every strategy: no sale, no loops, no
    /// phase after them (`seckill-bench flood`).
    #[serde(default, alias = "only_flood")]
    pub only_before_sale: bool,
    /// The niceness the servers the run started ran at; the load generator ran at its own
    /// (0: the same as the generator's).
    #[serde(default)]
    pub server_niceness: i32,
    /// Each registered phase's shape, under its name (a phase not asked for is absent).
    #[serde(flatten)]
    pub phases: ByPhase,
    /// The app instances' latency budget (`--latency-budget-ms`): each lets in as many of a
    /// strategy's purchases at a time as it answers in this time (0: a fixed number). Absent
    /// from the reports written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_budget_ms: Option<u64>,
}

/// Enough load to matter, below saturation so the open loop's latencies describe the service,
/// not a queue that grows without bound.
pub const OPEN_RATE_SHARE: f64 = 0.7;

fn default_open_rate_share() -> f64 {
    OPEN_RATE_SHARE
}
