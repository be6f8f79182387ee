//! `seckill-bench compare <run-a> <run-b>`: what changed between two runs' `report.json`.
//!
//! Per baseline and strategy: throughput, p99 (closed and open loop) and every accounting
//! figure of the flash sale, from run A to run B. A change is marked as beyond noise when it is
//! larger than the noise of these runs and, where both runs give min–max, the two ranges do
//! not overlap. The noise is estimated from the baselines, whose work never changes: the
//! median of their relative min–max in both runs; for runs without min–max (the report format
//! before repetitions), the median change of a baseline between the two runs. A
//! strategy expected not to oversell (declared safe, or safe while leases hold: the flash sale
//! injects no fault) whose oversell, lost updates or negative stock go from 0 to anything is
//! always flagged, whatever the noise.
//!
//! The JSON is read loosely (`serde_json::Value`), so that a run written by an older version of
//! the report still compares: a figure it lacks is shown as `–`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

/// Noise assumed when neither run has min–max nor a baseline in common.
pub const DEFAULT_NOISE: f64 = 0.2;
/// The least noise assumed: a few per cent separate any two runs of the same work.
pub const MIN_NOISE: f64 = 0.05;

/// How the hot-row sweep's points are named; they are not used to estimate noise (one
/// connection against a hot row varies more than the work the strategies compare with).
const SWEEP_PREFIX: &str = "hot-row sweep ×";

/// The accounting figures a safe strategy must keep at 0.
const MUST_STAY_ZERO: [&str; 3] = ["oversell", "lost_updates", "negative_stock"];

/// A rate: its median, and min–max when it is the median of several runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub median: f64,
    pub min_max: Option<(f64, f64)>,
}

/// The figures of one baseline or strategy in one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub rate: Option<Range>,
    pub p99_ms: Option<f64>,
    pub p99_open_ms: Option<f64>,
    /// Flash-sale accounting (strategies only), by field name.
    pub accounting: BTreeMap<String, i64>,
    /// Whether the strategy is expected never to oversell in a run without faults.
    pub expected_safe: bool,
}

/// One run, as far as a comparison needs it.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub label: String,
    /// The run's settings as written (`settings` of the JSON).
    pub settings: Value,
    pub baselines: BTreeMap<String, Figures>,
    pub strategies: Vec<(String, Figures)>,
}

/// Reads `dir/report.json` (or the file itself).
pub fn load(path: &Path) -> Result<Run> {
    let file: PathBuf = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let json: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    let label = json["started_at"]
        .as_str()
        .map_or_else(|| path.display().to_string(), str::to_owned);
    Ok(Run::from_json(label, &json))
}

impl Run {
    pub fn from_json(label: String, json: &Value) -> Run {
        let mut run = Run {
            label,
            settings: json["settings"].clone(),
            ..Run::default()
        };
        for b in json["baselines"].as_array().into_iter().flatten() {
            if let Some(name) = b["name"].as_str() {
                run.baselines
                    .insert(name.to_owned(), load_figures(&b["result"]));
            }
        }
        for l in json["hot_row_sweep"].as_array().into_iter().flatten() {
            let n = l["concurrency"].as_u64().unwrap_or_default();
            run.baselines
                .insert(format!("{SWEEP_PREFIX}{n:03}"), load_figures(l));
        }
        for s in json["strategies"].as_array().into_iter().flatten() {
            let Some(name) = s["strategy"]["name"].as_str() else {
                continue;
            };
            let mut f = load_figures(&s["throughput"]["closed"]);
            f.p99_open_ms = ms(&s["throughput"]["open"]["latency"]["p99_us"]);
            if let Some(a) = s["sale"]["accounting"].as_object() {
                f.accounting = a
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
                    .collect();
            }
            f.expected_safe = match s["strategy"]["safety"].as_str() {
                Some(safety) => safety != "unsafe",
                // The report format before the three-way safety: `"safe": bool`.
                None => s["strategy"]["safe"].as_bool().unwrap_or(false),
            };
            run.strategies.push((name.to_owned(), f));
        }
        run
    }
}

