//! `report.json`: every raw figure, the histogram data and the environment.

use std::path::Path;

use anyhow::{Context, Result};

use super::RunReport;

pub fn to_string(report: &RunReport) -> Result<String> {
    Ok(serde_json::to_string_pretty(report)?)
}

pub fn write(path: &Path, report: &RunReport) -> Result<()> {
    std::fs::write(path, to_string(report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}
