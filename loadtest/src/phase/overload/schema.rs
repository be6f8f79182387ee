//! One strategy under overload: an open loop offered a multiple of what its closed loop
//! bought per second, the answers split into the accepted, the `503 overloaded` and the rest,
//! and the app instances' resident memory before, during and after; and the bars it missed.

use app::api::{ErrorCode, Strategy};
use serde::{Deserialize, Serialize};

use crate::schema::{LatencySummary, LoadResult};

/// How the overload phase offers its load (the same for every strategy of a run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverloadShape {
    /// The offered rate as a multiple of the strategy's closed-loop purchases per second.
    pub factor: f64,
    /// Uncounted seconds at the offered rate before the measured ones.
    pub warmup: f64,
    pub seconds: f64,
}

/// What one strategy did when offered more than it can take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverloadResult {
    /// Its capacity: the closed loop's purchases per second (the median of its runs).
    pub capacity_per_second: f64,
    /// The open loop's rate: the shape's factor × the capacity, or the capacity and what a
    /// quarter of the machine refuses where that is less (see `phase::overload::offered`).
    pub offered_per_second: f64,
    /// Sold-out refusals per second the machine answered at most in this run (`None` in
    /// reports that did not measure it).
    #[serde(default)]
    pub refusal_ceiling_per_second: Option<f64>,
    /// Purchases the app instances work on at once, all together, before they answer
    /// `503 overloaded` (each instance's `--max-in-flight`, as the run started them).
    pub in_flight_limit: u64,
    /// Each instance's latency budget (`--latency-budget-ms`): it admits as many purchases of a
    /// strategy at once as the strategy answers in that time at its current rate (0: no such
    /// limit).
    #[serde(default)]
    pub latency_budget_ms: u64,
    /// The purchases of this strategy the instances admitted at once, all together, when the
    /// overload ended (their `seckill_admission_limit`).
    #[serde(default)]
    pub admission_limit: Option<u64>,
    /// The open loop: every answer counted by code, the tickets it could not send, the latency
    /// of all answers from their due time. Its successes per second are the accepted purchases.
    pub load: LoadResult,
    /// Latency from each request's due time (what a buyer who clicked then waited).
    pub from_due: ByAnswer,
    /// Latency from each request's actual send, of the requests sent after the warm-up: what
    /// the service took, without the time a request waited in the generator for its turn.
    pub from_send: ByAnswer,
    /// Answers the loop counted whose due-time latency did not reach this phase (the channel
    /// that carries them fell behind); counted in `load`, in no latency of `from_due`.
    pub unsplit: u64,
    pub memory: Memory,
}

impl OverloadResult {
    /// Answers `503 overloaded`.
    pub fn overloaded(&self) -> u64 {
        self.load.outcomes.refused(ErrorCode::Overloaded)
    }

    /// Every other answer that is not a purchase: other refusals, no answer, answers outside
    /// the contract.
    pub fn other(&self) -> u64 {
        self.load.outcomes.total() - self.load.outcomes.created - self.overloaded()
    }

    /// The share of the answers that were `503 overloaded`.
    pub fn refused_share(&self) -> f64 {
        self.overloaded() as f64 / (self.load.outcomes.total().max(1)) as f64
    }

    /// The share of the answers that were neither a purchase nor `503 overloaded`.
    pub fn other_share(&self) -> f64 {
        self.other() as f64 / (self.load.outcomes.total().max(1)) as f64
    }

    /// The purchases accepted per second as a share of the capacity (`None` without one).
    pub fn accepted_share(&self) -> Option<f64> {
        (self.capacity_per_second > 0.0)
            .then(|| self.load.successes_per_sec / self.capacity_per_second)
    }

    /// The purchases the instances admitted at once when the overload ended: their admission
    /// limit, or their `--max-in-flight` where they had none.
    pub fn limit_at_end(&self) -> u64 {
        self.admission_limit.unwrap_or(self.in_flight_limit)
    }
}

/// Latencies of one loop, by answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ByAnswer {
    /// New orders (`201`, or `202` where the order is placed later).
    pub accepted: LatencySummary,
    /// `503 overloaded`: refused at the door.
    pub overloaded: LatencySummary,
    /// Everything else: other refusals (`busy` after the request timeout, …), no answer,
    /// answers outside the contract.
    pub other: LatencySummary,
}

/// Resident memory (RSS) of the run's app instances, summed, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Instances whose memory could be read at every sample.
    pub instances: usize,
    /// Before the loop.
    pub before_bytes: u64,
    /// At the end of the warm-up: the connections open, the load at its rate.
    pub loaded_bytes: u64,
    /// The highest sample from the end of the warm-up to the loop's last answer: what the
    /// overload's own seconds held. (The warm-up's first moments, before an instance under a
    /// crowd narrows the purchases it admits at once, may hold more; that is the load arriving, not
    /// the overload growing.)
    pub peak_bytes: u64,
    /// Once every answer came back.
    pub after_bytes: u64,
}