/// Rate, spread and p99 of one load result (either report format).
fn load_figures(l: &Value) -> Figures {
    let successes = l["successes_per_sec"].as_f64().unwrap_or_default();
    let (key, median) = if successes > 0.0 {
        ("successes_per_sec", successes)
    } else {
        (
            "attempts_per_sec",
            l["attempts_per_sec"].as_f64().unwrap_or_default(),
        )
    };
    let spread = &l["repetitions"][key];
    let min_max = spread["min"].as_f64().zip(spread["max"].as_f64());
    Figures {
        rate: l.get(key).is_some().then_some(Range { median, min_max }),
        p99_ms: ms(&l["latency"]["p99_us"]),
        ..Figures::default()
    }
}

fn ms(us: &Value) -> Option<f64> {
    us.as_f64().map(|us| us / 1000.0)
}

/// The run-to-run noise of two runs, as a fraction of a figure, and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Noise {
    pub fraction: f64,
    pub source: String,
}

/// See the module doc: the median (the upper one, for an even count) of the baselines'
/// relative min–max in both runs; without any, of the baselines' relative changes between
/// the runs; without either, [`DEFAULT_NOISE`]. Never less than [`MIN_NOISE`]. The hot-row
/// sweep is left out: one connection against a hot row varies far more than the work the
/// strategies are compared with.
pub fn noise(a: &Run, b: &Run) -> Noise {
    let named = |run: &'_ Run| {
        run.baselines
            .iter()
            .filter(|(name, _)| !name.starts_with(SWEEP_PREFIX))
            .map(|(name, f)| (name.clone(), f.clone()))
            .collect::<Vec<_>>()
    };
    let ranges: Vec<(f64, String)> = [a, b]
        .iter()
        .flat_map(|run| named(run))
        .filter_map(|(name, f)| {
            let r = f.rate?;
            let (min, max) = r.min_max?;
            (r.median > 0.0).then(|| ((max - min) / r.median, name))
        })
        .collect();
    if let Some((fraction, widest)) = upper_median(&ranges) {
        return Noise {
            fraction: fraction.max(MIN_NOISE),
            source: format!(
                "the median relative min–max of {} baseline figure(s) in these runs; the widest, \
                 `{widest}`, spans {:.0}%",
                ranges.len(),
                100.0 * max_of(&ranges)
            ),
        };
    }
    let changes: Vec<(f64, String)> = named(a)
        .into_iter()
        .filter_map(|(name, fa)| {
            let (ra, rb) = (fa.rate?, b.baselines.get(&name)?.rate?);
            (ra.median > 0.0).then(|| ((rb.median - ra.median).abs() / ra.median, name))
        })
        .collect();
    match upper_median(&changes) {
        Some((fraction, _)) => Noise {
            fraction: fraction.max(MIN_NOISE),
            source: format!(
                "no run has min–max; the median change of {} baseline(s) between the runs",
                changes.len()
            ),
        },
        None => Noise {
            fraction: DEFAULT_NOISE,
            source: "no baseline to estimate it from; assumed".into(),
        },
    }
}

/// The upper median of the values, and the name of the largest.
fn upper_median(values: &[(f64, String)]) -> Option<(f64, String)> {
    let mut sorted: Vec<f64> = values.iter().map(|(v, _)| *v).collect();
    sorted.sort_by(f64::total_cmp);
    let median = *sorted.get(sorted.len() / 2)?;
    let widest = values
        .iter()
        .max_by(|x, y| x.0.total_cmp(&y.0))
        .map(|(_, n)| n.clone())?;
    Some((median, widest))
}

fn max_of(values: &[(f64, String)]) -> f64 {
    values.iter().map(|(v, _)| *v).fold(0.0, f64::max)
}

/// The settings that differ between the runs (`buyers 200 → 50`), for a warning: figures of
/// runs with other settings are not comparable.
pub fn settings_changes(a: &Value, b: &Value) -> Vec<String> {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return Vec::new();
    };
    b.iter()
        .filter(|(k, v)| a.get(*k).is_some_and(|old| old != *v))
        .map(|(k, v)| format!("{k} {} → {v}", a[k]))
        .collect()
}

