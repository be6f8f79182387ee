//! `report.json`: the [`RunReport`] as written, and read back by the same types.
//!
//! A report says which schema it follows (`schema_version`). This program writes
//! [`SCHEMA_VERSION`] and reads it, and the two layouts before it, whose figures are the same:
//! version 2 kept each phase's results in a list of their own (`floods`, `overloads`,
//! `expiry_costs`, `round_trips`), each with its strategy's description again, and a strategy's
//! loops beside its sale; version 1 is version 2 without `schema_version` or findings (the
//! committed runs from the three safety classes on). Both are read by moving their figures into
//! this version's places ([`upgrade`]). Anything else is refused with the version it carries,
//! never read half-way.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

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
    if !(1..=SCHEMA_VERSION).contains(&version) {
        bail!(
            "a report of schema version {version}; this seckill-bench reads versions 1 to \
             {SCHEMA_VERSION}: read it with the seckill-bench that wrote it"
        );
    }
    if let Value::Object(fields) = &mut json {
        if version < 3 {
            upgrade(fields);
        }
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

/// The fields of a version 1 or 2 strategy that version 3 keeps under its `loops`.
const LOOPS: [&str; 8] = [
    "throughput",
    "baseline",
    "percent_of_backend_baseline",
    "percent_of_http_noop",
    "cpu",
    "stages",
    "aborts",
    "replica",
];

/// Each list of a version 1 or 2 report that version 3 keeps in the strategies' records, and
/// the phase's name there.
const PHASE_LISTS: [(&str, &str); 4] = [
    ("floods", "flood"),
    ("overloads", "overload"),
    ("expiry_costs", "expiry"),
    ("round_trips", "round-trips"),
];

/// Moves a version 1 or 2 report's figures to where version 3 keeps them: a strategy's loops
/// under `loops`, and each phase's result, without its copy of the strategy's description,
/// under `phases` in the record of its strategy — a record made for it if the strategy had
/// none (a run of the phases before the sale alone). Anything malformed is left for the typed
/// read to refuse.
fn upgrade(report: &mut Map<String, Value>) {
    let mut records: Vec<Value> = match report.remove("strategies") {
        Some(Value::Array(records)) => records,
        _ => Vec::new(),
    };
    for record in records.iter_mut().filter_map(Value::as_object_mut) {
        let loops: Map<String, Value> = (LOOPS.iter())
            .filter_map(|field| Some((field.to_string(), record.remove(*field)?)))
            .collect();
        record.insert("loops".into(), Value::Object(loops));
    }
    for (list, phase) in PHASE_LISTS {
        let Some(Value::Array(results)) = report.remove(list) else {
            continue;
        };
        for mut result in results {
            let Some(strategy) = result.as_object_mut().and_then(|r| r.remove("strategy")) else {
                continue;
            };
            let at = (records.iter())
                .position(|r| r.pointer("/strategy/name") == strategy.get("name"))
                .unwrap_or_else(|| {
                    records.push(json!({ "strategy": strategy }));
                    records.len() - 1
                });
            if let Some(record) = records[at].as_object_mut() {
                let phases = record.entry("phases").or_insert_with(|| json!({}));
                if let Some(phases) = phases.as_object_mut() {
                    phases.insert(phase.into(), result);
                }
            }
        }
    }
    report.insert("strategies".into(), Value::Array(records));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample;
    use app::api::Strategy;

    /// `report` as version 2 wrote it: each strategy's loops beside its sale, and each phase's
    /// results in a list of their own, each with its strategy's description.
    fn as_version_2(report: &RunReport) -> Value {
        let mut json = serde_json::to_value(report).unwrap();
        let fields = json.as_object_mut().unwrap();
        fields.insert("schema_version".into(), Value::from(2));
        let mut lists: Map<String, Value> = (PHASE_LISTS.iter())
            .map(|(list, _)| (list.to_string(), json!([])))
            .collect();
        let records = fields["strategies"].as_array_mut().unwrap();
        for record in records.iter_mut() {
            let record = record.as_object_mut().unwrap();
            if let Some(Value::Object(loops)) = record.remove("loops") {
                record.extend(loops);
            }
            let Some(Value::Object(phases)) = record.remove("phases") else {
                continue;
            };
            for (phase, mut result) in phases {
                let (list, _) = PHASE_LISTS.iter().find(|(_, p)| *p == phase).unwrap();
                let result_fields = result.as_object_mut().unwrap();
                result_fields.insert("strategy".into(), record["strategy"].clone());
                lists[*list].as_array_mut().unwrap().push(result);
            }
        }
        records.retain(|r| r.get("sale").is_some());
        fields.extend(lists);
        json
    }

    #[test]
    fn a_version_2_report_reads_with_each_phase_result_in_its_strategys_record() {
        let mut report = sample::report();
        use crate::phase::flood::NAME;
        let flood = |strategy, answered_ms| {
            crate::phase::flood::schema::sample::flood(strategy, answered_ms, 1_000.0, 90.0).result
        };
        for (strategy, answered_ms) in [(Strategy::Batched, 1_000.0), (Strategy::Naive, 900.0)] {
            sample::phases(&mut report, strategy).put(NAME, flood(strategy, answered_ms));
        }
        let v2 = as_version_2(&report);
        assert!(v2["floods"].as_array().unwrap().len() == 3, "{v2}");
        assert!(v2["strategies"].as_array().unwrap().len() == 2, "{v2}");

        let read = parse(&v2.to_string()).unwrap();
        assert_eq!(read.schema_version, 2);
        assert_eq!(
            RunReport {
                schema_version: SCHEMA_VERSION,
                ..read
            },
            report,
            "every figure in its strategy's record, the flood-only strategy in one of its own"
        );
        assert!(report.record(Strategy::Batched).unwrap().sale.is_none());
    }

    #[test]
    fn a_report_of_another_schema_is_refused_with_its_version() {
        let e = parse(r#"{"schema_version": 99, "strategies": []}"#).unwrap_err();
        assert!(e.to_string().contains("schema version 99"), "{e}");
        let e = parse(r#"{"strategies": [{"strategy": {"safe": true}}]}"#).unwrap_err();
        assert!(e.to_string().contains("schema version 1"), "{e}");
    }
}
