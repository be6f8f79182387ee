//! `seckill-bench`, the comparative benchmark of the flash-sale strategies and of the lock
//! backends. Run it with `cargo xtask bench` (or `cargo run --release -p loadtest --bin
//! seckill-bench -- run --quick`); see `seckill-bench --help`.
//!
//! `run` starts throwaway servers (or uses external ones, `SECKILL_EXTERNAL=1`), starts K
//! `seckill-app` processes, and for every strategy measures a flash sale (correctness, from
//! the database), closed- and open-loop throughput (medians of interleaved runs, [`repeat`]),
//! baselines that put every figure in proportion, the standard tools beside them ([`tools`])
//! and the CPU of every process ([`cpu`]); it writes `results/<UTC timestamp>/` with `report.md`, `report.json` and SVG
//! charts. `lock` measures one lock backend under contention and counts mutual-exclusion
//! violations; `lock matrix` sets every backend against every requirement of a lock service
//! ([`lock::matrix`]). `compare` says what changed between two runs ([`compare`]).
//!
//! One module per concern: [`cli`], [`apps`] (app processes, for the run and the scenarios),
//! [`client`] (the one HTTP client and answer type, over `app::api`; the load's requests go
//! over [`connections`]), [`load`]
//! (the one load driver, closed and open loop), [`sale`], [`throughput`], [`baselines`] (with
//! [`goose_noop`], the check on our own client), [`latency`], [`environment`],
//! [`report`], [`lock`], [`run`], and [`scenario`] (the fault scenarios: `seckill-bench
//! scenario <name>|all`, and part of every `run`).

pub mod apps;
pub mod baselines;
pub mod cli;
pub mod client;
pub mod compare;
pub mod connections;
pub mod cpu;
pub mod dedicated;
pub mod environment;
pub mod goose_noop;
pub mod latency;
pub mod load;
pub mod lock;
pub mod progress;
pub mod repeat;
pub mod report;
pub mod run;
pub mod sale;
pub mod scenario;
pub mod throughput;
pub mod tools;