/// Whether `b` moved away from `a` beyond the noise: up (`Some(true)`), down (`Some(false)`)
/// or not (`None`).
pub fn moved(a: Range, b: Range, noise: f64) -> Option<bool> {
    if a.median <= 0.0 {
        return (b.median > 0.0).then_some(true);
    }
    let change = (b.median - a.median) / a.median;
    if change.abs() <= noise {
        return None;
    }
    if let (Some((amin, amax)), Some((bmin, bmax))) = (a.min_max, b.min_max)
        && bmin <= amax
        && amin <= bmax
    {
        return None;
    }
    Some(change > 0.0)
}

/// The accounting figures that went from 0 in A to anything in B for a strategy expected not
/// to oversell: always flagged.
pub fn correctness_regressions(a: &Figures, b: &Figures) -> Vec<String> {
    if !b.expected_safe {
        return Vec::new();
    }
    MUST_STAY_ZERO
        .iter()
        .filter_map(|k| {
            let before = a.accounting.get(*k).copied().unwrap_or(0);
            let after = *b.accounting.get(*k)?;
            (before == 0 && after != 0).then(|| format!("{k} 0 → {after}"))
        })
        .collect()
}

/// The comparison as Markdown.
pub fn render(a: &Run, b: &Run) -> String {
    let noise = noise(a, b);
    let mut md = format!("# Comparison: {} → {}\n\n", a.label, b.label);
    let _ = writeln!(
        md,
        "Noise: ±{:.0}% ({}). A change is marked ▲/▼ when it exceeds the noise and, where both \
         runs give min–max, the ranges do not overlap.\n",
        100.0 * noise.fraction,
        noise.source
    );
    let changed = settings_changes(&a.settings, &b.settings);
    if !changed.is_empty() {
        let _ = writeln!(
            md,
            "**The runs' settings differ** ({}): their figures measure different work and are \
             not comparable one to one.\n",
            changed.join(", ")
        );
    }
    let mut flags = Vec::new();
    for (name, fb) in &b.strategies {
        if let Some(fa) = strategy(a, name) {
            for r in correctness_regressions(fa, fb) {
                flags.push(format!("- **`{name}`** (expected not to oversell): {r}"));
            }
        }
    }
    md.push_str("## Correctness\n\n");
    if flags.is_empty() {
        md.push_str(
            "No strategy expected to be safe went from 0 to any oversell, lost update or \
             negative stock.\n",
        );
    } else {
        md.push_str(&flags.join("\n"));
        md.push('\n');
    }

    md.push_str("\n## Baselines\n\n| baseline | A /s | B /s | change | p99 ms A → B |\n|---|--:|--:|--:|---|\n");
    let names: Vec<&String> = a
        .baselines
        .keys()
        .chain(b.baselines.keys().filter(|k| !a.baselines.contains_key(*k)))
        .collect();
    for name in names {
        let (fa, fb) = (a.baselines.get(name), b.baselines.get(name));
        let _ = writeln!(
            md,
            "| `{name}` | {} | {} | {} | {} |",
            rate(fa),
            rate(fb),
            change(
                fa.and_then(|f| f.rate),
                fb.and_then(|f| f.rate),
                noise.fraction
            ),
            pair(fa.and_then(|f| f.p99_ms), fb.and_then(|f| f.p99_ms)),
        );
    }

    md.push_str(
        "\n## Strategies\n\n| strategy | deductions/s A | B | change | p99 closed ms A → B | p99 open ms A → B | accounting A → B |\n|---|--:|--:|--:|---|---|---|\n",
    );
    let mut seen = Vec::new();
    for (name, fb) in &b.strategies {
        seen.push(name.as_str());
        let fa = strategy(a, name);
        let _ = writeln!(
            md,
            "| `{name}` | {} | {} | {} | {} | {} | {} |",
            rate(fa),
            rate(Some(fb)),
            change(fa.and_then(|f| f.rate), fb.rate, noise.fraction),
            pair(fa.and_then(|f| f.p99_ms), fb.p99_ms),
            pair(fa.and_then(|f| f.p99_open_ms), fb.p99_open_ms),
            fa.map_or_else(|| "only in B".into(), |fa| accounting(fa, fb)),
        );
    }
    for (name, _) in a
        .strategies
        .iter()
        .filter(|(n, _)| !seen.contains(&n.as_str()))
    {
        let _ = writeln!(md, "| `{name}` | | | only in A | | | |");
    }
    md
}