impl Memory {
    /// How far the peak rose above the memory at the end of the warm-up: what the overload
    /// added while it went on.
    pub fn growth_bytes(&self) -> u64 {
        self.peak_bytes.saturating_sub(self.loaded_bytes)
    }
}

/// The bars of the overload phase a strategy missed, each with the figures that say why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverloadFinding {
    pub strategy: Strategy,
    pub misses: Vec<OverloadMiss>,
}

/// One bar of the overload phase missed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "bar", rename_all = "kebab-case")]
pub enum OverloadMiss {
    /// The p99 of accepted purchases, from their due time, reached the bar.
    SlowAccepted {
        p99_us: u64,
        bar_us: u64,
        /// The same requests timed from their actual send: the service's part.
        from_send_p99_us: u64,
        /// Purchases in the service at once on average (Little's law: accepted per second ×
        /// their mean time from the send), beside the limit that refuses the next one.
        in_flight: f64,
        in_flight_limit: u64,
        accepted_per_second: f64,
        /// `503 overloaded` answers: none means the limit never turned anyone away.
        overloaded: u64,
    },
    /// It accepted less than the bar's share of its capacity: refusing the excess cost it
    /// the purchases it could have served.
    FewAccepted {
        accepted_per_second: f64,
        capacity_per_second: f64,
        bar_share: f64,
        /// The admission limit of the instances together when the overload ended.
        in_flight_limit: u64,
    },
    /// The p99 of `503 overloaded` answers, from their due time, reached the bar.
    SlowRefusals {
        p99_us: u64,
        bar_us: u64,
        from_send_p99_us: u64,
    },
    /// Answers neither a purchase nor `503 overloaded`: the excess was not refused at the door.
    OtherAnswers {
        count: u64,
        /// Of which no answer at all (connection refused or reset, timeout).
        transport_errors: u64,
        /// The most frequent of them, in the report's words (`503 busy`, …).
        most: String,
    },
    /// The app instances' resident memory rose while the overload went on.
    MemoryGrew {
        loaded_bytes: u64,
        peak_bytes: u64,
        margin_bytes: u64,
    },
}

/// The sample run's overload, for the tests of the renderings and the analyses.
#[cfg(test)]
pub mod sample {
    use app::api::{ErrorCode, Strategy};
    use testkit::{Answer, Outcomes};

    use super::{ByAnswer, Memory, OverloadResult, OverloadShape};
    use crate::drive::latency::Latencies;
    use crate::sample::Tagged;
    use crate::schema::{LatencySummary, Loop, RunReport};

    /// Puts the overload's shape in `report`'s settings, and `conditional`'s overload at its
    /// p99s of 200 ms and 2 ms in its record.
    pub fn put(report: &mut RunReport) {
        let result = overload(200_000, 2_000, 0).result;
        crate::sample::put_phase(report, super::super::NAME, overload_shape(), result);
    }

    /// `conditional` offered 3 × 400 purchases/s for one second: 400 bought, 800 refused
    /// `503 overloaded`, the p99s given (from the due time; from the send a tenth of them), the
    /// memory rising by `growth` bytes over the window, 512 purchases at once the limit.
    pub fn overload(
        accepted_p99_us: u64,
        refused_p99_us: u64,
        growth: u64,
    ) -> Tagged<OverloadResult> {
        let mut outcomes = Outcomes::default();
        for k in 0..1200 {
            outcomes.count(&if k % 3 == 0 {
                Answer::Created {
                    fencing_token: None,
                }
            } else {
                Answer::Refused {
                    status: 503,
                    code: ErrorCode::Overloaded,
                }
            });
        }
        let summary = |count, p99_us: u64| LatencySummary {
            count,
            p50_us: p99_us / 2,
            p90_us: p99_us,
            p99_us,
            p999_us: p99_us,
            max_us: p99_us,
            mean_us: p99_us as f64 / 2.0,
        };
        let split = |divisor| ByAnswer {
            accepted: summary(400, accepted_p99_us / divisor),
            overloaded: summary(800, refused_p99_us / divisor),
            other: LatencySummary::default(),
        };
        let mut load = Latencies::default().result(
            Loop::Open {
                target_rate: 1200.0,
            },
            522,
            1.0,
            outcomes,
            0,
        );
        load.latency = summary(1200, accepted_p99_us);
        Tagged::new(
            Strategy::Conditional,
            OverloadResult {
                capacity_per_second: 400.0,
                offered_per_second: 1200.0,
                refusal_ceiling_per_second: Some(60_000.0),
                in_flight_limit: 512,
                latency_budget_ms: 250,
                admission_limit: Some(100),
                load,
                from_due: split(1),
                from_send: split(10),
                unsplit: 0,
                memory: Memory {
                    instances: 2,
                    before_bytes: 40 << 20,
                    loaded_bytes: 48 << 20,
                    peak_bytes: (48 << 20) + growth,
                    after_bytes: (48 << 20) + growth,
                },
            },
        )
    }

    /// The shape of the sample's overload phase.
    pub fn overload_shape() -> OverloadShape {
        OverloadShape {
            factor: 3.0,
            warmup: 0.5,
            seconds: 1.0,
        }
    }
}
