//! `results/README.md`'s list of the committed runs no longer in the checkout (between two
//! markers): where each one still is — the commit that added its folder — read from the
//! history index (`schema::history`).

use std::path::Path;

use anyhow::{Context, Result};

use super::table::Table;
use crate::schema::comparison::Machine;
use crate::schema::history::{PastRun, RunHistory};

/// The line that opens `results/README.md`'s list of older runs.
pub const BEGIN: &str =
    "<!-- older runs: written by `seckill-bench history` from results/history.json -->";
/// The line that closes it.
pub const END: &str = "<!-- end of older runs -->";

/// The list of the runs of `history` no longer in `results` ([`PastRun::is_in`]; without the
/// markers): each one's folder, start, the commit that still holds it, its machine and what it
/// measured.
pub fn older_runs(history: &RunHistory, results: &Path) -> String {
    let gone: Vec<&PastRun> = (history.runs.iter())
        .filter(|r| !r.is_in(results))
        .collect();
    if gone.is_empty() {
        return "Every committed run is still in this folder.\n".into();
    }
    let mut t = Table::left(["folder", "started", "commit", "kind", "machine", "measured"]);
    for run in gone {
        t.row([
            format!("`{}`", run.folder),
            run.medians.started_at.clone(),
            run.commit
                .as_deref()
                .map_or("unknown".into(), |c| format!("`{c}`")),
            run.kind.name().to_owned(),
            run.medians
                .machine
                .as_ref()
                .map_or("not recorded".into(), Machine::to_string),
            run.measured.clone(),
        ]);
    }
    t.render()
}

/// `readme` (`results/README.md`) with its list of older runs replaced by `list`.
pub fn replace(readme: &str, list: &str) -> Result<String> {
    super::readme::between(readme, BEGIN, END, list).context("results/README.md's older runs")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::history::tests::past;

    #[test]
    fn the_older_runs_are_the_ones_whose_report_is_gone_each_with_the_commit_that_holds_it() {
        let results = tempfile::tempdir().unwrap();
        std::fs::create_dir(results.path().join("kept")).unwrap();
        std::fs::write(results.path().join("kept/report.json"), "{}").unwrap();
        std::fs::create_dir_all(results.path().join("logs-left/logs")).unwrap();
        let history = RunHistory::new(vec![
            past("gone", Some("255f78c")),
            past("kept", Some("26cdac2")),
            past("logs-left", Some("7c1f0a2")),
            past("never-committed", None),
        ]);
        let list = older_runs(&history, results.path());
        assert!(
            list.contains(
                "| `gone` | 2026-11-01T00:00:00Z | `255f78c` | run | Test CPU, 2 CPUs | 2 strategies |"
            ),
            "{list}"
        );
        assert!(list.contains("| `never-committed` |"), "{list}");
        assert!(
            list.contains("| `logs-left` |"),
            "a folder holding only its git-ignored logs is not the run: {list}"
        );
        assert!(list.contains("| unknown |"), "{list}");
        assert!(!list.contains("kept"), "{list}");

        let readme = format!("# results\n\n{BEGIN}\nold\n{END}\n\nafter\n");
        let written = replace(&readme, &list).unwrap();
        assert_eq!(
            written,
            format!("# results\n\n{BEGIN}\n{list}{END}\n\nafter\n")
        );
        assert_eq!(replace(&written, &list).unwrap(), written, "idempotent");
    }
}
