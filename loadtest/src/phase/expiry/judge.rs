//! The expiry phase's bar, judged once into the findings: the sweep adds at most
//! [`P99_BAR_PERCENT`] to the p99 of the purchases running beside it; and the two things that
//! would make the comparison say nothing — sweeps that expired nothing while they ran, orders
//! that expired while every sweep was paused, or other products' orders that fell due while
//! the sweeps ran.

use super::schema::{ExpiryCost, ExpiryMiss};
use crate::schema::Of;

/// What the sweep may add to the purchases' p99, in percent (the median round's).
pub const P99_BAR_PERCENT: f64 = 10.0;

/// What `costs` found wrong, strategy by strategy.
pub fn misses(costs: &[Of<'_, ExpiryCost>]) -> Vec<ExpiryMiss> {
    let mut misses = Vec::new();
    for c in costs {
        let strategy = c.strategy.name;
        if c.expired_unswept > 0 {
            misses.push(ExpiryMiss::PausedSweepExpired {
                strategy,
                expired: c.expired_unswept,
            });
        }
        if c.others_due > 0 {
            misses.push(ExpiryMiss::OthersDue {
                strategy,
                orders: c.others_due,
            });
        }
        if c.expired == 0 {
            misses.push(ExpiryMiss::NothingExpired { strategy });
            continue;
        }
        if let Some(added) = c.p99_added()
            && 100.0 * added > P99_BAR_PERCENT
        {
            misses.push(ExpiryMiss::CostlySweep {
                strategy,
                added_percent: 100.0 * added,
                bar_percent: P99_BAR_PERCENT,
                with_p99_us: c.with_sweep.latency.p99_us,
                without_p99_us: c.without_sweep.latency.p99_us,
                expired_per_second: c.expired_per_second(),
            });
        }
    }
    misses
}

#[cfg(test)]
mod tests {
    use app::api::Strategy;

    use super::*;
    use crate::phase::expiry::schema::sample::expiry_cost;

    #[test]
    fn a_sweep_adding_more_than_the_bar_to_the_median_rounds_p99_misses_it() {
        let within = expiry_cost(Strategy::Conditional, &[1.30, 1.05, 0.98], 500);
        let beyond = expiry_cost(Strategy::Batched, &[1.12, 1.20, 1.02], 500);
        let misses = misses(&[within.of(), beyond.of()]);
        assert_eq!(misses.len(), 1, "{misses:?}");
        let ExpiryMiss::CostlySweep {
            strategy,
            added_percent,
            ..
        } = &misses[0]
        else {
            panic!("{misses:?}");
        };
        assert_eq!(*strategy, Strategy::Batched);
        assert!((added_percent - 12.0).abs() < 1e-9, "{added_percent}");
    }

    #[test]
    fn sweeps_that_expired_nothing_compared_nothing() {
        let idle = expiry_cost(Strategy::Sharded, &[1.0, 1.0, 1.0], 0);
        assert_eq!(
            misses(&[idle.of()]),
            [ExpiryMiss::NothingExpired {
                strategy: Strategy::Sharded
            }]
        );
    }

    #[test]
    fn orders_expired_while_every_sweep_was_paused_spoil_the_rounds_without_it() {
        let mut leaky = expiry_cost(Strategy::RedisLua, &[1.0, 1.0, 1.0], 500);
        leaky.expired_unswept = 3;
        assert_eq!(
            misses(&[leaky.of()]),
            [ExpiryMiss::PausedSweepExpired {
                strategy: Strategy::RedisLua,
                expired: 3
            }]
        );
    }

    #[test]
    fn other_products_orders_falling_due_beside_the_sweeps_spoil_the_rounds_with_it() {
        let mut crowded = expiry_cost(Strategy::Memcached, &[1.0, 1.0, 1.0], 500);
        crowded.others_due = 11_435;
        assert_eq!(
            misses(&[crowded.of()]),
            [ExpiryMiss::OthersDue {
                strategy: Strategy::Memcached,
                orders: 11_435
            }]
        );
    }
}
