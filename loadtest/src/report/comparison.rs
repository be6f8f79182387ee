//! What changed from one run to another (`schema::comparison`, computed by
//! `analyse::compare`), as one section printed as Markdown and as HTML.

use super::section::Section;
use super::table::{Cell, Judged, Table};
use crate::schema::comparison::*;

/// The comparison's title.
pub fn title(c: &Comparison) -> String {
    format!("Comparison: {} → {}", c.a, c.b)
}

/// The comparison as Markdown, under its title.
pub fn render(c: &Comparison) -> String {
    format!("# {}\n\n{}", title(c), section(c).markdown())
}

/// The comparison: what fell by more than half first, then the machines, correctness, what
/// another run can reproduce (order and ratios), then the absolute figures.
pub fn section(c: &Comparison) -> Section {
    let mut s = Section::default();
    s.warning(super::falls::markdown(super::falls::AGAINST_A, &c.falls));
    match c.machines.same() {
        true => s.prose(machines_sentence(c)),
        false => s.warning(machines_sentence(c)),
    };
    if !c.settings_changed.is_empty() {
        s.warning(format!(
            "**The runs' settings differ** ({}): their figures measure different work and are \
             not comparable one to one.",
            c.settings_changed.join(", ")
        ));
    }
    s.heading(2, "Correctness");
    if c.regressions.is_empty() {
        s.prose(
            "No strategy expected to be safe went from 0 to any oversell, lost update or \
             negative stock.",
        );
    }
    let regressions: Vec<String> = (c.regressions.iter())
        .map(|r| {
            let (name, field, b) = (&r.strategy, r.field, r.b);
            format!("- **`{name}`** (expected not to oversell): {field} 0 → {b}")
        })
        .collect();
    s.warning(regressions.join("\n"));
    let others: Vec<String> = (c.correctness.iter())
        .filter(|x| !x.regression)
        .map(|x| format!("- `{}`: {} {} → {}", x.strategy, x.field, x.a, x.b))
        .collect();
    if !others.is_empty() {
        s.prose(format!(
            "Other changes of oversell, undersell, lost updates or negative stock:\n\n{}",
            others.join("\n")
        ));
    }
    s.heading(2, "What another run can reproduce: order and ratios");
    s.prose(ranking_sentence(c.ranking.as_ref()));
    s.table(reproduce_table(&c.strategies));
    s.heading(2, "Strategies (deductions/s)");
    s.prose(noise_sentence(c));
    s.table(changes_table("strategy", &c.strategies, true));
    s.heading(2, "Baselines");
    s.table(changes_table("baseline", &c.baselines, false));
    s
}

/// Which machines the runs come from, and what that means for the rates.
pub fn machines_sentence(c: &Comparison) -> String {
    let m = &c.machines;
    if m.same() {
        format!(
            "Both runs on the same machine ({}): absolute rates are compared.",
            m.a
        )
    } else {
        format!(
            "**The runs come from different machines** (A: {}; B: {}): their absolute rates \
             are shown side by side, not judged; what is judged is what another machine can \
             reproduce — the strategies' order and each strategy's rate over its own baseline.",
            m.a, m.b
        )
    }
}

/// How the absolute rates are judged.
pub fn noise_sentence(c: &Comparison) -> String {
    if !c.machines.same() {
        return "Rates from different machines: not marked.".into();
    }
    format!(
        "Noise: ±{:.0}% ({}). A change is marked ▲/▼ when it exceeds the noise and, where both \
         runs give min–max, the ranges do not overlap.",
        100.0 * c.noise.fraction,
        noise_source(&c.noise.source)
    )
}

/// The strategies' order: Spearman's ρ against its noise.
pub fn ranking_sentence(r: Option<&Ranking>) -> String {
    let Some(r) = r else {
        return "Fewer than two strategies ran in both runs: no order to compare.".into();
    };
    let verdict = match (r.within_run, r.beyond_noise) {
        (None, _) => "no run has two rounds to measure how much noise moves the order".to_string(),
        (Some(n), true) => format!(
            "**the order changed beyond noise**: two rounds of the same run agreed at ρ = {n:.2} \
             or better"
        ),
        (Some(n), false) => {
            format!("within noise: two rounds of the same run agreed only at ρ = {n:.2}")
        }
    };
    format!(
        "Order of the {} strategies in both runs by deductions/s: Spearman's ρ = {:.2}; {verdict}. \
         A place or a ratio is marked ▲/▼ when its ranges over the two runs' rounds do not \
         overlap.",
        r.strategies, r.spearman
    )
}

/// `3 (2–4) → 5 (5–6)`: a place in both runs, with the places of the rounds.
pub fn rank_text(r: &Moved<Rank>) -> String {
    let one = |x: &Rank| {
        if x.lowest == x.highest {
            format!("{}", x.rank)
        } else {
            format!("{} ({}–{})", x.rank, x.lowest, x.highest)
        }
    };
    format!("{} → {}", one(&r.a), one(&r.b))
}

