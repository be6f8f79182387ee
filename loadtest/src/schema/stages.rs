//! Where a purchase's time went in the closed loop, as the service itself timed it.

use serde::{Deserialize, Serialize};

/// One strategy's purchases over its closed-loop rounds, from every instance's
/// `seckill_purchase_stage_seconds` and `seckill_purchase_duration_seconds`, read before and
/// after each round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageTimes {
    /// Purchases the service answered, and their mean time in it (from the headers to the
    /// answer), µs.
    pub purchases: u64,
    pub mean_us: f64,
    /// Each stage some of them went through.
    pub stages: Vec<StageTime>,
}

/// One stage: the purchases that went through it and their mean time there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageTime {
    /// As the service names it (`admission`, `strategy`, `lock_wait`, `queued`, `batch`,
    /// `script`, `order_write`).
    pub stage: String,
    pub purchases: u64,
    pub mean_us: f64,
}

impl StageTimes {
    /// The mean µs of `stage`, if some purchases went through it.
    pub fn mean_of(&self, stage: &str) -> Option<f64> {
        (self.stages.iter())
            .find(|s| s.stage == stage)
            .map(|s| s.mean_us)
    }
}
