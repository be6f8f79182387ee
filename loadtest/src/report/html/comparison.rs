//! The comparison of two runs as HTML: the comparison's one model
//! ([`crate::report::comparison::section`]), marked with whether the runs share a machine.

use maud::{Markup, html};

use super::section::print_section;
use crate::report::comparison::section as model;
use crate::schema::comparison::Comparison;

/// The comparison's section.
pub fn section(c: &Comparison) -> Markup {
    html! {
        section #comparison data-same-machine=(c.machines.same()) {
            (print_section(&model(c), &[]))
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
        b.strategies[1]
            .loops
            .as_mut()
            .unwrap()
            .throughput
            .closed
            .successes_per_sec *= 3.0;
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
