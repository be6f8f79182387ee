//! `report.html`: the run as one self-contained page — what fell by more than half against the
//! best run on the machine, the summary table (sortable), the charts inline, the findings in
//! words, every scenario with its timeline drawn, the accounting, the loads, the baselines, the
//! environment, and the comparison with another run when one is given. Every figure is read from the schema ([`RunReport`]) or from the
//! comparison `analyse::compare` computed; nothing is computed here.
//!
//! The page makes no request: its style and script are inline, the charts are inline SVG, and
//! its Content-Security-Policy (`default-src 'none'`, the script allowed by its hash) forbids
//! the browser to fetch anything (see [`page`]).

pub mod comparison;
pub mod page;
pub mod section;
pub mod table;
pub mod timeline;

use std::path::Path;

use anyhow::{Context, Result};
use maud::{Markup, PreEscaped, html};

use super::charts::Chart;
use super::comparison::Comparison;
use super::schema::RunReport;
use super::{falls, flood, prose, stages, tables};
use crate::phase::REGISTRY;

/// Writes `report.html` into `dir`.
pub fn write(
    dir: &Path,
    r: &RunReport,
    charts: &[Chart],
    flood_charts: &[Chart],
    compared: Option<&Comparison>,
) -> Result<()> {
    let path = dir.join("report.html");
    std::fs::write(&path, render(r, charts, flood_charts, compared))
        .with_context(|| format!("writing {}", path.display()))
}

/// The whole page: `charts` after the summary, `flood_charts` in the flood's section.
pub fn render(
    r: &RunReport,
    charts: &[Chart],
    flood_charts: &[Chart],
    compared: Option<&Comparison>,
) -> String {
    let title = format!("seckill-bench run, {}", r.started_at);
    page::document(
        &title,
        body(r, charts, flood_charts, compared),
        &[page::SORT_SCRIPT],
        None,
    )
    .into_string()
}

/// A comparison of two runs alone, as a page (`seckill-bench compare --out`).
pub fn render_comparison(c: &Comparison) -> String {
    let body = html! {
        h1 { "Comparison: " (c.a) " → " (c.b) }
        (comparison::section(c))
    };
    page::document(
        &format!("Comparison {} → {}", c.a, c.b),
        body,
        &[page::SORT_SCRIPT],
        None,
    )
    .into_string()
}

