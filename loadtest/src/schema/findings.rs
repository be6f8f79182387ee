//! What the figures say, computed once (`analyse::findings`) and stored with them: the report's
//! prose is written from these values, and a test reads them, not the prose.

use app::api::{Safety, Strategy};
use serde::{Deserialize, Serialize};

use super::{BaselineName, ByPhase};

/// Every finding of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Findings {
    /// One per strategy that is not declared safe, or that broke an invariant.
    pub sales: Vec<SaleFinding>,
    /// One per strategy measured with CPU accounting: where its time went.
    pub time: Vec<TimeFinding>,
    /// One per baseline with a standard tool beside it.
    pub tools: Vec<ToolFinding>,
    /// Whether the benchmark's client could be the ceiling of its HTTP figures.
    pub client: Option<ClientCheck>,
    /// Each registered phase's findings, under its name.
    #[serde(flatten)]
    pub phases: ByPhase,
}

/// What went wrong in a strategy's flash sale, and what its safety class makes of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaleFinding {
    pub strategy: Strategy,
    pub safety: Safety,
    /// Oversell as a share of the stock, when there was any.
    pub oversell_percent: Option<f64>,
    /// How far the stock counter went down (initial − final).
    pub counter_went_down_by: i64,
    /// Units the buyers asked for.
    pub demand_units: i64,
    /// Requests answered neither with an order nor with `sold_out`.
    pub turned_away: u64,
    /// Requests that failed rather than being answered by the purchase contract.
    pub errors: u64,
    /// Success answers and order rows disagree.
    pub acknowledged_mismatch: bool,
    pub reading: SaleReading,
}

/// What a sale's accounting means for a strategy of its safety class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SaleReading {
    /// Unsafe, and this run happened not to hit the race.
    UnsafeNoAnomaly,
    /// Safe while leases hold, and no lease ran out.
    LeasesHeld,
    /// Safe while leases hold, and an invariant broke: a lease ran out under a holder.
    LeaseRanOut,
    /// Declared safe, and an invariant broke: a bug.
    SafeBroken,
    /// The anomalies speak for themselves (an unsafe strategy that failed, or undersell).
    AsMeasured,
}

/// Where a strategy's closed-loop time went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeFinding {
    pub strategy: Strategy,
    pub deductions_per_sec: f64,
    /// CPU-seconds per 1,000 deductions, per process group (those at 0.005 or more), in the
    /// report's group order.
    pub cpu_per_1000: Vec<GroupCpu>,
    pub pace: Pace,
    /// Set for a strategy far below its backend's baseline.
    pub below_baseline: Option<BelowBaseline>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupCpu {
    pub group: String,
    pub per_1000: f64,
}

/// How long a process group's threads waited for a core, ready to run: seconds per wall-clock
/// second (0.25: a quarter of the time, for a single thread).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupWait {
    pub group: String,
    pub cores: f64,
    /// The cores it ran on meanwhile: beside its wait, how much of the time it was ready.
    pub running: f64,
}

/// What set a strategy's pace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Pace {
    /// One process was saturated.
    Saturated {
        process: String,
        cores: f64,
    },
    /// No process was by its CPU alone, but a single-threaded server was counting its wait for
    /// a core: its one thread was running or ready to run nearly all the time.
    ReadyThroughout {
        process: String,
        /// The cores it ran on, and those it waited for, on average.
        running: f64,
        waiting: f64,
        /// Its CPU per successful purchase, µs: with a core to itself, what bounds the rate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        per_purchase_us: Option<f64>,
    },
    /// No process was, but the machine's cores were nearly all busy.
    MachineBusy {
        cpus: usize,
        busy_percent: f64,
        rest_of_machine_cores: f64,
    },
    /// Nothing was saturated: the time went to waiting.
    Waiting {
        busiest: String,
        cores: f64,
        machine_busy_percent: Option<f64>,
        /// Where, by the service's own timings, a purchase spent the most of its time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waited_in: Option<WaitedIn>,
        /// The process groups whose threads were ready to run and waited for a core, most
        /// first: a core's turn the purchases waited for at the moments all cores were taken,
        /// though the machine had idle time on average.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        waited_for_a_core: Vec<GroupWait>,
    },
    Unknown,
}

/// The stage a waiting strategy's purchases spent the most of their time in, per purchase the
/// service answered: the door (`admission`), one of the strategy's own stages (`lock_wait`,
/// `queued`, `batch`, `script`, `order_write`; `strategy` for one that times none of its own),
/// or `outside` (beyond the door and the strategy: the answer's way out); with the part of it
/// timed on its own, if any (`batch`'s `lookup`, `stock_update`, `order_insert` or `commit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitedIn {
    pub stage: String,
    /// Its mean µs per purchase answered, and its share of the mean time in the service.
    pub mean_us: f64,
    pub share_percent: f64,
    /// The longest part of the stage timed on its own, if any: `batch`'s `lookup`,
    /// `stock_update`, `order_insert` or `commit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of_which: Option<StagePart>,
}

