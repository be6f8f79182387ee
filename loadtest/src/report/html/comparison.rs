//! The comparison of two runs as HTML (computed by `analyse::compare`): what fell by more than
//! half first, then the machines, correctness, what another run can reproduce (order and
//! ratios), then the absolute figures; each change coloured better or worse only where the
//! comparison judged it beyond the runs' noise (absolute rates never, when the machines differ).

use maud::{Markup, html};

use super::page::{num, prose};
use crate::report::comparison::{
    Change, Comparison, Figures, Range, arrow, machines_sentence, noise_sentence, rank_text,
    ranking_sentence, ratio_text,
};
use crate::report::falls;

/// The comparison's section.
pub fn section(c: &Comparison) -> Markup {
    html! {
        section #comparison data-same-machine=(c.machines.same()) {
            @if !c.falls.is_empty() {
                div #compare-falls class="warning" { (prose(&falls::markdown(falls::AGAINST_A, &c.falls))) }
            }
            p { "Run " strong { (c.a) } " (A) → run " strong { (c.b) } " (B)." }
            div #machines class=[(!c.machines.same()).then_some("warning")] { (prose(&machines_sentence(c))) }
            @if !c.settings_changed.is_empty() {
                p.warning { strong { "The runs' settings differ" } " (" (c.settings_changed.join(", "))
                    "): their figures measure different work." }
            }
            h3 { "Correctness" }
            @if c.regressions.is_empty() {
                p.same { "No strategy expected to be safe went from 0 to any oversell, lost update or negative stock." }
            }
            @if !c.correctness.is_empty() {
                ul #correctness {
                    @for x in &c.correctness {
                        @if x.regression {
                            li.worse { strong { code { (x.strategy) } " (expected not to oversell): " (x.field) " " (x.a) " → " (x.b) } }
                        } @else {
                            li { code { (x.strategy) } ": " (x.field) " " (x.a) " → " (x.b) }
                        }
                    }
                }
            }
            h3 { "What another run can reproduce: order and ratios" }
            div #ranking { (prose(&ranking_sentence(c.ranking.as_ref()))) }
            (reproduce(&c.strategies))
            h3 { "Strategies (deductions/s)" }
            div { (prose(&noise_sentence(c))) }
            (changes("compare-strategies", &c.strategies, true))
            h3 { "Baselines" }
            (changes("compare-baselines", &c.baselines, false))
        }
    }
}

/// Each strategy's place and ratio to its own baseline, coloured where judged.
fn reproduce(changes: &[Change]) -> Markup {
    let judged = |moved: Option<bool>| match moved {
        Some(true) => Some("better"),
        Some(false) => Some("worse"),
        None => None,
    };
    html! {
        table.sortable #compare-reproduce {
            thead { tr { th { "strategy" } th { "place A → B" } th { "rate / own baseline A → B" } } }
            tbody {
                @for ch in changes {
                    @if let Some(rank) = &ch.rank {
                        tr data-name=(ch.name) {
                            td { code { (ch.name) } }
                            td class=[judged(rank.moved)] data-sort=(rank.b.rank - rank.a.rank) {
                                (arrow(rank.moved)) (rank_text(rank))
                            }
                            @match &ch.ratio {
                                Some(r) => td class=[judged(r.moved)] data-sort=(r.b.median / r.a.median.max(f64::MIN_POSITIVE)) {
                                    (arrow(r.moved)) (ratio_text(r)) " of " code { (r.a.baseline) }
                                },
                                None => td { "–" },
                            }
                        }
                    }
                }
            }
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
    let (Some(_), Some(_)) = &ch.figures else {
        return html! { td.num { "–" } };
    };
    let Some(pct) = ch.percent else {
        return html! { td.num { "new" } };
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::compare::compare;
    use crate::sample::report;

    #[test]
    fn absolute_rates_are_coloured_on_one_machine_and_not_across_two() {
        let a = report();
        let mut b = report();
        b.strategies[1].throughput.closed.successes_per_sec *= 3.0;
        let same = section(&compare(&a, &b)).into_string();
        assert!(
            same.contains("td class=\"num better\" data-sort=\"200\" data-judged=\"better\""),
            "{same}"
        );
        b.environment.cpu_model = Some("Another CPU".into());
        let other = section(&compare(&a, &b)).into_string();
        assert!(!other.contains("data-judged"), "{other}");
        assert!(other.contains("data-same-machine=\"false\""), "{other}");
        assert!(
            other.contains("The runs come from different machines"),
            "{other}"
        );
    }
}
