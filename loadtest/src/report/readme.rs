//! The README's results section: written by the program from the committed run's
//! `report.json` (`seckill-bench readme`), between two markers, so that no figure in the README
//! is copied by hand; a test checks that the README holds exactly what this writes.

use std::fmt::Write as _;

use std::path::Path;

use anyhow::{Context, Result, bail};
use app::api::Safety;

use super::table::{Align, Table};
use super::tables::successes_per_sec;
use crate::schema::{BaselineName, RunReport, Sold, Verdict};

/// The line that opens the section.
pub const BEGIN: &str =
    "<!-- results: written by `seckill-bench readme` from results/latest/report.json -->";
/// The line that closes it.
pub const END: &str = "<!-- end of results -->";

/// The section's text (without the markers) for `report`, the run at `link` (relative to the
/// README), with the phases' own lines (`crate::phase::readme`), showing its `report.html` in
/// the screenshot at `picture` when the run has one.
pub fn section(report: &RunReport, link: &str, phases: &[String], picture: Option<&str>) -> String {
    let s = &report.settings;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "From [the committed run]({link}) of {} ({} CPUs, {:.0} minutes): a flash sale of {} \
         units to {} concurrent buyers sending {} requests{}, through {} app instances, counted \
         from the database; then each strategy's closed-loop rate and p99 latency, the median \
         of {} runs of {} s (min–max in parentheses).{}\n",
        report.started_at,
        report.environment.cpus,
        report.duration_seconds / 60.0,
        s.stock,
        s.buyers,
        s.demand,
        super::prose::sale_door(report),
        s.instances,
        s.repetitions,
        s.seconds,
        super::prose::priority(s.server_niceness),
    );
    let mut t = Table::new([
        ("strategy", Align::Left),
        ("safety", Align::Left),
        ("sold / stock", Align::Right),
        ("oversell", Align::Right),
        ("undersell", Align::Right),
        ("deductions/s", Align::Right),
        ("p99 ms", Align::Right),
    ]);
    for x in report.sold() {
        let a = &x.sale.accounting;
        t.row([
            format!("`{}`", x.strategy.name),
            x.strategy.safety.to_string(),
            format!("{} / {}", a.units_sold, a.initial_stock),
            a.oversell.to_string(),
            a.undersell.to_string(),
            successes_per_sec(&x.throughput.closed),
            format!("{:.0}", x.throughput.closed.latency.p99_us as f64 / 1000.0),
        ]);
    }
    md.push_str(&t.render());
    md.push('\n');
    let count = |safety: Safety, oversold: bool| {
        report
            .sold()
            .filter(|x| x.strategy.safety == safety && (x.sale.accounting.oversell > 0) == oversold)
            .count()
    };
    let unsafe_total = count(Safety::Unsafe, true) + count(Safety::Unsafe, false);
    let _ = writeln!(
        md,
        "{} of {} safe strategies and {} of {} safe while leases hold oversold; {} of {} unsafe \
         ones did.",
        count(Safety::Safe, true),
        count(Safety::Safe, true) + count(Safety::Safe, false),
        count(Safety::WhileLeasesHold, true),
        count(Safety::WhileLeasesHold, true) + count(Safety::WhileLeasesHold, false),
        count(Safety::Unsafe, true),
        unsafe_total,
    );
    let shed: Vec<u32> = report
        .sold()
        .filter(|x| x.sale.accounting.undersell > 0 && x.sale.accounting.lost_updates == 0)
        .filter(|x| x.sale.turned_away_at_the_door())
        .map(|x| x.sale.door_retries)
        .collect();
    if let Some(retries) = shed.iter().max() {
        let _ = writeln!(
            md,
            "The undersell of {} strategies in the table is the door's, not the deduction's: each \
             instance admits as many purchases of a strategy at once as it answers within its \
             latency budget and refuses the rest at once with `503 overloaded`; {}, so a slow \
             strategy leaves units unsold.",
            shed.len(),
            super::prose::door_retries(*retries),
        );
    }
    if !report.scenarios.is_empty() {
        let passed = report.scenarios.iter().filter(|s| s.passed()).count();
        let rows: usize = report.scenarios.iter().map(|s| s.rows.len()).sum();
        let failed_rows = report
            .scenarios
            .iter()
            .flat_map(|s| &s.rows)
            .filter(|r| r.verdict == Verdict::Fail)
            .count();
        let _ = writeln!(
            md,
            "{passed} of {} fault scenarios showed what they exist to show ({} of {rows} rows \
             as expected).",
            report.scenarios.len(),
            rows - failed_rows,
        );
    }
    for line in phases {
        let _ = writeln!(md, "{line}");
    }
    let fastest = fastest_safe(report);
    if !fastest.is_empty() {
        let _ = write!(md, "\n{fastest}");
    }
    if let Some(picture) = picture {
        let page = link.replace("report.md", "report.html");
        let _ = writeln!(
            md,
            "\n[![The run's report.html: the summary, sortable, and the charts]({picture})]({page})"
        );
    }
    md
}

