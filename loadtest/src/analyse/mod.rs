//! What the figures say: medians and spreads of repeated runs, each strategy in proportion to
//! the baselines, the findings of a run (computed once, stored with its figures; a registered
//! phase's bars are in its own files, under `crate::phase`), what changed from one run to
//! another, what fell by more than half against the best run on the machine, and what of a
//! run another machine can reproduce (its order and its ratios).

pub mod compare;
pub mod falls;
pub mod findings;
pub mod history;
pub mod other_engine;
pub mod ratios;
pub mod reproduce;
pub mod spread;
