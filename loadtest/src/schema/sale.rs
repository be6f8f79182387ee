//! One strategy's flash sale and its loops.

use app::accounting::Accounting;
use app::api::ErrorCode;
use serde::{Deserialize, Serialize};
use testkit::Outcomes;

use super::{BaselineName, CpuUse, LatencySummary, LoadResult};

/// What a strategy's closed and open loops measured, and their ratios to the baselines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Loops {
    pub throughput: ThroughputResult,
    /// The baseline of the backend that holds this strategy's stock.
    pub baseline: BaselineName,
    /// Closed-loop deductions/s as % of the backend baseline's.
    pub percent_of_backend_baseline: Option<f64>,
    /// Closed-loop attempts/s as % of the no-op HTTP baseline's requests/s.
    pub percent_of_http_noop: Option<f64>,
    /// CPU of every process over the closed-loop runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
    /// Where its purchases' time went in the closed-loop runs, as the service timed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<super::StageTimes>,
    /// On a Galera cluster: the transactions it aborted over the closed-loop runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborts: Option<crate::schema::world::Aborts>,
    /// With the rows on a primary and a replica: how far the replica fell behind under the
    /// closed-loop runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaLag>,
}

/// The flash sale's result: what the buyers were told next to the database's truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaleResult {
    pub requests: u64,
    pub buyers: usize,
    pub quantity: i64,
    pub seconds: f64,
    /// What the clients were told.
    pub outcomes: Outcomes,
    /// What the database holds.
    pub accounting: Accounting,
    /// 201 answers whose order is not in the database (negative: orders nobody was told of).
    pub acknowledged_minus_orders: i64,
    /// Retries the app reported in `/metrics` during the sale, where it reports them.
    pub retries: Option<f64>,
    pub latency: LatencySummary,
    /// Seconds from the end of the load until no accepted order was waiting in the stream
    /// (stream strategies only); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_seconds: Option<f64>,
    /// Times a buyer turned away at the door (`503 overloaded`) clicked again, at most (0 in
    /// runs recorded before buyers did: nobody retried).
    #[serde(default)]
    pub door_retries: u32,
}

impl SaleResult {
    /// Requests answered neither with an order nor with `sold_out`.
    pub fn turned_away(&self) -> u64 {
        let o = &self.outcomes;
        o.total() - o.created - o.replayed - o.refused(ErrorCode::SoldOut)
    }

    /// Whether most of the requests turned away were refused at the door (`503 overloaded`).
    pub fn turned_away_at_the_door(&self) -> bool {
        2 * self.outcomes.refused(ErrorCode::Overloaded) > self.turned_away()
    }
}

/// A strategy's throughput: the median closed loop and one open loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputResult {
    /// The median closed-loop run, with the spread of every run.
    pub closed: LoadResult,
    /// One open-loop run at a share of the median closed loop's rate: it measures latency at
    /// a set load, and its throughput is the rate asked.
    pub open: LoadResult,
}

/// How far the replica fell behind the primary under one strategy's closed loops: watched
/// while each round ran, and its catch-up timed once the round's load stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaLag {
    /// Transactions the primary committed while the rounds ran (the replica applies as many).
    #[serde(default)]
    pub transactions: u64,
    /// The most transactions the primary had logged and the replica had not yet applied, at
    /// any sample of any round.
    pub most_behind: u64,
    /// The longest a round's replica then took, once the load stopped, to apply what it still
    /// had to, in milliseconds.
    pub longest_catch_up_ms: u64,
    /// Rounds at whose end a semi-synchronous primary had fallen back to asynchronous
    /// replication (0 for an asynchronous one).
    pub rounds_asynchronous: u32,
}

impl ReplicaLag {
    /// This and `other`, the worst of each.
    pub fn add(&mut self, other: ReplicaLag) {
        self.transactions += other.transactions;
        self.most_behind = self.most_behind.max(other.most_behind);
        self.longest_catch_up_ms = self.longest_catch_up_ms.max(other.longest_catch_up_ms);
        self.rounds_asynchronous += other.rounds_asynchronous;
    }
}
