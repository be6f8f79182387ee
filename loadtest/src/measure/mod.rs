//! What a run measures: the flash sale (correctness, from the database), throughput (closed
//! and open loop), the flood with its second act and its first-come crowd, the baselines and the standard tools beside
//! them, CPU, latency and memory. The phases measured after each strategy's loops (the
//! overload, the expiry sweep) are in [`crate::phase`].

pub mod baselines;
pub mod cashier;
pub mod cpu;
pub mod crowd;
pub mod first_come;
pub mod flood;
pub mod memory;
pub mod refusals;
pub mod resale;
pub mod sale;
pub mod stages;
pub mod throughput;
pub mod tools;