/// `0.42 (0.38–0.47) → 0.55 (0.50–0.60)`: a ratio in both runs, with its rounds' range.
pub fn ratio_text(r: &Moved<Ratio>) -> String {
    // Two decimals, three below 0.1: a ratio of 0.015 is not 0.01.
    let f = |v: f64| match v < 0.1 {
        true => format!("{v:.3}"),
        false => format!("{v:.2}"),
    };
    let one = |x: &Ratio| match x.range {
        Some((lo, hi)) => format!("{} ({}–{})", f(x.median), f(lo), f(hi)),
        None => f(x.median),
    };
    format!("{} → {}", one(&r.a), one(&r.b))
}

/// ▲ / ▼ for a judged move, nothing otherwise.
pub fn arrow(moved: Option<bool>) -> &'static str {
    match moved {
        Some(true) => "▲ ",
        Some(false) => "▼ ",
        None => "",
    }
}

/// Each strategy's place and ratio to its own baseline, marked where judged.
pub fn reproduce_table(changes: &[Change]) -> Table {
    let mut t = Table::left(["strategy", "place A → B", "rate / own baseline A → B"])
        .named("compare-reproduce")
        .rows_named_by_name();
    for ch in changes {
        let (Some(rank), ratio) = (&ch.rank, &ch.ratio) else {
            continue;
        };
        let place = Cell::num(
            rank.b.rank - rank.a.rank,
            format!("{}{}", arrow(rank.moved), rank_text(rank)),
        );
        let ratio = ratio.as_ref().map_or_else(Cell::none, |r| {
            let text = format!("{}{} of `{}`", arrow(r.moved), ratio_text(r), r.a.baseline);
            Cell::num(r.b.median / r.a.median.max(f64::MIN_POSITIVE), text).judged(judged(r.moved))
        });
        t.strategy_row(
            &ch.name,
            false,
            [
                Cell::code(&ch.name),
                place.judged(judged(rank.moved)),
                ratio,
            ],
        );
    }
    t
}

/// How a change that moved beyond the noise is marked: better up, worse down.
fn judged(moved: Option<bool>) -> Option<Judged> {
    moved.map(|up| if up { Judged::Better } else { Judged::Worse })
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
pub fn changes_table(first: &str, changes: &[Change], sales: bool) -> Table {
    let id = if sales {
        "compare-strategies"
    } else {
        "compare-baselines"
    };
    let mut t = Table::left([first])
        .and_right(["A /s", "B /s", "change"])
        .and_left(["p99 ms A → B"])
        .named(id)
        .rows_named_by_name();
    if sales {
        t = t.and_left(["p99 open ms A → B", "accounting A → B"]);
    }
    for ch in changes {
        let (a, b) = (ch.figures.0.as_ref(), ch.figures.1.as_ref());
        let mut row = vec![
            Cell::code(&ch.name),
            rate(a),
            rate(b),
            change(ch),
            Cell::text(pair(a.map(|f| f.p99_ms), b.map(|f| f.p99_ms))),
        ];
        if sales {
            let open = |f: Option<&Figures>| f.and_then(|f| f.p99_open_ms);
            row.push(Cell::text(pair(open(a), open(b))));
            row.push(accounting(ch));
        }
        t.strategy_row(&ch.name, false, row);
    }
    t
}

/// The accounting fields that differ, `oversell 0 → 3; final_stock 0 → -3`, or `same`.
fn accounting(ch: &Change) -> Cell {
    match &ch.figures {
        (None, _) => Cell::text("only in B"),
        (_, None) => Cell::text("only in A"),
        _ if ch.accounting.is_empty() => Cell::text("same").judged(Some(Judged::Same)),
        _ => Cell::text(
            ch.accounting
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
        ),
    }
}

fn rate(f: Option<&Figures>) -> Cell {
    match f.map(|f| f.rate) {
        None => Cell::none(),
        Some(Range {
            median,
            min_max: Some((min, max)),
        }) => Cell::num(median, format!("{median:.0} ({min:.0}–{max:.0})")),
        Some(r) => Cell::num(r.median, format!("{:.0}", r.median)),
    }
}

/// B's rate as a change from A's, marked where it moved beyond the noise.
fn change(ch: &Change) -> Cell {
    let (Some(_), Some(_)) = &ch.figures else {
        return Cell::none();
    };
    let Some(pct) = ch.percent else {
        return Cell::text("new");
    };
    let text = format!("{}{pct:+.0}%", arrow(ch.moved));
    Cell::num(pct, text).judged(judged(ch.moved).or(Some(Judged::Same)))
}

fn pair(a: Option<f64>, b: Option<f64>) -> String {
    let f = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.1}"));
    format!("{} → {}", f(a), f(b))
}
