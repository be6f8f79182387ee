//! How many purchases of one strategy an instance admits at once: one trait, [`Limit`], in the
//! shape of Netflix's concurrency-limits (`getLimit`, `onSample`), and its policies — [`Fixed`],
//! a number, and [`Little`], as many as the strategy answers within the latency budget.
//!
//! A limit only reads samples and says a number. The limiter ([`super::Limiter`]) counts the
//! purchases in flight, refuses one past the number and hands every limit the same samples, so
//! another policy (a gradient, AIMD on a drop) is one more implementation here, and the
//! limiter, its metrics and its tests stay as they are.

mod little;

use std::time::{Duration, Instant};

pub use little::Little;

/// An admission limit of one strategy in one instance.
///
/// # Contract
///
/// * [`Limit::limit`] is read on every admission, from any core at once: a load, not a
///   computation. The limiter admits a purchase while fewer than that many are in flight.
/// * [`Limit::update`] is called once as a purchase asks to be admitted (its sample ends
///   nothing: time passing, which a windowed limit needs to close a window while nothing is
///   answered) and once as every admitted purchase ends, from any core at once.
/// * A limit never says less than 1: a strategy refused everything could never show that it
///   answers again.
pub trait Limit: Send + Sync + std::fmt::Debug {
    /// The purchases admitted at once now.
    fn limit(&self) -> u32;

    /// Learns from what the limiter saw at one moment.
    fn update(&self, sample: Sample);
}

/// What the limiter saw at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Instant,
    /// The strategy's purchases in flight then (a purchase that ended no longer counted).
    pub in_flight: u32,
    /// The purchase that ended then; `None` when one asked to be admitted.
    pub ended: Option<Ended>,
}

/// How an admitted purchase ended.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// From its admission to its answer.
    pub inside: Duration,
    /// `false` for a purchase the strategy turned away for want of room (its bounded queue
    /// full): the door's refusal, made late, and not one of the answers the strategy can give.
    pub answered: bool,
}

/// A limit that learns nothing: `--latency-budget-ms 0`, or a strategy's own bound.
#[derive(Debug)]
pub struct Fixed(u32);

impl Fixed {
    pub fn new(limit: u32) -> Fixed {
        Fixed(limit.max(1))
    }
}

impl Limit for Fixed {
    fn limit(&self) -> u32 {
        self.0
    }

    fn update(&self, _: Sample) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_limit_stays_where_it_was_set_whatever_the_purchases_saw() {
        let fixed = Fixed::new(3);
        for inside in [1, 1_000, 60_000] {
            fixed.update(Sample {
                at: Instant::now(),
                in_flight: 3,
                ended: Some(Ended {
                    inside: Duration::from_millis(inside),
                    answered: true,
                }),
            });
        }
        assert_eq!(fixed.limit(), 3);
        assert_eq!(Fixed::new(0).limit(), 1, "never below one");
    }
}
