//! A run's report: the renderings of its schema ([`crate::schema`], written and read by the
//! same types) — `report.json` ([`json`]), `report.md` ([`markdown`], with the findings worded by
//! [`prose`], each scenario by [`scenarios`] and what fell by [`falls`]), SVG charts
//! ([`charts`]), `report.html` ([`html`]: all of it on one self-contained page), the comparison
//! of two runs ([`comparison`]), the README's results section ([`readme`]) — every table in one
//! model ([`table`]: typed cells, printed as Markdown there and as HTML by `html::table`), the
//! run's own tables built once from the schema ([`tables`]); the index of every committed run,
//! `results/history.json`, and its list in `results/README.md` ([`run_history`]); and the run's
//! progress on stderr ([`progress`]).

pub mod charts;
pub mod comparison;
pub mod document;
pub mod expiry;
pub mod falls;
pub mod first_come;
pub mod flood;
pub mod flood_chart;
pub mod html;
pub mod markdown;
pub mod overload;
pub mod progress;
pub mod prose;
pub mod readme;
pub mod resale;
pub mod run_history;
pub mod scenarios;
pub mod section;
pub mod stages;
pub mod table;
pub mod tables;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::schema::RunReport;
use crate::schema::comparison::Comparison;
use crate::schema::json;

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
    let charts = charts::all(report)?;
    let floods = flood_chart::all(&report.floods)?;
    for chart in charts.iter().chain(&floods) {
        let path = dir.join(&chart.file);
        std::fs::write(&path, &chart.svg).with_context(|| format!("writing {}", path.display()))?;
    }
    std::fs::write(dir.join("report.md"), markdown::render(report))
        .with_context(|| format!("writing {}", dir.join("report.md").display()))?;
    html::write(dir, report, &charts, &floods, compared)?;
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
    use app::api::{ErrorCode, Strategy};

    use super::*;
    use crate::sample::{load, report};
    use crate::schema::Loop;

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
        let mut r = report();
        r.settings.flood = Some(crate::sample::flood_shape());
        let mut not_sold_out = crate::sample::flood(Strategy::Sharded, 2_200.0, 1_000.0, 75.0);
        not_sold_out.accounting.final_stock = 3;
        not_sold_out.after_sold_out = None;
        r.floods = vec![
            crate::sample::flood(Strategy::Batched, 2_500.0, 1_000.0, 63.0),
            not_sold_out,
        ];
        r.findings = crate::analyse::findings::of(&r);
        assert_eq!(r.findings.flood.len(), 2, "{:?}", r.findings.flood);
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
        r.strategies[1].throughput.closed = crate::analyse::spread::combine(runs).unwrap();
        let md = markdown::render(&r);
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional` | mariadb"))
            .unwrap_or_else(|| panic!("no summary row:\n{md}"));
        assert!(row.contains("| 400 (380–450) |"), "{row}");
        let spread = json::parse(&json::to_string(&r).unwrap())
            .unwrap()
            .strategies[1]
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
