//! A fault scenario as HTML: its rows expected against observed, its timeline drawn (one lane
//! per actor, each event a mark at its time, its words on hover and in the table below), and
//! why.

use maud::{Markup, html};

use super::markdown::prose;
use crate::report::scenarios::{figures, servers};
use crate::schema::{Event, ScenarioReport, Verdict};

const WIDTH: f64 = 1000.0;
const LANE: f64 = 22.0;
const LABELS: f64 = 230.0;
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One scenario's section.
pub fn scenario(s: &ScenarioReport) -> Markup {
    html! {
        section.scenario id=(format!("scenario-{}", s.scenario)) data-passed=(s.passed()) {
            h3 { code { (s.scenario) } }
            p { strong { "Fault: " } (s.fault) }
            @if let Some(servers) = servers(s) {
                p { strong { "Round trip added: " } (servers) }
            }
            table.sortable {
                thead { tr { th { "subject" } th { "expected" } th { "observed" } th { "verdict" } th { "figures" } } }
                tbody {
                    @for row in &s.rows {
                        tr {
                            td { code { (row.subject) } }
                            td { (row.expected) }
                            td { (row.observed) }
                            @match row.verdict {
                                Verdict::Pass => td.pass { "pass" },
                                Verdict::Fail => td.fail { "FAIL" },
                            }
                            td { (figures(&row.figures)) }
                        }
                    }
                }
            }
            @if !s.timeline.is_empty() {
                figure { (drawing(&s.timeline)) }
                details {
                    summary { "Timeline, event by event (" (s.timeline.len()) ")" }
                    table {
                        thead { tr { th { "t (ms)" } th { "who" } th { "what" } } }
                        tbody {
                            @for e in &s.timeline {
                                tr { td.num { (format!("{:.0}", e.t_ms)) } td { (e.actor) } td { (e.what) } }
                            }
                        }
                    }
                }
            }
            div { strong { "Why. " } (prose(&s.why)) }
        }
    }
}

/// The events as an SVG: one lane per actor in order of first appearance, time to the right.
pub fn drawing(events: &[Event]) -> Markup {
    let mut actors: Vec<&str> = Vec::new();
    for e in events {
        if !actors.contains(&e.actor.as_str()) {
            actors.push(&e.actor);
        }
    }
    let end = events
        .iter()
        .map(|e| e.t_ms)
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let height = LANE * actors.len() as f64 + 30.0;
    let x = |t: f64| LABELS + (WIDTH - LABELS - 20.0) * t / end;
    let lane = |actor: &str| actors.iter().position(|a| *a == actor).unwrap_or(0);
    html! {
        svg.timeline xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img" aria-label="timeline" {
            @for (i, actor) in actors.iter().enumerate() {
                @let y = LANE * (i as f64 + 0.5);
                line x1=(LABELS) x2=(WIDTH - 20.0) y1=(y) y2=(y) stroke="#ddd" {}
                text x=(LABELS - 6.0) y=(y + 4.0) text-anchor="end" { (short(actor, 34)) }
            }
            @for e in events {
                @let i = lane(&e.actor);
                circle.event cx=(format!("{:.1}", x(e.t_ms))) cy=(LANE * (i as f64 + 0.5)) r="5"
                    fill=(PALETTE[i % PALETTE.len()]) {
                    title { (format!("{:.0} ms — {}: {}", e.t_ms, e.actor, e.what)) }
                }
            }
            @let axis = LANE * actors.len() as f64 + 14.0;
            text x=(LABELS) y=(axis) { "0 ms" }
            text x=(WIDTH - 20.0) y=(axis) text-anchor="end" { (format!("{end:.0} ms")) }
        }
    }
}

/// The first `n` characters, with an ellipsis when cut.
fn short(text: &str, n: usize) -> Markup {
    match text.char_indices().nth(n) {
        Some((at, _)) => html! { (&text[..at]) "…" },
        None => html! { (text) },
    }
}
