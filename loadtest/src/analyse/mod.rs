//! What the figures say: medians and spreads of repeated runs, and what changed from one run
//! to another.

pub mod compare;
pub mod spread;
