//! `results/history.json`, the history index: one entry per run ever committed to `results/`,
//! kept after the run's folder is deleted, so that a checkout holds only the latest run of each
//! kind and still knows every run before it. Written and read by the types below; filled by
//! `seckill-bench run` (its own run) and `seckill-bench history` (every folder present,
//! `crate::history`); read by the fall check (`analyse::falls`), which judges a new run against
//! every entry's medians, folder or no folder, and listed in `results/README.md`
//! (`report::run_history`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::comparison::Machine;

/// The index's file name, in the results folder.
pub const FILE: &str = "history.json";

/// The layout of [`FILE`] this program writes and reads.
pub const VERSION: u32 = 1;

/// Every committed run, by folder name (the folders' order: the order they started in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHistory {
    pub version: u32,
    pub runs: Vec<PastRun>,
}

/// One committed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PastRun {
    /// Its folder under `results/` (`2026-11-29T11-09-04Z`, `…-lock-matrix`).
    pub folder: String,
    pub kind: RunKind,
    /// The commit that added the folder (`git log --diff-filter=A`), once it was committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// What it measured, in one line, written from its report when the entry was made.
    pub measured: String,
    #[serde(flatten)]
    pub medians: Medians,
}

impl PastRun {
    /// Whether the run is in `results`: the file its command writes is there. A folder left
    /// holding only its logs, which git ignores, is not the run, and a fresh clone does not
    /// have it at all.
    pub fn is_in(&self, results: &Path) -> bool {
        results.join(&self.folder).join(self.kind.file()).is_file()
    }
}

/// What wrote a run's folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    /// `seckill-bench run`, or a phase's own command (`seckill-bench flood`): `report.json`
    /// and its renderings; what it ran is in the entry's [`PastRun::measured`]. (Entries written
    /// when a flood run had a kind of its own read as this.)
    #[serde(alias = "flood")]
    Run,
    /// `seckill-bench lock matrix`: `matrix.json`.
    LockMatrix,
    /// `seckill-bench lock peers`: `peers.json`.
    LockPeers,
    /// `seckill-bench network`: `network.json`.
    Network,
    /// `seckill-bench isolation`: `isolation.json`.
    Isolation,
}

impl RunKind {
    /// The file that holds a folder's figures, by which the folder's kind is known.
    pub const fn file(self) -> &'static str {
        match self {
            RunKind::Run => "report.json",
            RunKind::LockMatrix => "matrix.json",
            RunKind::LockPeers => "peers.json",
            RunKind::Network => "network.json",
            RunKind::Isolation => "isolation.json",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RunKind::Run => "run",
            RunKind::LockMatrix => "lock matrix",
            RunKind::LockPeers => "lock peers",
            RunKind::Network => "network sweep",
            RunKind::Isolation => "isolation matrix",
        }
    }
}

/// What a fall is judged on (`analyse::falls`): when the run started, on what machine, and each
/// strategy's closed-loop median and each baseline's rate, by name. A run without a machine (a
/// lock run, which does not record one) is never the best of any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Medians {
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
    /// The servers it measured on, where not the local ones of one node each: a run's rates
    /// are judged only against runs of the same servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<crate::schema::world::World>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub strategies: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub baselines: BTreeMap<String, f64>,
}

impl RunHistory {
    pub fn new(runs: Vec<PastRun>) -> RunHistory {
        RunHistory {
            version: VERSION,
            runs,
        }
    }

    /// The entry of `folder`, if the index has one.
    pub fn run(&self, folder: &str) -> Option<&PastRun> {
        self.runs.iter().find(|r| r.folder == folder)
    }
}

/// The index of the results folder `results`; `None` where it has none.
pub fn read(results: &Path) -> Result<Option<RunHistory>> {
    let path = results.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let history: RunHistory =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    if history.version != VERSION {
        bail!(
            "{} is of layout {}; this seckill-bench reads {VERSION}",
            path.display(),
            history.version
        );
    }
    Ok(Some(history))
}

/// Writes `history` as the index of `results`, its runs in folder order.
pub fn write(results: &Path, history: &RunHistory) -> Result<()> {
    let mut history = history.clone();
    history.runs.sort_by(|a, b| a.folder.cmp(&b.folder));
    super::json::write_as(&results.join(FILE), &history)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn past(folder: &str, commit: Option<&str>) -> PastRun {
        PastRun {
            folder: folder.into(),
            kind: RunKind::Run,
            commit: commit.map(Into::into),
            measured: "2 strategies".into(),
            medians: Medians {
                started_at: "2026-11-01T00:00:00Z".into(),
                world: None,
                machine: Some(Machine {
                    cpu_model: Some("Test CPU".into()),
                    cpus: 2,
                }),
                strategies: BTreeMap::from([("naive".into(), 1000.0)]),
                baselines: BTreeMap::new(),
            },
        }
    }

    #[test]
    fn the_index_reads_back_as_written_in_folder_order() {
        let results = tempfile::tempdir().unwrap();
        assert_eq!(read(results.path()).unwrap(), None);
        let history = RunHistory::new(vec![past("b", None), past("a", Some("255f78c"))]);
        write(results.path(), &history).unwrap();
        let back = read(results.path()).unwrap().unwrap();
        let folders: Vec<&str> = back.runs.iter().map(|r| r.folder.as_str()).collect();
        assert_eq!(folders, ["a", "b"]);
        assert_eq!(back.run("b"), history.run("b"));
    }

    #[test]
    fn an_entry_written_when_a_flood_run_had_a_kind_of_its_own_reads_as_a_run() {
        let mut entry = serde_json::to_value(past("2026-11-25T01-33-20Z-flood", None)).unwrap();
        entry["kind"] = "flood".into();
        let read: PastRun = serde_json::from_value(entry).unwrap();
        assert_eq!(read.kind, RunKind::Run);
        assert_eq!(read.kind.file(), "report.json");
    }
}