/// A part of a [`WaitedIn`] stage: its name and mean µs per purchase answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagePart {
    pub stage: String,
    pub mean_us: f64,
    /// For a `COMMIT`: one flush of the disk the servers write to, at the median, as the run
    /// measured it at its start ([`crate::schema::DiskFlush`]) — the floor under a durable
    /// commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_flush_p50_us: Option<u64>,
}

/// A strategy below [`BelowBaseline::THRESHOLD_PERCENT`] of its backend's baseline, beside the
/// bare work's latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BelowBaseline {
    pub percent: f64,
    pub baseline: BaselineName,
    pub ours_per_sec: f64,
    pub baseline_per_sec: f64,
    pub concurrency: usize,
    pub p50_us: u64,
    pub baseline_p50_us: u64,
    /// The no-op HTTP round trip: its median µs and requests/s.
    pub noop: Option<(u64, f64)>,
    /// Share of attempts that ended without a sale, when any did.
    pub unsold_percent: Option<f64>,
    /// Of the attempts, those the instances' door refused before the strategy ran, when any
    /// were (absent from the reports written before they were told apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door: Option<DoorRefused>,
}

/// Attempts the instances' door refused `503 overloaded` at once, before their strategy ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoorRefused {
    /// Their share of all attempts.
    pub percent: f64,
    /// The latency budget the door let purchases in by ([`super::Settings::latency_budget_ms`]),
    /// when the run recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ms: Option<u64>,
}

impl DoorRefused {
    /// Past this share of the attempts the door's refusals are most of them: the strategy's
    /// median latency is theirs, and a fall of its rate is the door's to explain.
    pub const MOST_PERCENT: f64 = 50.0;

    /// Whether the door refused most of the attempts.
    pub fn most(&self) -> bool {
        Self::is_most(self.percent)
    }

    /// Whether a door share of `percent` of the attempts is most of them.
    pub fn is_most(percent: f64) -> bool {
        percent > Self::MOST_PERCENT
    }
}

impl BelowBaseline {
    /// Below this share of its backend baseline, a strategy gets a latency note.
    pub const THRESHOLD_PERCENT: f64 = 60.0;
}

/// A baseline beside its standard tool: whose figure is it?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFinding {
    pub baseline: BaselineName,
    pub tool: String,
    pub verdict: ToolVerdict,
}

impl ToolFinding {
    /// At or above this share of the standard tool's rate, our figure counts as the server's.
    pub const PAR_PERCENT: f64 = 80.0;
}

/// What the two figures say about our generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ToolVerdict {
    NotInstalled,
    Failed { error: String },
    Measured(ToolComparison),
}

/// Our run and the tool's on the same work and server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolComparison {
    pub ours_per_sec: f64,
    pub theirs_per_sec: f64,
    pub ours_percent: f64,
    /// CPU-seconds per 1,000 operations: our generator's, the tool's.
    pub generator_cpu_per_1000: Option<f64>,
    pub tool_cpu_per_1000: Option<f64>,
    /// The server under each.
    pub server: Option<ServerCpu>,
    /// The machine under each.
    pub machine: Option<MachineLoad>,
    pub reading: ToolReading,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerCpu {
    pub group: String,
    pub ours_per_1000: f64,
    pub ours_cores: f64,
    pub theirs_per_1000: f64,
    pub theirs_cores: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineLoad {
    pub cpus: usize,
    pub ours_busy_percent: f64,
    pub theirs_busy_percent: f64,
    /// What programs outside the run took under ours, when it mattered (≥ 0.05 cores).
    pub rest_of_machine_cores: Option<f64>,
}

/// Why our figure is what it is beside the tool's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ToolReading {
    /// Ours is at par: the server sets the figure.
    AtPar,
    /// Every core was busy under ours: our generator's CPU is taken from the server. With
    /// both runs CPU-bound, the rate goes as the inverse of the CPU per operation, which
    /// predicts ours at `predicted_percent` of the tool's.
    CpuBound {
        per_operation: Option<(f64, f64)>,
        predicted_percent: Option<f64>,
        debug_generator: bool,
    },
    /// The tool kept cores busy that ours left idle: our generator keeps less in flight.
    GeneratorIdle,
    /// Cores were idle under both: the gap is in waiting, not in CPU.
    NotCpuBound { per_operation: Option<(f64, f64)> },
    /// Without the CPU figures nothing more can be said.
    Unknown,
}

/// The benchmark's client on `GET /api/noop` beside goose and `wrk`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientCheck {
    pub ours_per_sec: f64,
    pub peers: Vec<Peer>,
    /// Ours reached less than 80% of the fastest peer.
    pub client_may_be_ceiling: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peer {
    pub name: String,
    pub per_sec: f64,
    /// Ours as a share of this peer's.
    pub ours_percent: f64,
}
