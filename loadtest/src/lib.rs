//! `seckill-bench`, the comparative benchmark of the flash-sale strategies and of the lock
//! backends. Run it with `cargo xtask bench` (or `cargo run --release -p loadtest --bin
//! seckill-bench -- run --quick`); see `seckill-bench --help`.
//!
//! The folders follow a run ([`run`] orchestrates them in this order):
//!
//! * [`rig`]: the servers, the `seckill-app` instances, the scenarios' fleets, the environment;
//! * [`drive`]: the closed and open loops that send the load and the latencies they record;
//! * [`measure`]: the flash sale, throughput, baselines, standard tools, CPU;
//! * [`phase`]: what each strategy goes through after its loops (the overload, the expiry
//!   sweep): one trait, one driver, one registry, and the products and request ids each is
//!   handed;
//! * [`analyse`]: medians and spreads, ratios to the baselines, the findings, the comparison
//!   of two runs;
//! * [`schema`]: what a run measured, as `report.json` holds it;
//! * [`report`]: the one model of a report (sections of prose, tables of typed cells, charts)
//!   printed as Markdown and as HTML, the run's tables and charts, the README's results,
//!   progress;
//! * [`document`]: the run's report as a list of parts — each phase's section among them — and
//!   the files it is written to.
//!
//! While it runs: [`live`], the page that shows the sale as it happens (`--live`), fed by the
//! code that measures. [`browser`] drives a real Chromium over WebDriver, for the tests of
//! both pages and their screenshots.
//!
//! Beside the run: [`scenario`] (the fault scenarios, `seckill-bench scenario <name>|all`, also
//! part of every `run`), [`lock`] (`seckill-bench lock`: the lock benchmark, the
//! requirements matrix, the Python peers), [`network`] (`seckill-bench network`: every
//! strategy with its servers at several distances, and a model of what a distance does),
//! [`isolation`] (`seckill-bench isolation`: which isolation level stops which failure, on
//! MariaDB and PostgreSQL) and [`history`] (`seckill-bench history`: the index of every
//! committed run, which `run` and `network` extend and the fall check reads).
//!
//! No folder uses one that uses, directly or through others, it back. From the bottom:
//! [`schema`] (the data every other folder fills or reads); [`analyse`] and [`rig`];
//! [`report`] (it prints what `analyse` judged); [`live`], [`history`] and [`isolation`];
//! [`drive`]; [`measure`], [`scenario`] and [`lock`]; [`phase`] (a phase measures, judges and
//! words its section, so it stands above all three); [`document`] (the report with every
//! phase's part); [`run`]; [`network`]; [`cli`].

pub mod analyse;
pub mod browser;
pub mod cli;
pub mod document;
pub mod drive;
pub mod history;
pub mod isolation;
pub mod live;
pub mod lock;
pub mod measure;
pub mod network;
pub mod phase;
pub mod report;
pub mod rig;
pub mod run;
/// A small run's report built through the analyses, for the tests of the renderings.
#[cfg(test)]
pub(crate) mod sample;
pub mod scenario;
pub mod schema;