/// The fastest safe strategy's closed loop beside an HTTP handler that does nothing, and where
/// its time went, worded as the report words it: empty when the run found no safe strategy's
/// time.
fn fastest_safe(report: &RunReport) -> String {
    let rate = |x: &Sold| x.throughput.closed.successes_per_sec;
    let Some(fastest) = (report.sold())
        .filter(|x| x.strategy.safety == Safety::Safe)
        .max_by(|a, b| rate(a).total_cmp(&rate(b)))
    else {
        return String::new();
    };
    let found = (report.findings.time.iter()).find(|f| f.strategy == fastest.strategy.name);
    let Some(time) = found else {
        return String::new();
    };
    let beside = match (
        fastest.percent_of_http_noop,
        report.baseline(BaselineName::HttpNoop),
    ) {
        (Some(percent), Some(noop)) => format!(
            ": its closed loop answered {percent:.1}% as many requests per second as an HTTP \
             handler that does nothing on the same connections (`http-noop`, {:.0}/s)",
            noop.result.attempts_per_sec
        ),
        _ => String::new(),
    };
    format!(
        "The fastest safe strategy was `{}`{beside}. Where its time went, from the run's CPU \
         table and the service's own timings: {}\n",
        fastest.strategy.name,
        super::prose::time(&fastest, time)
    )
}

/// The screenshot of the run's `report.html` (`report.png`, saved by `run --screenshots`),
/// relative to the README, if the run has one; `link` is [`link`]'s.
pub fn picture(readme: &Path, link: &str) -> Option<String> {
    let picture = link.replace("report.md", "report.png");
    let base = readme.parent().unwrap_or(Path::new(""));
    base.join(&picture).is_file().then_some(picture)
}

/// The link from the README at `readme` to the run's report (`<run>/report.md`), relative to
/// the README's folder, the `latest` link resolved to the run it names.
pub fn link(readme: &Path, run: &Path) -> Result<String> {
    let dir = if run.is_dir() {
        run.to_path_buf()
    } else {
        run.parent()
            .context("a report file without a folder")?
            .to_path_buf()
    };
    let dir = match std::fs::read_link(&dir) {
        Ok(target) => dir.with_file_name(target),
        Err(_) => dir,
    };
    let base = readme.parent().unwrap_or(Path::new(""));
    let relative = dir.strip_prefix(base).unwrap_or(&dir);
    Ok(format!("{}/report.md", relative.display()))
}

/// `readme` with its section replaced by `section`.
pub fn replace(readme: &str, section: &str) -> Result<String> {
    between(readme, BEGIN, END, section).context("the README's results section")
}

/// `text` with what stands between the lines `begin` and `end` replaced by `section`: the one
/// way a program writes a part of a hand-written file.
pub fn between(text: &str, begin: &str, end: &str, section: &str) -> Result<String> {
    let (Some(at), Some(until)) = (text.find(begin), text.find(end)) else {
        bail!("no section between the lines `{begin}` and `{end}`");
    };
    if until < at {
        bail!("the section ends (`{end}`) before it begins (`{begin}`)");
    }
    let before = &text[..at + begin.len()];
    let after = &text[until..];
    Ok(format!("{before}\n{section}{after}"))
}

#[cfg(test)]
mod tests {
    use app::api::ErrorCode;

    use super::*;
    use crate::sample::report;

    #[test]
    fn the_section_is_replaced_between_its_markers_and_nothing_else_moves() {
        let readme = format!("# Title\n\n{BEGIN}\nold figures\n{END}\n\nmore\n");
        let section = section(&report(), "results/x/report.md", &[], None);
        let new = replace(&readme, &section).unwrap();
        assert!(new.starts_with("# Title\n\n"), "{new}");
        assert!(new.ends_with(&format!("{END}\n\nmore\n")), "{new}");
        assert!(!new.contains("old figures"), "{new}");
        assert!(
            new.contains("| `naive` | unsafe | 137 / 100 | 37 |"),
            "{new}"
        );
        assert!(new.contains("0 of 1 safe strategies"), "{new}");
        assert_eq!(replace(&new, &section).unwrap(), new, "idempotent");
        assert!(replace("no markers", &section).is_err());
        assert!(!section.contains("report.png"), "{section}");
    }