fn strategy<'a>(run: &'a Run, name: &str) -> Option<&'a Figures> {
    run.strategies
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, f)| f)
}

fn rate(f: Option<&Figures>) -> String {
    match f.and_then(|f| f.rate) {
        None => "–".into(),
        Some(Range {
            median,
            min_max: Some((min, max)),
        }) => format!("{median:.0} ({min:.0}–{max:.0})"),
        Some(r) => format!("{:.0}", r.median),
    }
}

fn change(a: Option<Range>, b: Option<Range>, noise: f64) -> String {
    let (Some(a), Some(b)) = (a, b) else {
        return "–".into();
    };
    let pct = if a.median > 0.0 {
        format!("{:+.0}%", 100.0 * (b.median - a.median) / a.median)
    } else {
        "new".into()
    };
    match moved(a, b, noise) {
        Some(true) => format!("**▲ {pct}**"),
        Some(false) => format!("**▼ {pct}**"),
        None => pct,
    }
}

fn pair(a: Option<f64>, b: Option<f64>) -> String {
    let f = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.1}"));
    format!("{} → {}", f(a), f(b))
}

/// The accounting fields that differ, `oversell 0 → 3; final_stock 0 → -3`, or `same`.
fn accounting(a: &Figures, b: &Figures) -> String {
    let regressions = correctness_regressions(a, b);
    let diffs: Vec<String> = b
        .accounting
        .iter()
        .filter(|(k, v)| a.accounting.get(*k) != Some(v))
        .map(|(k, v)| {
            let before = a.accounting.get(k).map_or("–".into(), i64::to_string);
            let text = format!("{k} {before} → {v}");
            if regressions.iter().any(|r| r.starts_with(k.as_str())) {
                format!("**{text} (correctness)**")
            } else {
                text
            }
        })
        .collect();
    if diffs.is_empty() {
        "same".into()
    } else {
        diffs.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A run in the report format of 2026-11-21 (no repetitions, `safe: bool`).
    fn old_run() -> Run {
        Run::from_json(
            "a".into(),
            &json!({
                "baselines": [
                    {"name": "http-noop", "result": {"attempts_per_sec": 1000.0, "successes_per_sec": 1000.0, "latency": {"p99_us": 5000}}},
                    {"name": "sql-hot-row", "result": {"attempts_per_sec": 400.0, "successes_per_sec": 400.0, "latency": {"p99_us": 9000}}}
                ],
                "strategies": [{
                    "strategy": {"name": "conditional", "safe": true},
                    "sale": {"accounting": {"oversell": 0, "lost_updates": 0, "negative_stock": 0, "final_stock": 0, "demand_exceeded_supply": true}},
                    "throughput": {"closed": {"attempts_per_sec": 100.0, "successes_per_sec": 100.0, "latency": {"p99_us": 20000}},
                                   "open": {"latency": {"p99_us": 30000}}}
                }]
            }),
        )
    }

    fn new_run(conditional: f64, oversell: i64) -> Run {
        let spread = |m: f64| json!({"median": m, "min": m * 0.95, "max": m * 1.05, "runs": [m]});
        Run::from_json(
            "b".into(),
            &json!({
                "baselines": [
                    {"name": "http-noop", "result": {"attempts_per_sec": 1100.0, "successes_per_sec": 0.0, "latency": {"p99_us": 5000},
                      "repetitions": {"attempts_per_sec": spread(1100.0)}}}
                ],
                "hot_row_sweep": [{"concurrency": 8, "attempts_per_sec": 500.0, "successes_per_sec": 500.0, "latency": {"p99_us": 100}}],
                "strategies": [{
                    "strategy": {"name": "conditional", "safety": "safe"},
                    "sale": {"accounting": {"oversell": oversell, "lost_updates": 0, "negative_stock": 0, "final_stock": -oversell}},
                    "throughput": {"closed": {"attempts_per_sec": conditional, "successes_per_sec": conditional, "latency": {"p99_us": 20000},
                                              "repetitions": {"successes_per_sec": spread(conditional)}},
                                   "open": {"latency": {"p99_us": 30000}}}
                }]
            }),
        )
    }

    #[test]
    fn an_old_format_run_is_read_with_the_figures_it_has() {
        let a = old_run();
        let f = &a.strategies[0].1;
        assert!(f.expected_safe);
        assert_eq!(
            f.rate,
            Some(Range {
                median: 100.0,
                min_max: None
            })
        );
        assert_eq!(f.accounting["oversell"], 0);
        assert!(!f.accounting.contains_key("demand_exceeded_supply"));
        assert_eq!(a.baselines["sql-hot-row"].p99_ms, Some(9.0));
    }

    #[test]
    fn noise_is_the_median_baseline_range_or_else_the_median_baseline_change() {
        let (a, b) = (old_run(), new_run(100.0, 0));
        let n = noise(&a, &b);
        assert!((n.fraction - 0.1).abs() < 1e-9, "{n:?}");
        assert!(n.source.contains("`http-noop`"), "{n:?}");
        let n = noise(&a, &old_run());
        assert_eq!(n.fraction, MIN_NOISE, "{n:?}");
        let mut faster = old_run();
        faster.baselines.get_mut("http-noop").unwrap().rate = Some(Range {
            median: 1300.0,
            min_max: None,
        });
        assert!((noise(&a, &faster).fraction - 0.3).abs() < 1e-9);
        assert_eq!(
            noise(&Run::default(), &Run::default()).fraction,
            DEFAULT_NOISE
        );
    }

    #[test]
    fn differing_settings_are_named_in_a_warning() {
        let a = json!({"buyers": 200, "stock": 1000, "quick": false});
        let b = json!({"buyers": 50, "stock": 1000, "quick": true, "repetitions": 3});
        assert_eq!(
            settings_changes(&a, &b),
            vec![
                "buyers 200 → 50".to_string(),
                "quick false → true".to_string()
            ]
        );
        let mut runs = (old_run(), new_run(100.0, 0));
        runs.0.settings = a;
        runs.1.settings = b;
        assert!(
            render(&runs.0, &runs.1).contains("**The runs' settings differ** (buyers 200 → 50")
        );
    }

    #[test]
    fn a_change_counts_only_beyond_the_noise_and_with_ranges_apart() {
        let r = |median, min_max| Range { median, min_max };
        assert_eq!(moved(r(100.0, None), r(115.0, None), 0.2), None);
        assert_eq!(moved(r(100.0, None), r(130.0, None), 0.2), Some(true));
        assert_eq!(moved(r(100.0, None), r(70.0, None), 0.2), Some(false));
        let overlapping = moved(
            r(100.0, Some((90.0, 140.0))),
            r(130.0, Some((120.0, 150.0))),
            0.2,
        );
        assert_eq!(overlapping, None);
        let apart = moved(
            r(100.0, Some((90.0, 110.0))),
            r(130.0, Some((120.0, 150.0))),
            0.2,
        );
        assert_eq!(apart, Some(true));
    }

    #[test]
    fn a_safe_strategy_that_starts_to_oversell_is_always_flagged() {
        let a = old_run();
        let md = render(&a, &new_run(100.0, 1));
        assert!(
            md.contains("- **`conditional`** (expected not to oversell): oversell 0 → 1"),
            "{md}"
        );
        assert!(md.contains("**oversell 0 → 1 (correctness)**"), "{md}");
        let clean = render(&a, &new_run(100.0, 0));
        assert!(clean.contains("No strategy expected to be safe"), "{clean}");
        let mut unsafe_b = new_run(100.0, 5);
        unsafe_b.strategies[0].1.expected_safe = false;
        assert!(correctness_regressions(&a.strategies[0].1, &unsafe_b.strategies[0].1).is_empty());
    }

    #[test]
    fn the_rendering_marks_moves_beyond_noise_and_lists_every_baseline_and_strategy() {
        let md = render(&old_run(), &new_run(200.0, 0));
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional`"))
            .unwrap();
        assert!(row.contains("**▲ +100%**"), "{row}");
        assert!(row.contains("| 100 | 200 (190–210) |"), "{row}");
        assert!(row.contains("| same |"), "{row}");
        let md = render(&old_run(), &new_run(105.0, 0));
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional`"))
            .unwrap();
        assert!(row.contains("| +5% |"), "{row}");
        for name in ["`http-noop`", "`sql-hot-row`", "`hot-row sweep ×008`"] {
            assert!(md.contains(name), "{name} missing:\n{md}");
        }
    }
}
