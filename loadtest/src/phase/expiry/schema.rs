//! What the expiry sweep costs the purchases running beside it: one strategy's closed loop on
//! a product whose orders fall due soon after they are placed — a share of the buyers never
//! pays, the others pay at once — run with every instance's sweep running and with every sweep
//! paused, in interleaved rounds.

use app::api::Strategy;
use serde::{Deserialize, Serialize};

use crate::schema::LoadResult;

/// How the expiry phase runs (the same for every strategy of a run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpiryShape {
    /// The product's payment window: an unpaid order falls due this long after it was placed.
    pub payment_window_ms: u64,
    /// Share of the buyers who never pay (the others pay right after buying). Reports written
    /// before it was a setting had nobody pay.
    #[serde(default = "nobody_pays")]
    pub non_payer_share: f64,
    /// Uncounted seconds of each loop before the measured ones.
    pub warmup: f64,
    pub seconds: f64,
    /// Rounds, each measuring with and without the sweep (which goes first alternates).
    pub rounds: usize,
}

fn nobody_pays() -> f64 {
    1.0
}

/// How the loops' buyers paid, every loop (with the sweep and without), warm-ups included.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpiryPayments {
    /// Orders placed.
    pub bought: u64,
    /// Of them, those whose buyer never pays.
    pub never_paid: u64,
    pub paid: u64,
    /// Payments answered `order_expired`: the deadline passed before they arrived, and their
    /// orders fell due as the unpaid ones do.
    pub too_late: u64,
    /// Payments refused otherwise (a payment the service should have taken), or unanswered.
    pub refused: u64,
}

impl ExpiryPayments {
    /// Share of the orders placed that were left to fall due: never paid, or paid too late.
    pub fn unpaid_share(&self) -> f64 {
        (self.never_paid + self.too_late) as f64 / self.bought.max(1) as f64
    }
}

/// One strategy's purchases with the expiry sweep beside them and without.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpiryCost {
    /// The closed loops while every instance swept: the median run, every run's figures in
    /// its repetitions.
    pub with_sweep: LoadResult,
    /// The same loops while every instance's sweep was paused.
    pub without_sweep: LoadResult,
    /// Each round's p99 of purchases with the sweep ÷ the same round's without it.
    pub p99_ratios: Vec<f64>,
    /// Orders the sweeps expired during the loops with them (warm-up included), all rounds.
    pub expired: u64,
    /// Seconds those loops lasted, warm-ups included.
    pub swept_seconds: f64,
    /// Orders expired during the loops without the sweep: none, unless a pause failed.
    pub expired_unswept: u64,
    /// Reserved orders of other products that fell due during the loops with the sweep: none,
    /// unless an earlier phase left some behind. The sweeps expire the oldest first, so they
    /// would have spent those loops on them.
    #[serde(default)]
    pub others_due: u64,
    /// How its buyers paid.
    #[serde(default)]
    pub payments: ExpiryPayments,
    /// The seller's lock the sweeps' returns took during the loops with them (units sold
    /// through an unfenced locked strategy go back under its lock).
    #[serde(default)]
    pub return_lock: ReturnLockUse,
}

/// How the returns of the loops with the sweep used the seller's lock, every instance's
/// counters (`seckill_return_lock*`) read before and after each of those loops.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReturnLockUse {
    /// Times a return took the lock.
    pub taken: u64,
    /// Seconds returns spent waiting for it, all together.
    pub waited_seconds: f64,
    /// Seconds returns held it, all together: what the purchases queued for the lock waited
    /// behind.
    pub held_seconds: f64,
}

impl ReturnLockUse {
    /// The mean hold of one return, in milliseconds; `None` when no return took the lock.
    pub fn held_ms_each(&self) -> Option<f64> {
        (self.taken > 0).then(|| 1000.0 * self.held_seconds / self.taken as f64)
    }

    /// The mean wait of one return for the lock, in milliseconds.
    pub fn waited_ms_each(&self) -> Option<f64> {
        (self.taken > 0).then(|| 1000.0 * self.waited_seconds / self.taken as f64)
    }
}

