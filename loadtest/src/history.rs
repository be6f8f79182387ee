//! `seckill-bench history`: the history index of a results folder (`results/history.json`,
//! [`crate::report::run_history`]) rebuilt from the run folders present — each folder's entry
//! written again from its files, the entries of folders already deleted kept as they were —
//! and `results/README.md`'s list of the runs no longer in the folder written from it.
//! `seckill-bench run` adds its own run with [`record`].
//!
//! The index is what lets a checkout keep only the latest run of each kind: the fall check
//! judges a new run against every entry's medians, folder or no folder, and the list says which
//! commit still holds a deleted folder. That commit is the one that added the folder (`git log
//! --diff-filter=A`), which git finds after the folder is gone too.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::analyse::falls;
use crate::isolation;
use crate::phase::REGISTRY;
use crate::report::run_history;
use crate::schema::RunReport;
use crate::schema::comparison::Machine;
use crate::schema::history::{self as index, Medians, PastRun, RunHistory, RunKind};
use crate::schema::json;

/// Rebuilds the index of `results` ([`rebuild`]) and writes it, and the list of older runs in
/// `results/README.md` when that file is there.
pub fn update(results: &Path) -> Result<RunHistory> {
    let history = rebuild(results)?;
    index::write(results, &history)?;
    let readme = results.join("README.md");
    if readme.is_file() {
        let text = std::fs::read_to_string(&readme)
            .with_context(|| format!("reading {}", readme.display()))?;
        let written = run_history::replace(&text, &run_history::older_runs(&history, results))?;
        if written != text {
            std::fs::write(&readme, written)
                .with_context(|| format!("writing {}", readme.display()))?;
        }
    }
    Ok(history)
}

/// The index of `results` as its folders make it: an entry written from each run folder
/// present, and the index's entries of folders no longer there, kept; each with the commit
/// that added its folder where git knows it.
pub fn rebuild(results: &Path) -> Result<RunHistory> {
    let old = index::read(results)?.unwrap_or_else(|| RunHistory::new(Vec::new()));
    let mut runs: BTreeMap<String, PastRun> = (old.runs.iter())
        .map(|r| (r.folder.clone(), r.clone()))
        .collect();
    for folder in folders(results)? {
        if let Some(run) = entry(results, &folder) {
            let commit = runs.get(&folder).and_then(|r| r.commit.clone());
            runs.insert(folder, PastRun { commit, ..run });
        }
    }
    for run in runs.values_mut() {
        if let Some(commit) = added_by(results, &run.folder) {
            run.commit = Some(commit);
        }
    }
    Ok(RunHistory::new(runs.into_values().collect()))
}

/// Adds the run just written to `dir` to the index of `out`, in place of an entry of the same
/// folder.
pub fn record(out: &Path, dir: &Path, report: &RunReport) -> Result<()> {
    let folder = dir
        .file_name()
        .context("a run folder without a name")?
        .to_string_lossy()
        .into_owned();
    let mut history = index::read(out)?.unwrap_or_else(|| RunHistory::new(Vec::new()));
    history.runs.retain(|r| r.folder != folder);
    history.runs.push(of_report(&folder, report));
    index::write(out, &history)
}

/// The entry of a run folder written by `run` or a phase's own command.
pub fn of_report(folder: &str, report: &RunReport) -> PastRun {
    PastRun {
        folder: folder.into(),
        kind: RunKind::Run,
        commit: None,
        measured: measured(report),
        medians: falls::medians(report),
    }
}

