//! `report.html`: a report's parts ([`crate::document`]) on one self-contained page, with a
//! list of its sections and, where the document places it, the comparison with another run
//! when one is given. Every figure is read from those two models; nothing is computed or
//! chosen here.
//!
//! The page makes no request: its style and script are inline, the charts are inline SVG, and
//! its Content-Security-Policy (`default-src 'none'`, the script allowed by its hash) forbids
//! the browser to fetch anything (see [`page`]).

pub mod comparison;
pub mod markdown;
pub mod page;
pub mod section;
pub mod table;
pub mod timeline;

use maud::{Markup, html};

use super::charts::Chart;
use super::section::Part;
use crate::schema::comparison::Comparison;

/// The whole page: the report's parts, drawing `charts` where they place them, and the
/// comparison with another run, when given, between the parts before it and those after.
pub fn render(
    title: &str,
    parts: (&[Part], &[Part]),
    charts: &[Chart],
    compared: Option<&Comparison>,
) -> String {
    page::document(
        title,
        body(title, parts, charts, compared),
        &[page::SORT_SCRIPT],
        None,
    )
    .into_string()
}

/// A comparison of two runs alone, as a page (`seckill-bench compare --out`).
pub fn render_comparison(c: &Comparison) -> String {
    let title = crate::report::comparison::title(c);
    let body = html! {
        h1 { (title) }
        (comparison::section(c))
    };
    page::document(&title, body, &[page::SORT_SCRIPT], None).into_string()
}

fn body(
    title: &str,
    (before, after): (&[Part], &[Part]),
    charts: &[Chart],
    compared: Option<&Comparison>,
) -> Markup {
    let print = |part: &Part| {
        html! { section id=(part.id) { (section::print_section(&part.section, charts)) } }
    };
    html! {
        h1 { (title) }
        nav { "Sections: "
            @for (i, part) in before.iter().enumerate() {
                @if i > 0 { " · " } a href=(format!("#{}", part.id)) { (part.label) }
            }
            @if compared.is_some() { " · " a href="#comparison-section" { "comparison" } }
            @for part in after { " · " a href=(format!("#{}", part.id)) { (part.label) } }
            ". A table sorts by the column whose title is clicked."
        }
        @for part in before { (print(part)) }
        @if let Some(c) = compared {
            h2 #comparison-section { "Compared with the previous run" }
            (comparison::section(c))
        }
        @for part in after { (print(part)) }
    }
}

#[cfg(test)]
mod tests {
    use crate::report::charts;
    use crate::sample::report;

    #[test]
    fn the_page_holds_every_strategy_the_charts_and_no_reference_to_anything_outside() {
        let r = report();
        let html = crate::document::html(&r, &charts::all(&r).unwrap(), None);
        for x in &r.strategies {
            assert!(
                html.contains(&format!("data-strategy=\"{}\"", x.strategy.name)),
                "{} has no row",
                x.strategy.name
            );
        }
        assert_eq!(html.matches("<svg").count(), 3, "the three charts inline");
        for outside in ["src=", "href=\"http", "@import", "url("] {
            assert!(
                !html.contains(outside),
                "the page refers outside itself: {outside}"
            );
        }
        assert!(html.contains("content=\"default-src 'none'"), "no CSP");
    }

    #[test]
    fn the_overload_phase_has_its_section_with_its_table() {
        let r = report();
        let html = crate::document::html(&r, &[], None);
        assert!(
            html.contains("href=\"#overload\""),
            "no link in the sections"
        );
        let section = &html[html
            .find("<section id=\"overload\">")
            .expect("an overload section")..];
        let section = &section[..section.find("</section>").unwrap()];
        assert!(section.contains("<table"), "{section}");
        assert!(section.contains("<code>conditional</code>"), "{section}");
    }

    #[test]
    fn the_accounting_cells_carry_the_reports_figures() {
        let mut r = report();
        r.strategies[0].sale.as_mut().unwrap().accounting.oversell = 7;
        r.strategies[0].sale.as_mut().unwrap().accounting.orders = 107;
        let html = crate::document::html(&r, &[], None);
        let name = r.strategies[0].strategy.name;
        let row_at = html
            .find(&format!(
                "<tr data-strategy=\"{name}\"><td><code>{name}</code></td><td>{}",
                r.strategies[0].strategy.safety
            ))
            .expect("the accounting row");
        let row = &html[row_at..row_at + html[row_at..].find("</tr>").unwrap()];
        assert!(
            row.contains("data-field=\"oversell\" data-sort=\"7\">7<"),
            "{row}"
        );
        assert!(
            row.contains("data-field=\"orders\" data-sort=\"107\">107<"),
            "{row}"
        );
    }
}
