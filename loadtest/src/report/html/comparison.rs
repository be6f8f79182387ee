//! The comparison of two runs as HTML (computed by `analyse::compare`): what fell by more than
//! half first, then the machines, correctness, what another run can reproduce (order and
//! ratios), then the absolute figures; each change coloured better or worse only where the
//! comparison judged it beyond the runs' noise (absolute rates never, when the machines differ).

use maud::{Markup, html};

use super::page::prose;
use super::table::print;
use crate::report::comparison::{
    Comparison, changes_table, machines_sentence, noise_sentence, ranking_sentence, reproduce_table,
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
            (print(&reproduce_table(&c.strategies)))
            h3 { "Strategies (deductions/s)" }
            div { (prose(&noise_sentence(c))) }
            (print(&changes_table("name", &c.strategies, true)))
            h3 { "Baselines" }
            (print(&changes_table("name", &c.baselines, false)))
        }
    }
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
        let rates = &other[other.find("id=\"compare-strategies\"").unwrap()..];
        let rates = &rates[..rates.find("</table>").unwrap()];
        assert!(!rates.contains("data-judged"), "{rates}");
        assert!(
            other.contains("data-judged=\"better\">▲ 1.5 → 1<"),
            "the order is judged"
        );
        assert!(other.contains("data-same-machine=\"false\""), "{other}");
        assert!(
            other.contains("The runs come from different machines"),
            "{other}"
        );
    }
}
