//! `report.json`: the [`RunReport`] as written, and read back by the same types.
//!
//! A report says which schema it follows (`schema_version`). This program writes
//! [`SCHEMA_VERSION`] and reads it, and also the layout written before versions were (version
//! 1: no `schema_version`, no findings — the committed runs from the three safety classes on),
//! whose figures are the same. Anything else is refused with the version it carries, never
//! read half-way.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::schema::{RunReport, SCHEMA_VERSION};

/// The report as pretty JSON.
pub fn to_string(report: &RunReport) -> Result<String> {
    Ok(serde_json::to_string_pretty(report)?)
}

/// Writes `report` to `path`.
pub fn write(path: &Path, report: &RunReport) -> Result<()> {
    write_as(path, report)
}

/// Writes `value` to `path` as pretty JSON ending in a newline: every figures file this
/// program writes beside its Markdown (a run's, a network sweep's, an isolation matrix's).
pub fn write_as<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Reads the JSON file `path` as written by [`write_as`], with no versions to reconcile.
pub fn read_as<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
}

/// Reads `path`: a run's directory (its `report.json`) or the file itself.
pub fn read(path: &Path) -> Result<RunReport> {
    let file: PathBuf = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    parse(&text).with_context(|| format!("reading {}", file.display()))
}

/// Parses a report of this schema or of version 1.
pub fn parse(text: &str) -> Result<RunReport> {
    let mut json: Value = serde_json::from_str(text).context("not JSON")?;
    let version = match json.get("schema_version") {
        None => 1,
        Some(v) => v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .context("`schema_version` is not a number")?,
    };
    if version != 1 && version != SCHEMA_VERSION {
        bail!(
            "a report of schema version {version}; this seckill-bench reads versions 1 and \
             {SCHEMA_VERSION}: read it with the seckill-bench that wrote it"
        );
    }
    if let Value::Object(fields) = &mut json {
        fields.insert("schema_version".into(), Value::from(version));
    }
    serde_json::from_value(json).map_err(|e| {
        anyhow::anyhow!(
            "not a report of schema version {version} ({e}): a report written before the \
             version-1 layout (the three safety classes, repeated runs) cannot be read by this \
             seckill-bench"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_of_another_schema_is_refused_with_its_version() {
        let e = parse(r#"{"schema_version": 99, "strategies": []}"#).unwrap_err();
        assert!(e.to_string().contains("schema version 99"), "{e}");
        let e = parse(r#"{"strategies": [{"strategy": {"safe": true}}]}"#).unwrap_err();
        assert!(e.to_string().contains("schema version 1"), "{e}");
    }
}
