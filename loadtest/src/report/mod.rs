//! The result of a run and its three renderings: `report.md`, `report.json`, SVG charts.

pub mod charts;
pub mod explain;
pub mod json;
pub mod markdown;
pub mod progress;
pub mod scenarios;
pub mod schema;
pub mod table;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::cli::Settings;
use crate::drive::load::LoadResult;
use crate::measure::baselines::{self, Baseline, BaselineName};
use crate::measure::cpu::CpuUse;
use crate::measure::sale::SaleResult;
use crate::measure::throughput::ThroughputResult;
use crate::rig::environment::Environment;
use app::api::StrategyInfo;
use schema::ScenarioReport;

/// Everything one `seckill-bench run` measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub started_at: String,
    pub finished_at: String,
    pub duration_seconds: f64,
    pub settings: Settings,
    pub environment: Environment,
    pub baselines: Vec<Baseline>,
    /// The bare hot-row UPDATE at several connection counts ([`crate::measure::baselines::SWEEP`]).
    pub hot_row_sweep: Vec<LoadResult>,
    pub strategies: Vec<StrategyReport>,
    /// The fault scenarios, each expected against observed.
    pub scenarios: Vec<ScenarioReport>,
}

/// One strategy's three phases and its ratios to the baselines.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyReport {
    pub strategy: StrategyInfo,
    pub sale: SaleResult,
    pub throughput: ThroughputResult,
    /// The baseline of the backend that holds this strategy's stock.
    pub baseline: BaselineName,
    /// Closed-loop deductions/s as % of the backend baseline's.
    pub percent_of_backend_baseline: Option<f64>,
    /// Closed-loop attempts/s as % of the no-op HTTP baseline's requests/s.
    pub percent_of_http_noop: Option<f64>,
    /// CPU of every process over the closed-loop runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
}

impl StrategyReport {
    /// Fills in the ratios from the baselines measured in the same run.
    pub fn new(
        strategy: StrategyInfo,
        sale: SaleResult,
        throughput: ThroughputResult,
        baselines_measured: &[Baseline],
    ) -> StrategyReport {
        let baseline = baselines::for_strategy(strategy.name);
        let rate_of = |name: BaselineName, f: fn(&crate::drive::load::LoadResult) -> f64| {
            baselines_measured
                .iter()
                .find(|b| b.name == name)
                .map(|b| f(&b.result))
                .filter(|r| *r > 0.0)
        };
        let percent_of_backend_baseline = rate_of(baseline, |r| r.successes_per_sec)
            .map(|base| 100.0 * throughput.closed.successes_per_sec / base);
        let percent_of_http_noop = rate_of(BaselineName::HttpNoop, |r| r.attempts_per_sec)
            .map(|base| 100.0 * throughput.closed.attempts_per_sec / base);
        StrategyReport {
            strategy,
            sale,
            throughput,
            baseline,
            percent_of_backend_baseline,
            percent_of_http_noop,
            cpu: None,
        }
    }
}

/// Writes `report.md`, `report.json` and the charts into `dir`.
pub fn write_all(dir: &Path, report: &RunReport) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    json::write(&dir.join("report.json"), report)?;
    charts::write_all(dir, report)?;
    std::fs::write(dir.join("report.md"), markdown::render(report))
        .with_context(|| format!("writing {}", dir.join("report.md").display()))?;
    Ok(())
}

