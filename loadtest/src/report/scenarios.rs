//! A fault scenario's section of a report: the rows expected against observed with their
//! figures, the timeline, and why.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::table::{Align, Table};
use crate::schema::{ScenarioReport, Verdict};

/// The scenario as a Markdown section.
pub fn markdown(s: &ScenarioReport) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "### `{}`\n\n**Fault:** {}\n", s.scenario, s.fault);
    if let Some(servers) = servers(s) {
        let _ = writeln!(md, "**Round trip added:** {servers}\n");
    }
    let mut rows = Table::left(["subject", "expected", "observed", "verdict", "figures"]);
    for r in &s.rows {
        let verdict = match r.verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "**FAIL**",
        };
        rows.row([
            format!("`{}`", r.subject),
            r.expected.clone(),
            r.observed.clone(),
            verdict.to_string(),
            figures(&r.figures),
        ]);
    }
    md.push_str(&rows.render());
    if !s.timeline.is_empty() {
        md.push_str("\n<details><summary>Timeline</summary>\n\n");
        let mut timeline = Table::new([
            ("t (ms)", Align::Right),
            ("who", Align::Left),
            ("what", Align::Left),
        ]);
        for e in &s.timeline {
            timeline.row([format!("{:.0}", e.t_ms), e.actor.clone(), e.what.clone()]);
        }
        md.push_str(&timeline.render());
        md.push_str("\n</details>\n");
    }
    let _ = writeln!(md, "\n**Why.** {}\n", s.why);
    md
}

/// The round trip added between the scenario's app instances and their servers, when relays
/// put them apart: `1 ms, by a relay in front of each server the app instances reach`.
pub(crate) fn servers(s: &ScenarioReport) -> Option<String> {
    s.servers.added("server the app instances reach")
}

/// `name = value, …` (absent values left out; yes/no for booleans; one decimal for fractions;
/// an answer as its kind).
pub(crate) fn figures(fields: &Map<String, Value>) -> String {
    fields
        .iter()
        .filter_map(|(name, value)| Some(format!("{name} = {}", shown(value)?)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn shown(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(v) if v.fract() != 0.0 => format!("{v:.1}"),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        // A nested value (an answer): its kind, then its details in parentheses.
        Value::Object(fields) => {
            let mut parts = fields.iter().filter_map(|(k, v)| Some((k, shown(v)?)));
            let (_, first) = parts.next()?;
            let rest: Vec<String> = parts.map(|(k, v)| format!("{k} {v}")).collect();
            match rest.is_empty() {
                true => first,
                false => format!("{first} ({})", rest.join(", ")),
            }
        }
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::world::Distance;
    use crate::schema::{Event, Row};

    #[test]
    fn a_scenario_section_shows_each_row_its_figures_and_the_timeline() {
        let figures = serde_json::json!({
            "oversell": 1, "stale": true, "wake_ms": 2.26, "token_b": null,
            "a": {"answer": "refused", "status": 409, "code": "lock_lost"}
        });
        let Value::Object(figures) = figures else {
            unreachable!()
        };
        let s = ScenarioReport {
            scenario: "lease-expiry".into(),
            fault: "a stall | past the lease".into(),
            servers: Distance::Local,
            rows: vec![Row {
                subject: "redis-lock".into(),
                expected: "oversell".into(),
                observed: "two orders".into(),
                verdict: Verdict::Fail,
                figures,
            }],
            timeline: vec![Event {
                t_ms: 12.4,
                actor: "A".into(),
                what: "orders | stalls".into(),
            }],
            why: "because".into(),
        };
        let md = markdown(&s);
        assert!(md.contains("| `redis-lock` | oversell | two orders | **FAIL** | a = refused (code lock_lost, status 409), oversell = 1, stale = yes, wake_ms = 2.3 |"), "{md}");
        assert!(md.contains("| 12 | A | orders \\| stalls |"), "{md}");
        assert!(md.contains("**Why.** because"), "{md}");
        assert!(
            !md.contains("**Round trip added:**"),
            "loopback is not named: {md}"
        );
    }

    #[test]
    fn a_scenario_played_at_a_distance_names_the_round_trip_its_instances_paid() {
        let s = ScenarioReport {
            servers: Distance::Relayed { rtt_us: 1_500 },
            ..ScenarioReport::unplayed("late-payment", "a reason".into())
        };
        let md = markdown(&s);
        assert!(
            md.contains("**Round trip added:** 1.5 ms, by a relay in front of each server the app instances reach"),
            "{md}"
        );
        let html = crate::report::html::timeline::scenario(&s).into_string();
        assert!(
            html.contains("1.5 ms, by a relay in front of each server"),
            "{html}"
        );
    }
}