    #[test]
    fn the_fastest_safe_strategy_is_set_beside_a_no_op_with_where_its_time_went() {
        let mut run = report();
        let before = section(&run, "results/x/report.md", &[], None);
        assert!(
            !before.contains("fastest safe"),
            "no CPU, no finding: {before}"
        );
        let processes = vec![
            crate::measure::cpu::Process::new("app-0", "app", 1),
            crate::measure::cpu::Process::new("mariadbd", "mariadbd", 2),
        ];
        let span = crate::measure::cpu::Span {
            wall_seconds: 10.0,
            cpu_seconds: vec![Some(2.0), Some(9.5)],
            machine_cpu_seconds: Some(12.0),
            successes: 4000.0,
            ..crate::measure::cpu::Span::default()
        };
        let loops = run.strategies[1].loops.as_mut().unwrap();
        loops.cpu = Some(span.usage(&processes));
        loops.percent_of_http_noop = Some(11.1);
        let mut noop = crate::sample::baseline();
        noop.name = BaselineName::HttpNoop;
        noop.result.attempts_per_sec = 141_939.0;
        run.baselines.push(noop);
        run.findings = crate::phase::findings(&run);
        let section = section(&run, "results/x/report.md", &[], None);
        assert!(
            section.contains(
                "The fastest safe strategy was `conditional`: its closed loop answered 11.1% as \
                 many requests per second as an HTTP handler that does nothing on the same \
                 connections (`http-noop`, 141939/s). Where its time went, from the run's CPU \
                 table and the service's own timings: **`conditional`**"
            ),
            "{section}"
        );
        assert!(
            section.contains("`mariadbd` was saturated (0.95 cores busy on average)"),
            "{section}"
        );
    }

    #[test]
    fn units_left_by_buyers_refused_at_the_door_are_said_to_be_the_doors() {
        let mut run = report();
        let before = section(&run, "results/x/report.md", &[], None);
        assert!(!before.contains("is the door's"), "{before}");
        let s = &mut run.strategies[0];
        s.sale.as_mut().unwrap().accounting.undersell = 60;
        s.sale.as_mut().unwrap().accounting.lost_updates = 0;
        for _ in 0..400 {
            s.sale
                .as_mut()
                .unwrap()
                .outcomes
                .count(&testkit::Answer::Refused {
                    status: 503,
                    code: ErrorCode::Overloaded,
                });
        }
        let section = section(&run, "results/x/report.md", &[], None);
        assert!(
            section.contains(
                "The undersell of 1 strategies in the table is the door's, not the deduction's"
            ),
            "{section}"
        );
    }

    #[test]
    fn a_sale_whose_buyers_retried_at_the_door_says_so_and_one_from_before_does_not() {
        let mut run = report();
        let before = section(&run, "results/x/report.md", &[], None);
        assert!(!before.contains("clicks again"), "{before}");
        run.strategies[0].sale.as_mut().unwrap().door_retries = 100;
        let section = section(&run, "results/x/report.md", &[], None);
        assert!(
            section.contains("(a buyer turned away at the door with `503 overloaded` clicks again, up to 100 times)"),
            "{section}"
        );
    }

    #[test]
    fn a_run_whose_servers_ran_nicer_than_the_generator_says_so_and_one_at_the_same_niceness_does_not()
     {
        let mut run = report();
        run.settings.server_niceness = 0;
        let same = section(&run, "results/x/report.md", &[], None);
        assert!(!same.contains("niceness"), "{same}");
        run.settings.server_niceness = 10;
        let nicer = section(&run, "results/x/report.md", &[], None);
        assert!(
            nicer.contains("ran at niceness 10, the load generator at its own"),
            "{nicer}"
        );
        let from_before: crate::schema::Settings = serde_json::from_value({
            let mut v = serde_json::to_value(&run.settings).unwrap();
            v.as_object_mut().unwrap().remove("server_niceness");
            v
        })
        .unwrap();
        assert_eq!(
            from_before.server_niceness, 0,
            "a run from before the setting"
        );
    }

    #[test]
    fn a_run_with_a_screenshot_shows_it_linked_to_its_page() {
        let dir = tempfile::tempdir().unwrap();
        let readme = dir.path().join("README.md");
        assert_eq!(picture(&readme, "results/x/report.md"), None);
        std::fs::create_dir_all(dir.path().join("results/x")).unwrap();
        std::fs::write(dir.path().join("results/x/report.png"), b"png").unwrap();
        let shown = picture(&readme, "results/x/report.md").unwrap();
        let section = section(&report(), "results/x/report.md", &[], Some(&shown));
        assert!(
            section.contains("[![The run's report.html: the summary, sortable, and the charts](results/x/report.png)](results/x/report.html)"),
            "{section}"
        );
    }
}