/// Points `<out>/latest` at `dir` (a relative symlink), replacing an older link.
pub fn link_latest(out: &Path, dir: &Path) -> Result<PathBuf> {
    let link = out.join("latest");
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(&link)
            .or_else(|_| std::fs::remove_dir_all(&link))
            .with_context(|| format!("replacing {}", link.display()))?;
    }
    let target = dir.file_name().context("run directory has no name")?;
    std::os::unix::fs::symlink(target, &link)
        .with_context(|| format!("linking {}", link.display()))?;
    Ok(link)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::drive::load::{LoadResult, Loop};
    use crate::measure::latency::Latencies;
    use app::accounting::{Accounting, Ledger};
    use app::api::{ErrorCode, Strategy};
    use testkit::Outcomes;

    fn load(mode: Loop, per_sec: u64) -> LoadResult {
        let mut l = Latencies::default();
        for ms in 1..=50 {
            l.record(Duration::from_millis(ms));
        }
        let outcomes = Outcomes {
            created: per_sec,
            ..Outcomes::default()
        };
        LoadResult::new(mode, 10, 1.0, outcomes, 0, &l)
    }

    fn strategy(strategy: Strategy, ledger: Ledger) -> StrategyReport {
        let info = StrategyInfo::of(strategy);
        let sale = SaleResult {
            requests: 500,
            buyers: 10,
            quantity: 1,
            seconds: 1.0,
            outcomes: Outcomes {
                created: ledger.orders as u64,
                ..Outcomes::default()
            },
            accounting: Accounting::of(ledger, 500),
            acknowledged_minus_orders: 0,
            retries: None,
            latency: Latencies::default().summary(),
            drain_seconds: None,
        };
        let throughput = ThroughputResult {
            closed: load(Loop::Closed, 400),
            open: load(Loop::Open { target_rate: 280.0 }, 280),
        };
        let baseline = Baseline {
            name: BaselineName::SqlConditional,
            what: "test".into(),
            result: load(Loop::Closed, 1000),
            cpu: None,
            standard_tool: None,
        };
        StrategyReport::new(info, sale, throughput, &[baseline])
    }

    fn report() -> RunReport {
        let ledger = |final_stock, units| Ledger {
            initial_stock: 100,
            final_stock,
            units_in_orders: units,
            orders: units,
        };
        RunReport {
            started_at: "2026-11-21T00:00:00Z".into(),
            finished_at: "2026-11-21T00:01:00Z".into(),
            duration_seconds: 60.0,
            settings: Settings {
                strategies: Vec::new(),
                instances: 2,
                stock: 100,
                buyers: 10,
                demand: 500,
                quantity: 1,
                seconds: 1.0,
                warmup: 0.0,
                repetitions: 1,
                rate: None,
                quick: true,
                baselines: true,
                scenarios: false,
                only_baselines: false,
            },
            environment: Environment {
                cpus: 2,
                cpu_model: None,
                memory_total: None,
                os: "linux".into(),
                git_commit: None,
                git_dirty: None,
                servers: "spawned",
                generator_build: "release",
                versions: BTreeMap::new(),
                mariadb: BTreeMap::new(),
                redis: BTreeMap::new(),
            },
            baselines: vec![Baseline {
                name: BaselineName::SqlConditional,
                what: "test".into(),
                result: load(Loop::Closed, 1000),
                cpu: None,
                standard_tool: None,
            }],
            hot_row_sweep: Vec::new(),
            strategies: vec![
                strategy(Strategy::Naive, ledger(20, 137)),
                strategy(Strategy::Conditional, ledger(0, 100)),
            ],
            scenarios: Vec::new(),
        }
    }

    #[test]
    fn the_explanation_quotes_the_measured_oversell_of_unsafe_strategies_only() {
        let paragraphs = explain::what_went_wrong(&report());
        assert_eq!(paragraphs.len(), 1, "{paragraphs:?}");
        let p = &paragraphs[0];
        assert!(p.contains("`naive`"), "{p}");
        assert!(p.contains("oversold by 37 unit(s)"), "{p}");
        assert!(p.contains("**57 decrement(s) were lost**"), "{p}");
    }

    #[test]
    fn ratios_to_the_backend_baseline_come_from_the_same_run() {
        let r = report();
        let p = r.strategies[1].percent_of_backend_baseline.unwrap();
        assert!((p - 40.0).abs() < 1e-9, "{p}");
    }

    #[test]
    fn every_file_of_the_report_is_written_and_names_the_strategies() {
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &report()).unwrap();
        for file in [
            "report.md",
            "report.json",
            "throughput.svg",
            "latency.svg",
            "oversell.svg",
        ] {
            let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
            assert!(
                text.contains(Strategy::Conditional.name()),
                "{file} does not name the strategy"
            );
        }
        let link = link_latest(dir.path(), &dir.path().join("run-1")).unwrap();
        assert_eq!(std::fs::read_link(link).unwrap(), Path::new("run-1"));
    }

    #[test]
    fn a_median_is_shown_with_the_range_of_its_runs_in_the_markdown_and_the_json() {
        let mut r = report();
        let runs = vec![
            load(Loop::Closed, 380),
            load(Loop::Closed, 400),
            load(Loop::Closed, 450),
        ];
        r.strategies[1].throughput.closed = crate::analyse::spread::combine(runs).unwrap();
        let md = markdown::render(&r);
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional` | mariadb"))
            .unwrap_or_else(|| panic!("no summary row:\n{md}"));
        assert!(row.contains("| 400 (380–450) |"), "{row}");
        let json: serde_json::Value = serde_json::from_str(&json::to_string(&r).unwrap()).unwrap();
        let spread =
            &json["strategies"][1]["throughput"]["closed"]["repetitions"]["successes_per_sec"];
        assert_eq!(spread["min"], 380.0, "{spread}");
        assert_eq!(spread["max"], 450.0, "{spread}");
        assert_eq!(spread["median"], 400.0, "{spread}");
    }

    #[test]
    fn where_the_time_goes_is_written_from_the_cpu_figures() {
        use crate::measure::cpu::{Process, Span};
        let processes = vec![
            Process::new("app-0", "app", 1),
            Process::new("mariadbd", "mariadbd", 2),
            Process::new("generator", "generator", 3),
        ];
        let span = |db: f64| Span {
            wall_seconds: 10.0,
            cpu_seconds: vec![Some(2.0), Some(db), Some(1.0)],
            machine_cpu_seconds: Some(12.0),
            successes: 4000.0,
        };
        let mut r = report();
        r.strategies[0].cpu = Some(span(3.0).usage(&processes));
        r.strategies[1].cpu = Some(span(9.5).usage(&processes));
        let notes = explain::where_time_goes(&r);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[1].contains("`mariadbd` was saturated (0.95 cores"),
            "{}",
            notes[1]
        );
        assert!(notes[1].contains("mariadbd 2.38"), "{}", notes[1]);
        assert!(
            notes[0].contains("No process was saturated"),
            "{}",
            notes[0]
        );
        let md = markdown::render(&r);
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional` | 0.50 / 0.20 |"))
            .unwrap_or_else(|| panic!("no CPU row:\n{md}"));
        assert!(row.ends_with("| `mariadbd` |"), "{row}");
    }

    #[test]
    fn a_baseline_below_its_standard_tool_gets_the_measured_reason_and_a_missing_tool_says_so() {
        use crate::measure::cpu::{Process, Span};
        use crate::measure::tools::{Outcome, Runs};
        let processes = vec![
            Process::new("mariadbd", "mariadbd", 1),
            Process::new("generator", "generator", 2),
        ];
        let usage = |db: f64, generator: f64, successes: f64| {
            Span {
                wall_seconds: 10.0,
                cpu_seconds: vec![Some(db), Some(generator)],
                machine_cpu_seconds: Some(19.5),
                successes,
            }
            .usage(&processes)
        };
        let mut r = report();
        r.environment.cpus = 2;
        let mut runs = Runs::default();
        runs.push(
            "mysqlslap",
            "mysqlslap …".into(),
            Outcome::Measured {
                per_sec: 2000.0,
                operations: 20_000.0,
                cpu_seconds: Some(1.0),
            },
        );
        let mut tool = runs.summary(1000.0).unwrap();
        tool.cpu = Some(usage(9.0, 0.0, 20_000.0));
        r.baselines[0].cpu = Some(usage(5.0, 9.0, 10_000.0));
        r.baselines[0].standard_tool = Some(tool);
        let notes = explain::tool_notes(&r);
        let p = &notes[0];
        assert!(p.contains("ours is 50% of it"), "{p}");
        assert!(
            p.contains("our generator spent 0.900 CPU-seconds, `mysqlslap` 0.050"),
            "{p}"
        );
        assert!(p.contains("is taken from the server"), "{p}");
        // (0.45 + 0.05) / (0.5 + 0.9) of the tool's rate.
        assert!(
            p.contains("predicts ours at 36% of `mysqlslap`'s (measured: 50%)"),
            "{p}"
        );
        let md = markdown::render(&r);
        assert!(md.contains("| `sql-conditional` | 1000 | `mysqlslap` | 2000 | 50% | 0.900 / 0.050 | 0.500 / 0.450 |"), "{md}");

        let idle = |db: f64, generator: f64, successes: f64| {
            Span {
                wall_seconds: 10.0,
                cpu_seconds: vec![Some(db), Some(generator)],
                machine_cpu_seconds: Some(12.0),
                successes,
            }
            .usage(&processes)
        };
        r.baselines[0].cpu = Some(idle(5.0, 9.0, 10_000.0));
        r.baselines[0].standard_tool.as_mut().unwrap().cpu = Some(idle(9.0, 0.0, 20_000.0));
        let p = &explain::tool_notes(&r)[0];
        assert!(p.contains("left idle under both"), "{p}");
        assert!(!p.contains("predicts"), "{p}");

        let mut missing = Runs::default();
        missing.push("mysqlslap", "mysqlslap".into(), Outcome::NotInstalled);
        r.baselines[0].standard_tool = missing.summary(1000.0);
        let notes = explain::tool_notes(&r);
        assert!(
            notes[0].contains("`mysqlslap` is not installed"),
            "{}",
            notes[0]
        );
        assert!(markdown::render(&r).contains("| `mysqlslap` | not installed | – |"));
    }

    #[test]
    fn the_report_counts_lock_lost_refusals_apart_from_sold_out() {
        let mut r = report();
        let outcomes = &mut r.strategies[1].sale.outcomes;
        for _ in 0..3 {
            outcomes.count(&testkit::Answer::Refused {
                status: 409,
                code: ErrorCode::LockLost,
            });
        }
        let md = markdown::render(&r);
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional` |") && l.contains(ErrorCode::LockLost.name()))
            .unwrap_or_else(|| panic!("no flash-sale row names lock_lost:\n{md}"));
        assert!(row.contains("lock_lost ×3"), "{row}");
        assert!(!row.contains(ErrorCode::SoldOut.name()), "{row}");
    }
}
