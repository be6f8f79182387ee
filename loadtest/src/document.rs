//! The run's report as one model: its parts in the order they are read, each a [`Section`]
//! with the name a page links it by, built from the schema, the findings and each registered
//! phase's section; and the files they are written to. `report.md`
//! ([`crate::report::markdown`]) and `report.html` ([`crate::report::html`]) print these parts
//! and decide nothing about what they hold.

use std::path::Path;

use anyhow::{Context, Result};

use crate::phase::REGISTRY;
use crate::report::section::{Part, Section};
use crate::report::{charts, falls, other_engine, prose, stages, tables};
use crate::schema::comparison::Comparison;
use crate::schema::{RunReport, json};

/// Writes `report.md`, `report.json`, the charts and `report.html` (with the comparison with
/// an earlier run, when given) into `dir`.
pub fn write_all(dir: &Path, report: &RunReport, compared: Option<&Comparison>) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    json::write(&dir.join("report.json"), report)?;
    write_renderings(dir, report, compared)
}

/// Writes what [`write_all`] renders from the report — `report.md`, the charts,
/// `report.html` — leaving `report.json` as it is.
pub fn write_renderings(
    dir: &Path,
    report: &RunReport,
    compared: Option<&Comparison>,
) -> Result<()> {
    let mut charts = charts::all(report)?;
    for phase in REGISTRY {
        charts.extend(phase.charts(report)?);
    }
    for chart in &charts {
        let path = dir.join(&chart.file);
        std::fs::write(&path, &chart.svg).with_context(|| format!("writing {}", path.display()))?;
    }
    for (file, text) in [
        ("report.md", markdown(report)),
        ("report.html", html(report, &charts, compared)),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `report.md`.
pub fn markdown(r: &RunReport) -> String {
    crate::report::markdown::render(&title(r), &parts(r))
}

/// `report.html`, each of `charts` drawn where a part places it, and the comparison with
/// another run, when given, after the summary.
pub fn html(r: &RunReport, charts: &[charts::Chart], compared: Option<&Comparison>) -> String {
    let parts = parts(r);
    let summary = parts.iter().position(|p| p.id == SUMMARY);
    let (before, after) = parts.split_at(summary.map_or(0, |i| i + 1));
    crate::report::html::render(&title(r), (before, after), charts, compared)
}

/// The summary's part: the comparison with another run follows it on the page.
const SUMMARY: &str = "summary-section";

/// The report's title.
pub fn title(r: &RunReport) -> String {
    format!("seckill-bench run, {}", r.started_at)
}

/// The report's parts, in order; a part with nothing to say is left out.
pub fn parts(r: &RunReport) -> Vec<Part> {
    let mut fell = Section::default();
    fell.warning(falls::markdown(falls::AGAINST_BEST, &r.falls));
    let mut parts = vec![
        Part::new("falls", "fell by half", fell),
        Part::new(SUMMARY, "summary", summary(r)),
    ];
    for phase in REGISTRY {
        parts.push(Part::new(phase.name(), phase.label(), phase.section(r)));
    }
    parts.extend([
        Part::new("findings", "what went wrong", went_wrong(r)),
        Part::new("sale", "flash sale", accounting(r)),
        Part::new("throughput", "throughput", throughput(r)),
        Part::new("stages", "stages", stages::section(r)),
        Part::new("baselines", "baselines", baselines(r)),
        Part::new("other-engine", "the other engine", other_engine::section(r)),
        Part::new("time", "where the time goes", time(r)),
        Part::new("environment-section", "environment", environment(r)),
    ]);
    parts.retain(|p| !p.section.is_empty());
    parts
}

/// How the run was made, the summary table and its charts.
fn summary(r: &RunReport) -> Section {
    let s = &r.settings;
    let mut out = Section::default();
    out.prose(format!(
        "{} strategies on {} app instance(s); flash sale of {} units to {} concurrent buyers \
         sending {} requests of {} unit(s){}; each closed-loop and baseline figure is the median \
         of {} run(s) of {} s (each after {} s warm-up), interleaved across strategies and \
         across baselines, with min–max in parentheses; one open loop of {} s at {}. Total \
         run time {:.0} s.{}",
        r.sold().count(),
        s.instances,
        s.stock,
        s.buyers,
        s.demand,
        s.quantity,
        prose::sale_door(r),
        s.repetitions,
        s.seconds,
        s.warmup,
        s.seconds,
        s.rate.map_or_else(
            || format!(
                "{:.0}% of each strategy's closed-loop attempts/s",
                100.0 * s.open_rate_share
            ),
            |r| format!("{r} requests/s")
        ),
        r.duration_seconds,
        prose::priority(s.server_niceness),
    ));
    out.heading(2, "Summary");
    out.table(tables::summary(r));
    for chart in ["throughput", "latency", "oversell"] {
        out.chart(format!("{chart}.svg"), chart);
    }
    out
}

/// Each sale that broke an invariant, each phase's misses, and each fault scenario, in words.
fn went_wrong(r: &RunReport) -> Section {
    let mut out = Section::titled("What went wrong and why");
    if r.findings.sales.is_empty() {
        out.prose("Every strategy kept every invariant in this run.");
    }
    for f in &r.findings.sales {
        if let Some(s) = r.strategy(f.strategy) {
            out.prose(prose::sale(&s, f, r.settings.instances));
        }
    }
    for phase in REGISTRY {
        if let Some(words) = phase.went_wrong(r) {
            out.prose(words);
        }
    }
    for s in &r.strategies {
        for u in &s.unmeasured {
            out.warning(format!(
                "The {} phase of `{}` could not be measured, so its figures are missing from \
                 this report (the run went on): {}",
                u.phase, s.strategy.name, u.error
            ));
        }
    }
    if !r.scenarios.is_empty() {
        out.heading(3, "Fault scenarios");
        out.prose(
            "Each scenario starts its own servers and app instances, injects one fault, and \
             compares what each strategy or lock was expected to do with what it did. For a \
             deliberately broken variant, *pass* means its failure showed.",
        );
        for s in &r.scenarios {
            out.scenario(s.clone());
        }
    }
    out
}

fn accounting(r: &RunReport) -> Section {
    let mut out = Section::titled("Flash sale: the database's accounting");
    out.prose(
        "sold = Σ order quantities; oversell = max(0, sold − S); lost updates = sold − (S − \
         final stock) when positive; undersell = units left although demand exceeded supply. \
         The answers are what the clients were told, each code counted apart.",
    );
    out.table(tables::accounting(r));
    out
}

fn throughput(r: &RunReport) -> Section {
    let mut out = Section::titled("Throughput, closed loop");
    out.table(tables::closed_loops(r));
    out.heading(
        2,
        "Throughput, open loop (latency from the intended send time)",
    );
    out.table(tables::open_loops(r));
    if r.sold().any(|x| x.cpu.is_some()) {
        out.heading(2, "CPU per 1,000 deductions (closed loop)");
        out.prose(
            "From `/proc/<pid>/stat` before and after each closed-loop run, all runs together: \
             CPU-seconds per 1,000 deductions / cores busy on average, per process group; \
             *saturated* is a process at ≥ 0.9 cores. *Rest* is what programs outside the run \
             took of the machine.",
        );
        out.table(tables::cpu(r));
        let unread: Vec<String> = (r.sold())
            .filter_map(|x| {
                let names = &x.cpu.as_ref()?.unread;
                (!names.is_empty()).then(|| format!("`{}` ({})", x.strategy.name, code(names)))
            })
            .collect();
        if !unread.is_empty() {
            out.prose(format!(
                "Not read, so left out of the table and counted in *rest*: the CPU of a process \
                 that ended during the measurement — {}.",
                unread.join("; ")
            ));
        }
    }
    out
}

/// Names in code, comma-separated.
fn code(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(", ")
}

fn baselines(r: &RunReport) -> Section {
    let mut out = Section::titled("Baselines (nothing of ours in between)");
    if r.baselines.is_empty() {
        out.prose("Skipped (`--no-baselines`).");
    } else {
        out.table(tables::baselines(r));
        if let Some(check) = &r.findings.client {
            out.prose(prose::client(check));
        }
        if r.baselines.iter().any(|b| b.standard_tool.is_some()) {
            out.heading(3, "Ours beside the standard tools");
            out.prose(
                "The same work on the same server in the same rounds, driven by the tool \
                 people trust for it; medians with min–max. CPU-seconds per 1,000 \
                 operations.",
            );
            out.table(tables::tools(r));
            for f in &r.findings.tools {
                out.prose(prose::tool(f));
            }
        }
    }
    if !r.hot_row_sweep.is_empty() {
        out.heading(3, "The hot row at several connection counts");
        out.prose(
            "The bare `UPDATE … SET stock = stock - 1` on one row, one task per connection: \
             how the database's hot-row ceiling depends on how many contend for it.",
        );
        out.table(tables::hot_row_sweep(&r.hot_row_sweep));
    }
    out
}

/// Where each strategy's time went, in words; nothing when no strategy was read.
fn time(r: &RunReport) -> Section {
    let mut out = Section::default();
    if r.findings.time.is_empty() {
        return out;
    }
    out.heading(2, "Where the time goes");
    for f in &r.findings.time {
        if let Some(s) = r.strategy(f.strategy) {
            out.prose(prose::time(&s, f));
        }
    }
    out
}

fn environment(r: &RunReport) -> Section {
    let mut out = Section::titled("Environment");
    out.table(tables::environment(r));
    out
}

#[cfg(test)]
mod tests {
    use crate::report::link_latest;
    use app::api::{ErrorCode, Strategy};

    use super::*;
    use crate::sample::{load, report};
    use crate::schema::Loop;

    #[test]
    fn a_phase_that_could_not_measure_a_strategy_is_named_on_both_pages_and_kept_in_the_json() {
        let mut r = report();
        let record = r.record_mut(&app::api::StrategyInfo::of(Strategy::Naive));
        record.unmeasured.push(crate::schema::Unmeasured {
            phase: "expiry".into(),
            error: "PUT /api/expiry: connection reset".into(),
        });
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &r, None).unwrap();
        let said = "The expiry phase of `naive` could not be measured";
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(md.contains(said) && md.contains("connection reset"), "{md}");
        let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
        assert!(html.contains("could not be measured"), "not on the page");
        assert_eq!(json::read(dir.path()).unwrap(), r);
    }

    #[test]
    fn a_process_whose_cpu_could_not_be_read_is_named_below_the_cpu_table_on_both_pages() {
        let mut r = report();
        let record = r.record_mut(&app::api::StrategyInfo::of(Strategy::Conditional));
        record.loops.as_mut().expect("the sample's loops").cpu = Some(crate::schema::CpuUse {
            wall_seconds: 1.0,
            successes: 100.0,
            processes: Vec::new(),
            saturated: None,
            machine_busy_cores: Some(1.0),
            rest_of_machine_cores: Some(0.4),
            unread: vec!["app-0".into()],
        });
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &r, None).unwrap();
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(
            md.contains("Not read") && md.contains("`conditional` (`app-0`)"),
            "{md}"
        );
        let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
        assert!(html.contains("Not read"), "not on the page");
        assert_eq!(json::read(dir.path()).unwrap(), r);
    }

    #[test]
    fn every_file_of_the_report_is_written_and_names_the_strategies() {
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &report(), None).unwrap();
        for file in [
            "report.md",
            "report.json",
            "report.html",
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
    fn the_report_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let written = report();
        write_all(dir.path(), &written, None).unwrap();
        assert_eq!(json::read(dir.path()).unwrap(), written);
    }

    #[test]
    fn a_flood_with_its_noop_flood_reads_back_and_says_which_bars_it_missed() {
        use crate::phase::flood::schema::sample;
        use crate::phase::flood::{NAME, found};
        let mut r = report();
        // The two below alone: the sample's own flood of `conditional` is faster than both.
        crate::sample::phases(&mut r, Strategy::Conditional).retain(|name| name != NAME);
        let mut not_sold_out = sample::flood(Strategy::Sharded, 2_200.0, 1_000.0, 75.0);
        not_sold_out.crowd.accounting.final_stock = 3;
        not_sold_out.after_sold_out = None;
        for flood in [
            sample::flood(Strategy::Batched, 2_500.0, 1_000.0, 63.0),
            not_sold_out,
        ] {
            crate::sample::phases(&mut r, flood.strategy.name).put(NAME, flood.result);
        }
        r.findings = crate::phase::findings(&r);
        assert_eq!(found(&r.findings).len(), 2, "{:?}", found(&r.findings));
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &r, None).unwrap();
        assert_eq!(json::read(dir.path()).unwrap(), r);
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        let row = |name: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| `{name}` | safe |")))
                .unwrap_or_else(|| panic!("no flood row of {name}:\n{md}"))
                .to_owned()
        };
        assert!(
            row("batched").contains("| 2.50× (1000 ms) |"),
            "{}",
            row("batched")
        );
        assert!(
            row("sharded").contains("| not sold out | 2.20× (1000 ms) |"),
            "{}",
            row("sharded")
        );
        assert!(
            md.contains("- `batched` refused the sold-out product at 63% of the rate"),
            "{md}"
        );
        assert!(
            md.contains(
                "- The fastest safe strategy, `sharded`, answered every click 2200 ms after the \
                 opening, 2.20× the 1000 ms"
            ),
            "{md}"
        );
        let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
        assert!(
            html.contains("refused the sold-out product at 63% of the rate"),
            "{html}"
        );
    }

    #[test]
    fn a_median_is_shown_with_the_range_of_its_runs_in_the_markdown_and_the_json() {
        let mut r = report();
        let runs = vec![
            load(Loop::Closed, 380),
            load(Loop::Closed, 400),
            load(Loop::Closed, 450),
        ];
        r.strategies[1].loops.as_mut().unwrap().throughput.closed =
            crate::analyse::spread::combine(runs).unwrap();
        let md = markdown(&r);
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional` | mariadb"))
            .unwrap_or_else(|| panic!("no summary row:\n{md}"));
        assert!(row.contains("| 400 (380–450) |"), "{row}");
        let spread = json::parse(&json::to_string(&r).unwrap())
            .unwrap()
            .strategies[1]
            .loops
            .as_ref()
            .unwrap()
            .throughput
            .closed
            .repetitions
            .clone()
            .unwrap()
            .successes_per_sec;
        assert_eq!(
            (spread.min, spread.median, spread.max),
            (380.0, 400.0, 450.0)
        );
    }

    #[test]
    fn the_report_counts_lock_lost_refusals_apart_from_sold_out() {
        let mut r = report();
        let outcomes = &mut r.strategies[1].sale.as_mut().unwrap().outcomes;
        for _ in 0..3 {
            outcomes.count(&testkit::Answer::Refused {
                status: 409,
                code: ErrorCode::LockLost,
            });
        }
        let md = markdown(&r);
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional` |") && l.contains(ErrorCode::LockLost.name()))
            .unwrap_or_else(|| panic!("no flash-sale row names lock_lost:\n{md}"));
        assert!(row.contains("lock_lost ×3"), "{row}");
        assert!(!row.contains(ErrorCode::SoldOut.name()), "{row}");
    }
}
