//! A run's report: the renderings of its schema ([`crate::schema`], written and read by the
//! same types) — `report.json` ([`json`]), `report.md` ([`markdown`], with the findings worded by
//! [`prose`], each scenario by [`scenarios`] and what fell by [`falls`]), SVG charts
//! ([`charts`]), `report.html` ([`html`]: all of it on one self-contained page), the comparison
//! of two runs ([`comparison`]), the README's results section ([`readme`]) — every table in one
//! model ([`table`]: typed cells, printed as Markdown there and as HTML by `html::table`), the
//! run's own tables built once from the schema ([`tables`]); the index of every committed run,
//! `results/history.json`, and its list in `results/README.md` ([`run_history`]); and the run's
//! progress on stderr ([`progress`]).
//!
//! [`json`]: crate::schema::json

pub mod charts;
pub mod comparison;
pub mod falls;
pub mod html;
pub mod markdown;
pub mod other_engine;
pub mod progress;
pub mod prose;
pub mod readme;
pub mod run_history;
pub mod scenarios;
pub mod section;
pub mod stages;
pub mod table;
pub mod tables;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::schema::RunReport;

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
