//! What a run measures: the flash sale (correctness, from the database), throughput (closed
//! and open loop), the service offered more than it can take (and its memory meanwhile), the
//! baselines and the standard tools beside them, CPU and latency, and what the expiry sweep
//! costs the purchases beside it.

pub mod baselines;
pub mod cashier;
pub mod cpu;
pub mod expiry;
pub mod flood;
pub mod memory;
pub mod overload;
pub mod refusals;
pub mod resale;
pub mod sale;
pub mod throughput;
pub mod tools;
