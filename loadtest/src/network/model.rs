//! What the sweep's figures say: a model of each strategy's rate at a distance, checked
//! against the rates measured, and how the ranking moves.
//!
//! A closed loop of B buyers at a rate X waits 1/X per purchase per buyer slot (Little's law:
//! each buyer has one purchase on its way). Through relays adding nothing, a strategy sells X₀.
//! With k round trips counted per purchase, a round trip r adds k × r to each purchase, and
//! where the purchases go depends on what they share:
//!
//! - nothing held across a round trip: each buyer waits k × r more, the B buyers overlap, and
//!   1/X = 1/X₀ + k × r / B (the *unshared* bound, the most a distance can leave);
//! - every round trip under one lock all buyers of the product take (a distributed lock around
//!   the whole purchase): one purchase at a time, 1/X = 1/X₀ + k × r (the *shared* bound);
//! - in between, k_lock round trips under the lock: 1/X = 1/X₀ + k_lock × r — the model. Its
//!   k_lock is the service's own count of the calls a purchase sends under the lock (the
//!   round-trip phase's `under_lock`), so the model predicts every distance from figures taken
//!   with the relays adding nothing. A strategy that holds no lock across a call has no count;
//!   its k_lock is read from the clock at one distance (the calibration point, nearest 1 ms)
//!   as (1/X − 1/X₀) / r and predicts the others. Where the prediction and the measurement
//!   differ by more than a quarter, the report says so, beside what the clock reads.

use app::api::Strategy;

use super::schema::NetworkReport;
use crate::schema::world::Distance;

/// How far a measured rate may be from the model's before the report says so.
pub const MISS: f64 = 0.25;

/// The round trip the model is calibrated at, the nearest swept.
const CALIBRATION_US: u64 = 1_000;

/// One strategy at one distance past zero.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Its index in the report's points.
    pub point: usize,
    /// The round trip the relays added, in seconds.
    pub rtt: f64,
    /// Purchases per second, measured.
    pub measured: f64,
    /// The unshared bound: no round trip under a lock the buyers share.
    pub unshared: f64,
    /// The shared bound: every counted round trip under one lock.
    pub shared: f64,
    /// Round trips of the product's time per purchase, read from the clock at this distance:
    /// (1/X − 1/X₀) / r.
    pub under_lock: f64,
    /// The model's rate; `None` at the calibration point of a model read from the clock.
    pub predicted: Option<f64>,
}

impl Reading {
    /// The measured rate against the model's, when it predicted one: measured / predicted.
    pub fn ratio(&self) -> Option<f64> {
        self.predicted.map(|p| self.measured / p)
    }

    /// Whether the measurement is more than [`MISS`] from the model.
    pub fn missed(&self) -> bool {
        self.ratio().is_some_and(|r| (r - 1.0).abs() > MISS)
    }
}

/// One strategy's model.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyModel {
    pub strategy: Strategy,
    /// Purchases per second through relays adding nothing.
    pub base: f64,
    /// Round trips counted per purchase, every server.
    pub counted: f64,
    /// Round trips under the shared lock as the service counted them (`None`: the strategy
    /// holds no such lock across a call).
    pub lock_count: Option<f64>,
    /// Round trips of the product's time per purchase read from the clock at the calibration
    /// point.
    pub by_clock: Option<f64>,
    pub readings: Vec<Reading>,
}

impl StrategyModel {
    /// Round trips under the shared lock the model predicts with: the service's count, else
    /// the clock's reading at the calibration point.
    pub fn under_lock(&self) -> Option<f64> {
        self.lock_count.or(self.by_clock)
    }
}

/// The point the model is calibrated at: past zero, nearest [`CALIBRATION_US`].
pub fn calibration(r: &NetworkReport) -> Option<usize> {
    (r.points.iter().enumerate())
        .filter_map(|(i, p)| match p {
            Distance::Relayed { rtt_us } if *rtt_us > 0 => Some((i, *rtt_us)),
            _ => None,
        })
        .min_by_key(|(_, us)| us.abs_diff(CALIBRATION_US))
        .map(|(i, _)| i)
}

