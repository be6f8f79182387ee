//! What a run measures: the flash sale (correctness, from the database), throughput (closed
//! and open loop), the baselines and the standard tools beside them, CPU, latency and memory,
//! the machine's ceiling of refusals, and a buyer who pays. The phases (the flood, the
//! overload, the expiry sweep) are in [`crate::phase`].

pub mod baselines;
pub mod cashier;
pub mod cpu;
pub mod memory;
pub mod refusals;
pub mod sale;
pub mod stages;
pub mod throughput;
pub mod tools;
