//! What changed from one run to another, as data (computed by `analyse::compare`) and as
//! Markdown.

use std::fmt::Write;

use super::table::{Align, Table};

/// Two runs set side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// When each run started.
    pub a: String,
    pub b: String,
    pub noise: Noise,
    /// The settings that differ (`buyers 200 → 50`): figures of runs with other settings
    /// measure other work.
    pub settings_changed: Vec<String>,
    /// Accounting figures that went from 0 to anything for a strategy expected not to oversell.
    pub regressions: Vec<Regression>,
    pub baselines: Vec<Change>,
    pub strategies: Vec<Change>,
}

/// The run-to-run noise of two runs, as a fraction of a figure, and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Noise {
    pub fraction: f64,
    pub source: NoiseSource,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NoiseSource {
    /// The median relative min–max of the baselines' figures in both runs.
    Ranges {
        figures: usize,
        widest: String,
        widest_fraction: f64,
    },
    /// No run has min–max: the median change of the baselines between the runs.
    Changes { baselines: usize },
    /// Nothing to estimate it from.
    Assumed,
}

/// A rate: its median, and min–max when it is the median of several runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub median: f64,
    pub min_max: Option<(f64, f64)>,
}

/// The figures of one baseline or strategy in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub rate: Range,
    pub p99_ms: f64,
    /// Strategies only.
    pub p99_open_ms: Option<f64>,
}

/// One baseline or strategy in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub name: String,
    /// In run A, and in run B.
    pub figures: (Option<Figures>, Option<Figures>),
    /// Up (`Some(true)`) or down beyond the noise, or not.
    pub moved: Option<bool>,
    /// The flash sale's accounting fields that differ (strategies in both runs).
    pub accounting: Vec<FieldChange>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FieldChange {
    pub field: &'static str,
    pub a: i64,
    pub b: i64,
    /// A strategy expected not to oversell went from 0 to anything.
    pub regression: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    pub strategy: String,
    pub field: &'static str,
    pub b: i64,
}

/// The comparison as Markdown.
pub fn render(c: &Comparison) -> String {
    let mut md = format!("# Comparison: {} → {}\n\n", c.a, c.b);
    let source = noise_source(&c.noise.source);
    let _ = writeln!(
        md,
        "Noise: ±{:.0}% ({source}). A change is marked ▲/▼ when it exceeds the noise and, where \
         both runs give min–max, the ranges do not overlap.\n",
        100.0 * c.noise.fraction
    );
    if !c.settings_changed.is_empty() {
        let _ = writeln!(
            md,
            "**The runs' settings differ** ({}): their figures measure different work and are \
             not comparable one to one.\n",
            c.settings_changed.join(", ")
        );
    }
    md.push_str("## Correctness\n\n");
    if c.regressions.is_empty() {
        md.push_str(
            "No strategy expected to be safe went from 0 to any oversell, lost update or \
             negative stock.\n",
        );
    }
    for r in &c.regressions {
        let _ = writeln!(
            md,
            "- **`{}`** (expected not to oversell): {} 0 → {}",
            r.strategy, r.field, r.b
        );
    }

    md.push_str("\n## Baselines\n\n");
    md.push_str(&changes_table("baseline", &c.baselines, false));
    md.push_str("\n## Strategies (deductions/s)\n\n");
    md.push_str(&changes_table("strategy", &c.strategies, true));
    md
}

/// Where the noise estimate comes from, in words.
pub fn noise_source(source: &NoiseSource) -> String {
    match source {
        NoiseSource::Ranges {
            figures,
            widest,
            widest_fraction,
        } => format!(
            "the median relative min–max of {figures} baseline figure(s) in these runs; the \
             widest, `{widest}`, spans {:.0}%",
            100.0 * widest_fraction
        ),
        NoiseSource::Changes { baselines } => format!(
            "no run has min–max; the median change of {baselines} baseline(s) between the runs"
        ),
        NoiseSource::Assumed => "no baseline to estimate it from; assumed".into(),
    }
}

/// One row per baseline or strategy: its rate and p99 in both runs; for the strategies
/// (`sales`) also the open loop's p99 and the flash sale's accounting.
fn changes_table(first: &str, changes: &[Change], sales: bool) -> String {
    let mut columns = vec![
        (first, Align::Left),
        ("A /s", Align::Right),
        ("B /s", Align::Right),
        ("change", Align::Right),
        ("p99 ms A → B", Align::Left),
    ];
    if sales {
        columns.extend([
            ("p99 open ms A → B", Align::Left),
            ("accounting A → B", Align::Left),
        ]);
    }
    let mut t = Table::new(columns);
    for ch in changes {
        let (a, b) = (ch.figures.0.as_ref(), ch.figures.1.as_ref());
        let mut row = vec![
            format!("`{}`", ch.name),
            rate(a),
            rate(b),
            change(ch),
            pair(a.map(|f| f.p99_ms), b.map(|f| f.p99_ms)),
        ];
        if sales {
            let open = |f: Option<&Figures>| f.and_then(|f| f.p99_open_ms);
            row.push(pair(open(a), open(b)));
            row.push(accounting(ch));
        }
        t.row(row);
    }
    t.render()
}

/// The accounting fields that differ, `oversell 0 → 3; final_stock 0 → -3`, or `same`.
fn accounting(ch: &Change) -> String {
    match &ch.figures {
        (None, _) => "only in B".to_string(),
        (_, None) => "only in A".to_string(),
        _ if ch.accounting.is_empty() => "same".to_string(),
        _ => ch
            .accounting
            .iter()
            .map(|f| {
                let text = format!("{} {} → {}", f.field, f.a, f.b);
                match f.regression {
                    true => format!("**{text} (correctness)**"),
                    false => text,
                }
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn rate(f: Option<&Figures>) -> String {
    match f.map(|f| f.rate) {
        None => "–".into(),
        Some(Range {
            median,
            min_max: Some((min, max)),
        }) => format!("{median:.0} ({min:.0}–{max:.0})"),
        Some(r) => format!("{:.0}", r.median),
    }
}

fn change(ch: &Change) -> String {
    let (Some(a), Some(b)) = &ch.figures else {
        return "–".into();
    };
    let pct = if a.rate.median > 0.0 {
        format!(
            "{:+.0}%",
            100.0 * (b.rate.median - a.rate.median) / a.rate.median
        )
    } else {
        "new".into()
    };
    match ch.moved {
        Some(true) => format!("**▲ {pct}**"),
        Some(false) => format!("**▼ {pct}**"),
        None => pct,
    }
}

fn pair(a: Option<f64>, b: Option<f64>) -> String {
    let f = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.1}"));
    format!("{} → {}", f(a), f(b))
}
