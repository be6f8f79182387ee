//! What the figures say: medians and spreads of repeated runs, each strategy in proportion to
//! the baselines, the findings of a run (computed once, stored with its figures), and what
//! changed from one run to another.

pub mod compare;
pub mod findings;
pub mod flood;
pub mod history;
pub mod ratios;
pub mod spread;