/// Every strategy's model; none without the point of relays adding nothing.
pub fn models(r: &NetworkReport) -> Vec<StrategyModel> {
    let (Some(zero), calibration) = (r.relayed_zero(), calibration(r)) else {
        return Vec::new();
    };
    let buyers = r.settings.buyers.max(1) as f64;
    r.strategies
        .iter()
        .filter_map(|s| {
            let base = s.closed.get(zero)?.successes_per_sec;
            (base > 0.0).then_some(())?;
            let counted = s.round_trips.total();
            let under = |i: usize| {
                let rtt = rtt_of(r.points[i])?;
                let x = s.closed.get(i)?.successes_per_sec;
                (x > 0.0).then(|| (1.0 / x - 1.0 / base) / rtt)
            };
            let by_clock = calibration.and_then(under);
            let lock_count = s.round_trips.under_lock;
            let under_lock = lock_count.or(by_clock);
            let readings = (r.points.iter().enumerate())
                .filter_map(|(i, p)| {
                    let rtt = rtt_of(*p).filter(|rtt| *rtt > 0.0)?;
                    let measured = s.closed.get(i)?.successes_per_sec;
                    Some(Reading {
                        point: i,
                        rtt,
                        measured,
                        unshared: rate(base, counted * rtt / buyers),
                        shared: rate(base, counted * rtt),
                        under_lock: under(i).unwrap_or(f64::NAN),
                        predicted: under_lock
                            .filter(|_| lock_count.is_some() || Some(i) != calibration)
                            .map(|k| rate(base, k.max(0.0) * rtt)),
                    })
                })
                .collect();
            Some(StrategyModel {
                strategy: s.strategy.name,
                base,
                counted,
                lock_count,
                by_clock,
                readings,
            })
        })
        .collect()
}

/// The rate of purchases taking `added` seconds more each than at `base` per second.
fn rate(base: f64, added: f64) -> f64 {
    1.0 / (1.0 / base + added)
}

/// The round trip of a relayed point, in seconds.
fn rtt_of(p: Distance) -> Option<f64> {
    match p {
        Distance::Local => None,
        Distance::Relayed { rtt_us } => Some(rtt_us as f64 / 1e6),
    }
}

/// The strategies ranked by their closed loop at point `i`, fastest first.
pub fn ranking(r: &NetworkReport, i: usize) -> Vec<(Strategy, f64)> {
    let mut ranked: Vec<(Strategy, f64)> = (r.strategies.iter())
        .filter_map(|s| Some((s.strategy.name, s.closed.get(i)?.successes_per_sec)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked
}

/// Spearman's correlation between the strategies' rates at points `a` and `b`.
pub fn rank_correlation(r: &NetworkReport, a: usize, b: usize) -> Option<f64> {
    let (x, y): (Vec<f64>, Vec<f64>) = (r.strategies.iter())
        .filter_map(|s| {
            Some((
                s.closed.get(a)?.successes_per_sec,
                s.closed.get(b)?.successes_per_sec,
            ))
        })
        .unzip();
    crate::analyse::reproduce::spearman(&x, &y)
}

/// Each strategy's place (from 1) at `a` and at `b`, those that moved `at_least` places or
/// more, the largest moves first.
pub fn movers(
    r: &NetworkReport,
    a: usize,
    b: usize,
    at_least: usize,
) -> Vec<(Strategy, usize, usize)> {
    let (first, then) = (ranking(r, a), ranking(r, b));
    let place = |list: &[(Strategy, f64)], s: Strategy| list.iter().position(|(x, _)| *x == s);
    let mut moved: Vec<(Strategy, usize, usize)> = (first.iter())
        .filter_map(|(s, _)| Some((*s, place(&first, *s)? + 1, place(&then, *s)? + 1)))
        .filter(|(_, p, q)| p.abs_diff(*q) >= at_least)
        .collect();
    moved.sort_by_key(|(_, p, q)| std::cmp::Reverse(p.abs_diff(*q)));
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_around_the_whole_purchase_meets_the_shared_bound_and_none_the_unshared() {
        // 1,000/s through the relays alone, 5 round trips, 200 buyers, 1 ms.
        let (base, k, b, r) = (1_000.0, 5.0, 200.0, 0.001);
        let shared = rate(base, k * r);
        let unshared = rate(base, k * r / b);
        assert!((shared - 1_000.0 / 6.0).abs() < 1e-9, "{shared}");
        assert!((unshared - 1_000.0 / 1.025).abs() < 1e-9, "{unshared}");
        // The clock reads back the round trips a measurement at the shared bound implies.
        assert!(((1.0 / shared - 1.0 / base) / r - k).abs() < 1e-9);
    }

    #[test]
    fn the_calibration_is_the_point_past_zero_nearest_a_millisecond() {
        let points = [
            Distance::Local,
            Distance::Relayed { rtt_us: 0 },
            Distance::Relayed { rtt_us: 500 },
            Distance::Relayed { rtt_us: 2_000 },
        ];
        let report = super::super::report::tests::report_at(&points);
        assert_eq!(calibration(&report), Some(2));
    }
}
