//! `seckill-bench`, the comparative benchmark of the flash-sale strategies and of the lock
//! backends. Run it with `cargo xtask bench` (or `cargo run --release -p loadtest --bin
//! seckill-bench -- run --quick`); see `seckill-bench --help`.
//!
//! The folders follow a run ([`run`] orchestrates them in this order):
//!
//! * [`rig`]: the servers, the `seckill-app` instances, the scenarios' fleets, the environment;
//! * [`drive`]: the HTTP client, the closed and open loops that send the load;
//! * [`measure`]: the flash sale, throughput, baselines, standard tools, CPU, latency;
//! * [`analyse`]: medians and spreads, the comparison of two runs;
//! * [`report`]: `report.md`, `report.json`, charts, progress.
//!
//! Beside the run: [`scenario`] (the fault scenarios, `seckill-bench scenario <name>|all`, also
//! part of every `run`) and [`lock`] (`seckill-bench lock`: the lock benchmark, the
//! requirements matrix, the Python peers).

pub mod analyse;
pub mod cli;
pub mod drive;
pub mod lock;
pub mod measure;
pub mod report;
pub mod rig;
pub mod run;
pub mod scenario;