/// The folders of `results` (not `latest`, a link), by name.
fn folders(results: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(results)
        .with_context(|| format!("reading {}", results.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// The entry of the run in `results/folder`, by the file its command writes; `None` for a
/// folder that holds no run.
fn entry(results: &Path, folder: &str) -> Option<PastRun> {
    let dir = results.join(folder);
    if dir.join("report.json").is_file() {
        return Some(match json::read(&dir) {
            Ok(report) => of_report(folder, &report),
            Err(e) => {
                tracing::warn!("{folder}: only what any report says: {e:#}");
                unread(folder, &value(&dir.join("report.json")))
            }
        });
    }
    let figures = |kind: RunKind| Some(dir.join(kind.file())).filter(|f| f.is_file());
    if let Some(file) = figures(RunKind::LockMatrix) {
        return Some(of_matrix(folder, &value(&file)));
    }
    if let Some(file) = figures(RunKind::LockPeers) {
        return Some(of_peers(folder, &value(&file)));
    }
    if let Some(file) = figures(RunKind::Network) {
        return Some(of_network(folder, &value(&file)));
    }
    if let Some(file) = figures(RunKind::Isolation) {
        return Some(of_isolation(folder, &value(&file)));
    }
    None
}

/// One line of what a run measured: its strategies, their closed-loop range and which
/// oversold, its baselines, its fault scenarios and its other phases.
fn measured(r: &RunReport) -> String {
    if r.settings.only_before_sale {
        let alone = (REGISTRY.iter()).filter(|p| p.needs().before_sale && p.asked(&r.settings));
        let (labels, shapes): (Vec<&str>, Vec<Option<String>>) = alone
            .map(|p| (p.label(), p.shape_words(&r.settings)))
            .unzip();
        let shapes: String = shapes
            .into_iter()
            .flatten()
            .map(|s| format!(", {s}"))
            .collect();
        return format!(
            "the {} alone: {} strategies{shapes}",
            labels.join(", "),
            r.strategies.len()
        );
    }
    let mut parts = Vec::new();
    let rates = r
        .sold()
        .map(|s| (s.strategy.name, s.throughput.closed.successes_per_sec));
    let slowest = rates.clone().min_by(|a, b| a.1.total_cmp(&b.1));
    let fastest = rates.max_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some((slow, low)), Some((fast, high))) = (slowest, fastest) {
        let oversold: Vec<String> = r
            .sold()
            .filter(|s| s.sale.accounting.oversell > 0)
            .map(|s| format!("`{}`", s.strategy.name))
            .collect();
        parts.push(format!(
            "{} strategies, closed loop from `{slow}` {low:.0}/s to `{fast}` {high:.0}/s, \
             oversold: {}",
            r.sold().count(),
            if oversold.is_empty() {
                "none".to_owned()
            } else {
                oversold.join(", ")
            }
        ));
    }
    match r.baselines.len() {
        0 => {}
        1 => parts.push("1 baseline".into()),
        n => parts.push(format!("{n} baselines")),
    }
    if !r.scenarios.is_empty() {
        let passed = r.scenarios.iter().filter(|s| s.passed()).count();
        parts.push(format!(
            "{passed} of {} fault scenarios as expected",
            r.scenarios.len()
        ));
    }
    let phases: Vec<&str> = (REGISTRY.iter())
        .filter(|p| p.measured(r))
        .map(|p| p.label())
        .collect();
    if !phases.is_empty() {
        parts.push(phases.join(", "));
    }
    parts.join("; ")
}

/// The entry of a report this program cannot read (a layout before the schema's versions):
/// what any layout says, and no medians, as the fall check reads none from it.
fn unread(folder: &str, v: &Value) -> PastRun {
    let count = |field: &str| v.get(field).and_then(Value::as_array).map_or(0, Vec::len);
    let env = &v["environment"];
    PastRun {
        folder: folder.into(),
        kind: RunKind::Run,
        commit: None,
        measured: format!(
            "{} strategies, {} baselines, {} fault scenarios (a report layout this seckill-bench \
             does not read)",
            count("strategies"),
            count("baselines"),
            count("scenarios")
        ),
        medians: Medians {
            started_at: started_at(v, folder),
            world: None,
            machine: env["cpus"].as_u64().map(|cpus| Machine {
                cpu_model: env["cpu_model"].as_str().map(Into::into),
                cpus: cpus as usize,
            }),
            strategies: BTreeMap::new(),
            baselines: BTreeMap::new(),
        },
    }
}

/// The entry of a network sweep (`network.json`): its strategies, distances, and the range
/// of their rates at the farthest.
fn of_network(folder: &str, v: &Value) -> PastRun {
    let strategies = v["strategies"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let points = v["points"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let far = points.len().saturating_sub(1);
    let at_far: Vec<f64> = (strategies.iter())
        .filter_map(|s| s["closed"][far]["successes_per_sec"].as_f64())
        .collect();
    let (low, high) = at_far
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    let farthest = points
        .last()
        .and_then(|p| p["relayed"]["rtt_us"].as_u64())
        .map_or("–".to_string(), |us| format!("{} ms", us as f64 / 1e3));
    lock_run(
        folder,
        v,
        RunKind::Network,
        format!(
            "{} strategies at {} distances; at {farthest}: {low:.0}–{high:.0} purchases/s",
            strategies.len(),
            points.len()
        ),
    )
}

/// The entry of an isolation matrix (`isolation.json`): its cells and how many failed.
fn of_isolation(folder: &str, v: &Value) -> PastRun {
    let measured = match serde_json::from_value::<isolation::schema::IsolationReport>(v.clone()) {
        Ok(r) => {
            let failed = (r.cells.iter())
                .filter(|c| {
                    isolation::verdict::Verdict::of(c) == isolation::verdict::Verdict::Failed
                })
                .count();
            let servers: Vec<String> = (r.servers.iter())
                .map(|s| format!("{} {}", s.engine.name(), s.version))
                .collect();
            format!(
                "{} cells (failure × engine × level) on {}: {failed} failed, {} stopped",
                r.cells.len(),
                servers.join(" and "),
                r.cells.len() - failed
            )
        }
        Err(e) => format!("unreadable: {e:#}"),
    };
    lock_run(folder, v, RunKind::Isolation, measured)
}

/// The entry of a lock matrix (`matrix.json`): its backends and requirements.
fn of_matrix(folder: &str, v: &Value) -> PastRun {
    let rows = v["rows"].as_array().map(Vec::as_slice).unwrap_or_default();
    let backends: Vec<String> = (rows.iter())
        .filter_map(|r| r["backend"].as_str())
        .map(|b| format!("`{b}`"))
        .collect();
    let requirements = rows
        .first()
        .and_then(|r| r["cells"].as_array())
        .map_or(0, Vec::len);
    lock_run(
        folder,
        v,
        RunKind::LockMatrix,
        format!(
            "{} lock backends against {requirements} requirements: {}",
            backends.len(),
            backends.join(", ")
        ),
    )
}

/// The entry of our locks beside the Python ones (`peers.json`): each one's acquisitions/s and
/// the targets that held.
fn of_peers(folder: &str, v: &Value) -> PastRun {
    let subjects = v["subjects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let rates: Vec<String> = (subjects.iter())
        .filter_map(|s| {
            let rate = s["acquisitions_per_sec"]["median"].as_f64()?;
            Some(format!("`{}` {rate:.0}", s["subject"].as_str()?))
        })
        .collect();
    let targets = v["targets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let held = targets.iter().filter(|t| t["holds"] == true).count();
    lock_run(
        folder,
        v,
        RunKind::LockPeers,
        format!(
            "acquisitions/s, median of {} rounds: {}; {held} of {} targets held",
            v["rounds"],
            rates.join(", "),
            targets.len()
        ),
    )
}

/// A lock run's entry: no machine (its files record none), no medians.
fn lock_run(folder: &str, v: &Value, kind: RunKind, measured: String) -> PastRun {
    PastRun {
        folder: folder.into(),
        kind,
        commit: None,
        measured,
        medians: Medians {
            started_at: started_at(v, folder),
            world: None,
            machine: None,
            strategies: BTreeMap::new(),
            baselines: BTreeMap::new(),
        },
    }
}

/// The file's JSON, or `null` where it is none.
fn value(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

/// The run's start as its file says it, else as its folder's name does (`2026-11-23T07-20-35Z…`
/// → `2026-11-23T07:20:35Z`), else the folder's name.
fn started_at(v: &Value, folder: &str) -> String {
    if let Some(at) = v["started_at"].as_str() {
        return at.to_owned();
    }
    match folder.get(..20) {
        Some(stamp) if stamp.as_bytes()[10] == b'T' && stamp.ends_with('Z') => {
            format!("{}:{}:{}Z", &stamp[..13], &stamp[14..16], &stamp[17..19])
        }
        _ => folder.to_owned(),
    }
}

/// The commit that added `folder` to `results` (the newest, were it added twice), as `git log`
/// abbreviates it; `None` outside a git checkout, or before the folder is committed.
fn added_by(results: &Path, folder: &str) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(results)
        .args(["log", "--diff-filter=A", "--format=%h", "--"])
        .arg(folder)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout)
        .ok()?
        .lines()
        .next()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::report;

    /// The sample run with `naive`'s and `conditional`'s closed-loop medians.
    fn run(started_at: &str, naive: f64, conditional: f64) -> RunReport {
        let mut r = report();
        r.started_at = started_at.into();
        r.strategies[0]
            .loops
            .as_mut()
            .unwrap()
            .throughput
            .closed
            .successes_per_sec = naive;
        r.strategies[1]
            .loops
            .as_mut()
            .unwrap()
            .throughput
            .closed
            .successes_per_sec = conditional;
        r
    }

    fn write(results: &Path, folder: &str, file: &str, text: &str) {
        std::fs::create_dir_all(results.join(folder)).unwrap();
        std::fs::write(results.join(folder).join(file), text).unwrap();
    }

    /// Two committed runs: the best `naive` in the first, the best `conditional` in the second.
    fn two_runs(results: &Path) {
        let first = run("2026-11-01T00:00:00Z", 1_000.0, 500.0);
        let second = run("2026-11-02T00:00:00Z", 800.0, 2_000.0);
        write(
            results,
            "2026-11-01T00-00-00Z",
            "report.json",
            &json::to_string(&first).unwrap(),
        );
        write(
            results,
            "2026-11-02T00-00-00Z",
            "report.json",
            &json::to_string(&second).unwrap(),
        );
    }

    #[test]
    fn falls_judged_from_the_index_alone_equal_falls_judged_from_the_run_folders() {
        let results = tempfile::tempdir().unwrap();
        let results = results.path();
        two_runs(results);
        let now = run("2026-11-03T00:00:00Z", 400.0, 900.0);
        let from_folders = falls::against(
            &now,
            falls::reports(results).map(|(folder, r)| (Some(folder), falls::medians(&r))),
        );
        let best: Vec<&str> = from_folders.iter().map(|f| f.best_run()).collect();
        assert_eq!(best, ["2026-11-01T00-00-00Z", "2026-11-02T00-00-00Z"]);

        index::write(results, &rebuild(results).unwrap()).unwrap();
        for folder in ["2026-11-01T00-00-00Z", "2026-11-02T00-00-00Z"] {
            std::fs::remove_dir_all(results.join(folder)).unwrap();
        }
        assert_eq!(
            falls::against(&now, falls::committed(results)),
            from_folders
        );
    }

    #[test]
    fn a_network_sweep_is_indexed_as_one_with_its_farthest_rates_and_no_medians() {
        let results = tempfile::tempdir().unwrap();
        let results = results.path();
        let folder = "2026-11-05T00-00-00Z-network";
        std::fs::create_dir_all(results.join(folder)).unwrap();
        let sweep = crate::network::report::tests::report_at(&[
            crate::schema::world::Distance::Local,
            crate::schema::world::Distance::Relayed { rtt_us: 0 },
            crate::schema::world::Distance::Relayed { rtt_us: 2_000 },
        ]);
        crate::network::report::write_all(&results.join(folder), &sweep).unwrap();
        let history = update(results).unwrap();
        let entry = history.run(folder).unwrap();
        assert_eq!(entry.kind, RunKind::Network);
        assert_eq!(
            entry.measured,
            "2 strategies at 3 distances; at 2 ms: 91–4000 purchases/s"
        );
        assert!(entry.medians.strategies.is_empty(), "judged for no fall");
    }

    #[test]
    fn an_isolation_matrix_is_indexed_with_its_cells_and_how_many_failed() {
        let results = tempfile::tempdir().unwrap();
        let results = results.path();
        let folder = "2026-11-05T00-00-00Z-isolation";
        std::fs::create_dir_all(results.join(folder)).unwrap();
        let matrix = crate::isolation::report::tests::two_cells();
        crate::isolation::report::write_all(&results.join(folder), &matrix).unwrap();
        let history = update(results).unwrap();
        let entry = history.run(folder).unwrap();
        assert_eq!(entry.kind, RunKind::Isolation);
        assert_eq!(
            entry.measured,
            "2 cells (failure × engine × level) on MariaDB 10.11 and PostgreSQL 15: 1 failed, \
             1 stopped"
        );
        assert!(entry.medians.strategies.is_empty(), "judged for no fall");
    }

    #[test]
    fn a_folder_the_index_does_not_have_yet_is_judged_beside_its_entries() {
        let results = tempfile::tempdir().unwrap();
        let results = results.path();
        two_runs(results);
        let mut history = rebuild(results).unwrap();
        history.runs.retain(|r| r.folder == "2026-11-02T00-00-00Z");
        index::write(results, &history).unwrap();
        std::fs::remove_dir_all(results.join("2026-11-02T00-00-00Z")).unwrap();
        let judged: Vec<Option<String>> = (falls::committed(results).into_iter())
            .map(|(folder, _)| folder)
            .collect();
        assert_eq!(
            judged,
            [
                Some("2026-11-01T00-00-00Z".to_string()),
                Some("2026-11-02T00-00-00Z".to_string())
            ]
        );
    }

    #[test]
    fn an_index_entry_survives_its_folder_s_deletion_when_the_index_is_rebuilt() {
        let results = tempfile::tempdir().unwrap();
        let results = results.path();
        two_runs(results);
        write(
            results,
            "2026-11-01T06-00-00Z-lock-peers",
            "peers.json",
            r#"{"rounds": 3, "subjects": [{"subject": "zookeeper",
                "acquisitions_per_sec": {"median": 650.4}}], "targets": [{"holds": true}]}"#,
        );
        let readme = format!("# results\n{}\n{}\n", run_history::BEGIN, run_history::END);
        std::fs::write(results.join("README.md"), readme).unwrap();
        let first = update(results).unwrap();
        assert_eq!(first.runs.len(), 3);
        let peers = first.run("2026-11-01T06-00-00Z-lock-peers").unwrap();
        assert_eq!(peers.kind, RunKind::LockPeers);
        assert_eq!(peers.medians.started_at, "2026-11-01T06:00:00Z");
        assert_eq!(
            peers.measured,
            "acquisitions/s, median of 3 rounds: `zookeeper` 650; 1 of 1 targets held"
        );

        std::fs::remove_dir_all(results.join("2026-11-01T00-00-00Z")).unwrap();
        let second = update(results).unwrap();
        assert_eq!(second, first);
        assert_eq!(index::read(results).unwrap(), Some(first));
        let readme = std::fs::read_to_string(results.join("README.md")).unwrap();
        let listed: Vec<&str> = (readme.lines()).filter(|l| l.starts_with("| `")).collect();
        assert_eq!(listed.len(), 1, "{readme}");
        assert!(
            listed[0].starts_with(
                "| `2026-11-01T00-00-00Z` | 2026-11-01T00:00:00Z | unknown | run | \
                 Test CPU, 2 CPUs | 2 strategies, closed loop from `conditional` 500/s to \
                 `naive` 1000/s"
            ),
            "{readme}"
        );
    }

    #[test]
    fn a_run_adds_itself_to_the_index_in_place_of_an_entry_of_its_folder() {
        let results = tempfile::tempdir().unwrap();
        let results = results.path();
        let dir = results.join("2026-11-03T00-00-00Z");
        record(results, &dir, &run("2026-11-03T00:00:00Z", 1.0, 2.0)).unwrap();
        record(results, &dir, &run("2026-11-03T00:00:00Z", 3.0, 4.0)).unwrap();
        let history = index::read(results).unwrap().unwrap();
        assert_eq!(history.runs.len(), 1);
        assert_eq!(history.runs[0].medians.strategies["naive"], 3.0);
        assert_eq!(history.runs[0].kind, RunKind::Run);
    }
}