impl ExpiryCost {
    /// What the sweep added to the p99 of purchases, as a share: the median round's ratio − 1.
    pub fn p99_added(&self) -> Option<f64> {
        let mut ratios = self.p99_ratios.clone();
        ratios.sort_by(f64::total_cmp);
        let middle = *ratios.get(ratios.len().checked_sub(1)? / 2)?;
        Some(middle - 1.0)
    }

    /// Orders the sweeps expired per second while they ran.
    pub fn expired_per_second(&self) -> f64 {
        self.expired as f64 / self.swept_seconds.max(f64::MIN_POSITIVE)
    }
}

/// What the expiry phase found wrong with one strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "bar", rename_all = "kebab-case")]
pub enum ExpiryMiss {
    /// The sweep added more than `bar_percent` to the purchases' p99 (the median round).
    CostlySweep {
        strategy: Strategy,
        added_percent: f64,
        bar_percent: f64,
        with_p99_us: u64,
        without_p99_us: u64,
        expired_per_second: f64,
    },
    /// The sweeps expired nothing while they ran: the rounds compared nothing.
    NothingExpired { strategy: Strategy },
    /// Orders expired while every sweep was paused: the rounds without it were not.
    PausedSweepExpired { strategy: Strategy, expired: u64 },
    /// Orders of other products fell due while the sweeps ran: the rounds with the sweep
    /// measured the expiry of those too, ahead of the loop's own.
    OthersDue { strategy: Strategy, orders: u64 },
}

impl ExpiryMiss {
    /// The strategy whose rounds this miss leaves comparing nothing (all but a costly sweep).
    pub fn spoilt(&self) -> Option<Strategy> {
        match self {
            ExpiryMiss::CostlySweep { .. } => None,
            ExpiryMiss::NothingExpired { strategy }
            | ExpiryMiss::PausedSweepExpired { strategy, .. }
            | ExpiryMiss::OthersDue { strategy, .. } => Some(*strategy),
        }
    }
}

/// The sample run's expiry sweep, for the tests of the renderings and the analyses.
#[cfg(test)]
pub mod sample {
    use app::api::Strategy;

    use super::{ExpiryCost, ExpiryPayments, ExpiryShape, ReturnLockUse};
    use crate::sample::{Tagged, load};
    use crate::schema::{Loop, RunReport};

    /// Puts the expiry phase's shape in `report`'s settings, and `conditional`'s rounds in its
    /// record.
    pub fn put(report: &mut RunReport) {
        let cost = expiry_cost(Strategy::Conditional, &[1.04, 1.08, 0.97], 900).result;
        crate::sample::put_phase(report, super::super::NAME, expiry_shape(), cost);
    }

    /// A strategy's expiry phase: one round per ratio, the loop without the sweep at p99 10 ms and
    /// the one with it at `ratio` × that, `expired` orders expired in 2 s of sweeping.
    pub fn expiry_cost(strategy: Strategy, ratios: &[f64], expired: u64) -> Tagged<ExpiryCost> {
        let with_p99 = |ratio: f64| {
            let mut run = load(Loop::Closed, 400);
            run.latency.p99_us = (10_000.0 * ratio).round() as u64;
            run
        };
        let mut sorted = ratios.to_vec();
        sorted.sort_by(f64::total_cmp);
        Tagged::new(
            strategy,
            ExpiryCost {
                with_sweep: with_p99(sorted[(sorted.len() - 1) / 2]),
                without_sweep: with_p99(1.0),
                p99_ratios: ratios.to_vec(),
                expired,
                swept_seconds: 2.0,
                expired_unswept: 0,
                others_due: 0,
                payments: ExpiryPayments {
                    bought: 10 * expired / 3,
                    never_paid: expired,
                    paid: 10 * expired / 3 - expired,
                    too_late: 0,
                    refused: 0,
                },
                return_lock: ReturnLockUse::default(),
            },
        )
    }

    /// The shape of the sample's expiry phase.
    pub fn expiry_shape() -> ExpiryShape {
        ExpiryShape {
            payment_window_ms: 500,
            non_payer_share: 0.3,
            warmup: 0.3,
            seconds: 1.0,
            rounds: 3,
        }
    }
}
