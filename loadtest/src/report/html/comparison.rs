//! The comparison of two runs as HTML (computed by `analyse::compare`): correctness first,
//! then the figures, each change coloured better or worse only where the comparison judged it
//! beyond the runs' noise.

use maud::{Markup, html};

use super::page::num;
use crate::report::comparison::{Change, Comparison, Figures, Range, noise_source};

/// The comparison's section.
pub fn section(c: &Comparison) -> Markup {
    html! {
        section #comparison {
            p { "Run " strong { (c.a) } " (A) → run " strong { (c.b) } " (B). Noise ±"
                (format!("{:.0}%", 100.0 * c.noise.fraction)) " (" (noise_source(&c.noise.source)) ")." }
            @if !c.settings_changed.is_empty() {
                p.warning { strong { "The runs' settings differ" } " (" (c.settings_changed.join(", "))
                    "): their figures measure different work." }
            }
            h3 { "Correctness" }
            @if c.regressions.is_empty() {
                p #correctness.same { "No strategy expected to be safe went from 0 to any oversell, lost update or negative stock." }
            } @else {
                ul #correctness {
                    @for r in &c.regressions {
                        li.worse { code { (r.strategy) } " (expected not to oversell): " (r.field) " 0 → " (r.b) }
                    }
                }
            }
            h3 { "Strategies (deductions/s)" }
            (changes("compare-strategies", &c.strategies, true))
            h3 { "Baselines" }
            (changes("compare-baselines", &c.baselines, false))
        }
    }
}

fn changes(id: &str, changes: &[Change], sales: bool) -> Markup {
    html! {
        table.sortable id=(id) {
            thead { tr {
                th { "name" } th { "A /s" } th { "B /s" } th { "change" } th { "p99 ms A → B" }
                @if sales { th { "accounting A → B" } }
            } }
            tbody {
                @for ch in changes {
                    @let (a, b) = (ch.figures.0.as_ref(), ch.figures.1.as_ref());
                    tr data-name=(ch.name) {
                        td { code { (ch.name) } }
                        (rate(a)) (rate(b))
                        (change(ch))
                        td { (pair(a.map(|f| f.p99_ms), b.map(|f| f.p99_ms))) }
                        @if sales { (accounting(ch)) }
                    }
                }
            }
        }
    }
}

fn rate(f: Option<&Figures>) -> Markup {
    match f.map(|f| f.rate) {
        None => html! { td.num { "–" } },
        Some(Range {
            median,
            min_max: Some((min, max)),
        }) => num(median, format!("{median:.0} ({min:.0}–{max:.0})")),
        Some(r) => num(r.median, format!("{:.0}", r.median)),
    }
}

fn change(ch: &Change) -> Markup {
    let (Some(a), Some(b)) = &ch.figures else {
        return html! { td.num { "–" } };
    };
    if a.rate.median <= 0.0 {
        return html! { td.num { "new" } };
    }
    let pct = 100.0 * (b.rate.median - a.rate.median) / a.rate.median;
    let text = format!("{pct:+.0}%");
    match ch.moved {
        Some(true) => html! { td.num.better data-sort=(pct) data-judged="better" { "▲ " (text) } },
        Some(false) => html! { td.num.worse data-sort=(pct) data-judged="worse" { "▼ " (text) } },
        None => html! { td.num.same data-sort=(pct) { (text) } },
    }
}

fn accounting(ch: &Change) -> Markup {
    html! {
        @match &ch.figures {
            (None, _) => td { "only in B" },
            (_, None) => td { "only in A" },
            _ if ch.accounting.is_empty() => td.same { "same" },
            _ => td {
                @for (i, f) in ch.accounting.iter().enumerate() {
                    @if i > 0 { "; " }
                    @if f.regression {
                        span.worse { strong { (f.field) " " (f.a) " → " (f.b) " (correctness)" } }
                    } @else {
                        (f.field) " " (f.a) " → " (f.b)
                    }
                }
            },
        }
    }
}

fn pair(a: Option<f64>, b: Option<f64>) -> String {
    let f = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.1}"));
    format!("{} → {}", f(a), f(b))
}