fn body(
    r: &RunReport,
    charts: &[Chart],
    flood_charts: &[Chart],
    compared: Option<&Comparison>,
) -> Markup {
    let s = &r.settings;
    html! {
        h1 { "seckill-bench run, " (r.started_at) }
        @if !r.falls.is_empty() {
            div #falls class="warning" { (page::prose(&falls::markdown(falls::AGAINST_BEST, &r.falls))) }
        }
        p.note {
            (r.strategies.len()) " strategies on " (s.instances) " app instance(s); flash sale of "
            (s.stock) " units to " (s.buyers) " concurrent buyers sending " (s.demand) " requests of "
            (s.quantity) " unit(s)" (crate::report::prose::sale_door(r)) "; each closed-loop and baseline figure is the median of "
            (s.repetitions) " run(s) of " (s.seconds) " s, with min–max in parentheses. Machine: "
            span #machine { (r.environment.cpu_model.as_deref().unwrap_or("unknown CPU")) ", "
                (r.environment.cpus) " CPUs" }
            ". Total run time " (format!("{:.0}", r.duration_seconds)) " s."
        }
        nav { "Sections: "
            a href="#summary-section" { "summary" } " · "
            @if compared.is_some() { a href="#comparison-section" { "comparison" } " · " }
            a href="#findings" { "what went wrong" } " · "
            @if !r.scenarios.is_empty() { a href="#scenarios" { "scenarios" } " · " }
            @if !r.floods.is_empty() { a href="#flood" { "flood" } " · " }
            @for phase in REGISTRY {
                @if phase.measured(r) { a href=(format!("#{}", phase.name())) { (phase.label()) } " · " }
            }
            a href="#sale" { "flash sale" } " · "
            a href="#throughput" { "throughput" } " · "
            a href="#baselines" { "baselines" } " · "
            a href="#environment-section" { "environment" }
        }
        h2 #summary-section { "Summary" }
        p.note { "Click a column's title to sort by it." }
        (table::print(&tables::summary(r)))
        @for chart in charts {
            figure data-chart=(chart.file) { (PreEscaped(&chart.svg)) }
        }
        @if let Some(c) = compared {
            h2 #comparison-section { "Compared with the previous run" }
            (comparison::section(c))
        }
        h2 #findings { "What went wrong and why" }
        @if r.findings.sales.is_empty() {
            p { "Every strategy kept every invariant in this run." }
        }
        @for f in &r.findings.sales {
            @if let Some(x) = r.strategy(f.strategy) {
                (page::prose(&prose::sale(x, f, s.instances)))
            }
        }
        @for phase in REGISTRY {
            @if let Some(words) = phase.went_wrong(r) {
                (page::prose(&words))
            }
        }
        @if !r.scenarios.is_empty() {
            h2 #scenarios { "Fault scenarios" }
            p { "Each scenario starts its own servers and app instances, injects one fault, and \
                 compares what each strategy or lock was expected to do with what it did. For a \
                 deliberately broken variant, " em { "pass" } " means its failure showed." }
            @for sc in &r.scenarios { (timeline::scenario(sc)) }
        }
        @if !r.floods.is_empty() {
            section #flood {
                (section::print_section(&flood::section(r.settings.flood.as_ref(), &r.floods, &r.findings.flood), flood_charts))
            }
        }
        @for phase in REGISTRY {
            @if phase.measured(r) {
                section id=(phase.name()) {
                    (section::print_section(&phase.section(r), &[]))
                }
            }
        }
        h2 #sale { "Flash sale: the database's accounting" }
        p.note { "sold = Σ order quantities; oversell = max(0, sold − S); lost updates = sold − \
                  (S − final stock) when positive; undersell = units left although demand \
                  exceeded supply. The answers are what the clients were told." }
        (table::print(&tables::accounting(r)))
        h2 #throughput { "Throughput, closed loop" }
        (table::print(&tables::closed_loops(r)))
        h3 { "Open loop (latency from the intended send time)" }
        (table::print(&tables::open_loops(r)))
        @if r.strategies.iter().any(|x| x.cpu.is_some()) {
            h3 { "CPU per 1,000 deductions (closed loop): CPU-seconds / busy cores" }
            (table::print(&tables::cpu(r)))
        }
        @if r.strategies.iter().any(|x| x.stages.is_some()) {
            section #stages { (section::print_section(&stages::section(r), &[])) }
        }
        @if !r.findings.time.is_empty() {
            h3 { "Where the time goes" }
            @for f in &r.findings.time {
                @if let Some(x) = r.strategy(f.strategy) { (page::prose(&prose::time(x, f))) }
            }
        }
        h2 #baselines { "Baselines (nothing of ours in between)" }
        @if r.baselines.is_empty() {
            p { "Skipped." }
        } @else {
            (table::print(&tables::baselines(r)))
            @if let Some(check) = &r.findings.client { (page::prose(&prose::client(check))) }
            @if r.baselines.iter().any(|b| b.standard_tool.is_some()) {
                h3 { "Ours beside the standard tools" }
                (table::print(&tables::tools(r)))
                @for f in &r.findings.tools { (page::prose(&prose::tool(f))) }
            }
        }
        @if !r.hot_row_sweep.is_empty() {
            h3 { "The hot row at several connection counts" }
            (table::print(&tables::hot_row_sweep(&r.hot_row_sweep)))
        }
        h2 #environment-section { "Environment" }
        (table::print(&tables::environment(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::charts;
    use crate::sample::report;

    #[test]
    fn the_page_holds_every_strategy_the_charts_and_no_reference_to_anything_outside() {
        let r = report();
        let html = render(&r, &charts::all(&r).unwrap(), &[], None);
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
        let html = render(&r, &[], &[], None);
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
        r.strategies[0].sale.accounting.oversell = 7;
        r.strategies[0].sale.accounting.orders = 107;
        let html = render(&r, &[], &[], None);
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
