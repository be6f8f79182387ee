//! The network sweep's `network.json`: every strategy's closed loop and flash sale at each
//! distance of the servers, the server baselines at the same distances, and each strategy's
//! round trips counted. The figures only; [`super::model`] reads them.

use app::accounting::Accounting;
use app::api::{Strategy, StrategyInfo};
use serde::{Deserialize, Serialize};

use crate::phase::round_trips::RoundTrips;
use crate::schema::world::Distance;
use crate::schema::{BaselineName, CpuUse, Environment, LoadResult};

/// The schema this program writes for a sweep.
pub const SCHEMA_VERSION: u32 = 1;

/// How the sweep ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkSettings {
    /// The strategies swept (empty: every one the app offers).
    pub strategies: Vec<Strategy>,
    /// App instances of each kind: reaching the servers directly, and through the relays.
    pub instances: usize,
    /// Concurrent buyers of each closed loop.
    pub buyers: usize,
    /// The round trips the relays add, in µs, after the servers reached directly.
    pub rtts_us: Vec<u64>,
    /// Uncounted seconds of each closed loop, then its measured seconds.
    pub warmup: f64,
    pub seconds: f64,
    /// Closed loops of each strategy at each distance, interleaved.
    pub rounds: usize,
    /// Purchases counted in round trips, one at a time, per strategy.
    pub purchases_counted: u64,
    /// The flash sale at each distance: units, and clicks in all.
    pub sale_stock: i64,
    pub sale_clicks: u64,
    pub quick: bool,
    pub server_niceness: i32,
}

/// Everything one `seckill-bench network` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkReport {
    pub schema_version: u32,
    pub started_at: String,
    pub finished_at: String,
    pub duration_seconds: f64,
    pub settings: NetworkSettings,
    pub environment: Environment,
    /// The distances, in the order of every `at` list below: the servers reached directly
    /// first, then through relays adding each round trip.
    pub points: Vec<Distance>,
    pub baselines: Vec<BaselineSweep>,
    pub strategies: Vec<StrategySweep>,
}

/// A server baseline at each distance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineSweep {
    pub name: BaselineName,
    /// Its rounds combined, one per point.
    pub at: Vec<LoadResult>,
    /// The CPU of the servers, the load generator and the relays' loop while it ran, rounds
    /// summed, one per point (none in a sweep written before they were measured).
    #[serde(default)]
    pub cpu: Vec<CpuUse>,
}

/// The name of the relays' loop among a baseline's processes: one thread of the load
/// generator, which carries every relay's bytes.
pub const RELAYS_LOOP: &str = "relays' loop (in the generator)";

/// A strategy at each distance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StrategySweep {
    pub strategy: StrategyInfo,
    /// Its purchases counted, through relays adding nothing.
    pub round_trips: RoundTrips,
    /// Its closed loops, rounds combined, one per point.
    pub closed: Vec<LoadResult>,
    /// Its flash sale, one per point: what the database holds.
    pub sales: Vec<Accounting>,
}

impl NetworkReport {
    /// The index of the point of the servers reached directly, if swept.
    pub fn direct(&self) -> Option<usize> {
        self.points.iter().position(|p| *p == Distance::Local)
    }

    /// The index of the point of the relays adding nothing, if swept.
    pub fn relayed_zero(&self) -> Option<usize> {
        (self.points.iter()).position(|p| *p == Distance::Relayed { rtt_us: 0 })
    }
}
