//! The run's products and request ids, handed out: each part of the run, for each strategy,
//! gets products no other part buys and a request-id prefix no other part's ids begin with, so
//! that no part counts another's orders or replays another's purchase.
//!
//! Nothing is chosen by hand. A run's products lie in a block of [`PRODUCTS_PER_RUN`] ids drawn
//! at random, numbered in the order they are asked for: runs sharing servers (the tests, in
//! parallel on one Redis, whose keys no database separates) do not buy each other's products.
//! Each prefix is the run's id and the allotment's number, `<run>-<n>`. Every request id a part
//! sends is its prefix, a `-` and more, and no `<run>-<n>-` begins another `<run>-<m>-`: the
//! ids of two allotments never meet (and another run's begin with another run id).

use std::ops::Range;

use anyhow::{Result, ensure};
use app::api::{MAX_PRODUCT_ID, Strategy, StrategyInfo};
use rand::Rng;

use crate::drive::load::Window;
use crate::live::Feed;
use crate::measure::throughput::ThroughputPlan;

/// The products of one run's block.
pub const PRODUCTS_PER_RUN: u64 = 1 << 20;

/// The blocks drawn from: every id below 2^53, exact as a double (the numbers of Redis's Lua
/// scripts, of JavaScript); block 0, the ids below a million, is left to hand-written examples
/// and the scenarios' fixed products.
pub const BLOCKS: u64 = 1 << 33;

// The last block's last id is one the app accepts.
const _: () = assert!(BLOCKS * PRODUCTS_PER_RUN - 1 <= MAX_PRODUCT_ID);

/// What one part of the run was handed for one strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allotment {
    /// The part it was handed to: a phase's name, or `flood`, `sale`, `loops`.
    pub phase: &'static str,
    pub strategy: Strategy,
    /// Its products: every id in the range is its own.
    pub products: Range<u64>,
    /// Every request id the phase sends begins with this and a `-`.
    pub prefix: String,
}

impl Allotment {
    /// Its first product (the only one, for a phase that asked for one).
    pub fn product(&self) -> u64 {
        self.products.start
    }
}

/// Hands out [`Allotment`]s for one run, and keeps them: the tests read what each part left in
/// the database.
#[derive(Debug)]
pub struct Allocator {
    run: String,
    next_product: u64,
    end: u64,
    handed: Vec<Allotment>,
}

impl Allocator {
    /// An allocator for the run whose request ids all begin with `run` (a few random
    /// characters, a new value per run), its products in a block drawn at random.
    pub fn drawn(run: &str) -> Allocator {
        Allocator::new(run, rand::rng().random_range(1..BLOCKS))
    }

    /// An allocator for the run `run` whose products are block `block`'s.
    pub fn new(run: &str, block: u64) -> Allocator {
        assert!(
            (1..BLOCKS).contains(&block),
            "block {block} is not drawn from"
        );
        let start = block * PRODUCTS_PER_RUN;
        Allocator {
            run: run.to_string(),
            next_product: start,
            end: start + PRODUCTS_PER_RUN,
            handed: Vec::new(),
        }
    }

    /// `products` products and a request-id prefix of its own for `phase` of `strategy`; an
    /// error once the run's block is used up.
    pub fn allot(
        &mut self,
        phase: &'static str,
        strategy: Strategy,
        products: u64,
    ) -> Result<Allotment> {
        let start = self.next_product;
        ensure!(
            products <= self.end - start,
            "{products} more products do not fit in the run's {PRODUCTS_PER_RUN}"
        );
        self.next_product = start + products;
        let allotment = Allotment {
            phase,
            strategy,
            products: start..self.next_product,
            prefix: format!("{}-{}", self.run, self.handed.len()),
        };
        self.handed.push(allotment.clone());
        Ok(allotment)
    }

    /// The closed loops' plans: one for each of `strategies`, on a product and request ids of
    /// its own, `users` buyers of `quantity` a purchase in each, alike in all else.
    pub fn loop_plans(
        &mut self,
        strategies: &[StrategyInfo],
        users: usize,
        quantity: i64,
        window: Window,
        rate: Option<f64>,
        feed: &Feed,
    ) -> Result<Vec<ThroughputPlan>> {
        let plan = |info: &StrategyInfo| {
            let allotment = self.allot("loops", info.name, 1)?;
            Ok(ThroughputPlan {
                product: allotment.product(),
                strategy: info.name,
                users,
                quantity,
                window,
                rate,
                id_prefix: allotment.prefix,
                feed: feed.clone(),
            })
        };
        strategies.iter().map(plan).collect()
    }

    /// Every allotment handed, in order.
    pub fn handed(&self) -> &[Allotment] {
        &self.handed
    }

    /// Every allotment handed, in order, for the run's output.
    pub fn into_handed(self) -> Vec<Allotment> {
        self.handed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_phases_are_handed_the_same_product_or_a_request_id_prefix_of_each_other() {
        let mut ids = Allocator::new("a1b2c3d4", 7);
        let strategies = [Strategy::Conditional, Strategy::RedisLua, Strategy::Naive];
        for round in 0..12 {
            for s in strategies {
                for (phase, products) in [("sale", 1), ("loops", 1), ("other", 2), ("x", 0)] {
                    ids.allot(phase, s, products + round % 2).unwrap();
                }
            }
        }
        let mut other_run = Allocator::new("e5f6a7b8", 8);
        other_run.allot("sale", Strategy::Conditional, 1).unwrap();
        let handed: Vec<&Allotment> = ids.handed().iter().chain(other_run.handed()).collect();
        assert_eq!(handed.len(), 12 * 3 * 4 + 1);
        for (i, a) in handed.iter().enumerate() {
            assert!(a.products.start >= PRODUCTS_PER_RUN, "{a:?}");
            for b in &handed[i + 1..] {
                assert!(
                    a.products.end <= b.products.start || b.products.end <= a.products.start,
                    "{a:?} and {b:?} share a product"
                );
                let (ka, kb) = (format!("{}-", a.prefix), format!("{}-", b.prefix));
                assert!(
                    !ka.starts_with(&kb) && !kb.starts_with(&ka),
                    "{a:?} and {b:?}: one's request ids could be the other's"
                );
            }
        }
    }

    #[test]
    fn a_run_is_refused_products_past_its_block_and_the_last_block_ends_below_two_to_the_53() {
        let mut ids = Allocator::new("r", BLOCKS - 1);
        let all = ids
            .allot("sale", Strategy::Conditional, PRODUCTS_PER_RUN)
            .unwrap();
        assert_eq!(all.products.end, 1 << 53);
        assert!(all.products.end - 1 <= MAX_PRODUCT_ID);
        assert!(ids.allot("sale", Strategy::Conditional, 1).is_err());
        assert_eq!(ids.handed().len(), 1);
        let mut drawn = Allocator::drawn("r");
        let one = drawn.allot("sale", Strategy::Conditional, 1).unwrap();
        assert!(one.product() >= PRODUCTS_PER_RUN && one.product() < 1 << 53);
    }
}
