//! The section model ([`crate::report::section::Section`]) printed as HTML: headings, prose,
//! tables through the one table printer, and each chart drawn inline from the page's charts.

use maud::{Markup, PreEscaped, html};

use super::markdown::{inline, prose};
use super::table::print;
use crate::report::charts::Chart;
use crate::report::section::{Block, Section};

/// The section as HTML; a chart the page does not hold is left out.
pub fn print_section(s: &Section, charts: &[Chart]) -> Markup {
    html! {
        @for block in &s.blocks {
            @match block {
                Block::Heading { level: 2, text } => h2 { (inline(text)) },
                Block::Heading { text, .. } => h3 { (inline(text)) },
                Block::Prose(markdown) => (prose(markdown)),
                Block::Warning(markdown) => div.warning { (prose(markdown)) },
                Block::Scenario(s) => (super::timeline::scenario(s)),
                Block::Table(t) => (print(t)),
                Block::Chart { file, .. } => @if let Some(c) = charts.iter().find(|c| &c.file == file) {
                    figure data-chart=(c.file) { (PreEscaped(&c.svg)) }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::table::Table;

    #[test]
    fn a_section_prints_as_html_with_its_charts_inline() {
        let mut t = Table::left(["strategy"]);
        t.row(["`naive`"]);
        let mut s = Section::titled("The flood");
        s.prose("Words with `code`.")
            .table(t)
            .chart("f.svg", "f")
            .chart("absent.svg", "a");
        let chart = Chart {
            file: "f.svg".into(),
            title: "f".into(),
            svg: "<svg></svg>".into(),
        };
        assert_eq!(
            print_section(&s, &[chart]).into_string(),
            "<h2>The flood</h2><p>Words with <code>code</code>.</p>\n<table class=\"sortable\"><thead><tr>\
             <th>strategy</th></tr></thead><tbody><tr><td><code>naive</code></td></tr></tbody>\
             </table><figure data-chart=\"f.svg\"><svg></svg></figure>"
        );
    }
}
