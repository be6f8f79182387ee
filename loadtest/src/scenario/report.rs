//! What a scenario hands back: expected-vs-observed rows, the figures behind each verdict, the
//! timeline of who held the lock when, and a Markdown rendering of all of it.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use super::Figures;
use super::Scenario;

/// One scenario's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub scenario: Scenario,
    /// The fault that was injected, in one sentence.
    pub fault: String,
    pub rows: Vec<Row>,
    pub timeline: Vec<Event>,
    /// Why the rows came out as they did, generated from the figures.
    pub why: String,
}

/// One strategy or backend under the fault.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Strategy or lock backend (and variant, e.g. `redis (WAIT 1)`).
    pub subject: String,
    pub expected: String,
    pub observed: String,
    pub verdict: Verdict,
    /// What was measured.
    pub figures: Figures,
}

/// Whether the observation matched the expectation (for a broken variant, "pass" means the
/// failure it exists to show did happen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
}

impl Verdict {
    pub fn from_bool(ok: bool) -> Verdict {
        if ok { Verdict::Pass } else { Verdict::Fail }
    }
}

/// Something that happened, `t_ms` after the scenario (or its current round) started.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub t_ms: f64,
    pub actor: String,
    pub what: String,
}

impl Row {
    /// A row whose verdict is `ok` (the caller computes it from the figures).
    pub fn new(
        subject: impl Into<String>,
        expected: impl Into<String>,
        observed: impl Into<String>,
        ok: bool,
        figures: impl Into<Figures>,
    ) -> Row {
        Row {
            subject: subject.into(),
            expected: expected.into(),
            observed: observed.into(),
            verdict: Verdict::from_bool(ok),
            figures: figures.into(),
        }
    }
}

impl ScenarioReport {
    /// The row about `subject`.
    pub fn row(&self, subject: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.subject == subject)
    }

    /// Whether every row's observation matched its expectation.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.verdict == Verdict::Pass)
    }

    /// A section for the report: the table, the figures, the timeline and the "why".
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "### `{}`\n\n**Fault:** {}\n", self.scenario, self.fault);
        md.push_str(
            "| subject | expected | observed | verdict | figures |\n|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let verdict = match r.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "**FAIL**",
            };
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {verdict} | {} |",
                r.subject,
                cell(&r.expected),
                cell(&r.observed),
                r.figures.markdown()
            );
        }
        if !self.timeline.is_empty() {
            md.push_str("\n<details><summary>Timeline</summary>\n\n| t (ms) | who | what |\n|---:|---|---|\n");
            for e in &self.timeline {
                let _ = writeln!(
                    md,
                    "| {:.0} | {} | {} |",
                    e.t_ms,
                    cell(&e.actor),
                    cell(&e.what)
                );
            }
            md.push_str("\n</details>\n");
        }
        let _ = writeln!(md, "\n**Why.** {}\n", self.why);
        md
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A shared, clonable event log with one time origin.
#[derive(Clone)]
pub struct Timeline {
    start: Instant,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline {
            start: Instant::now(),
            events: Arc::default(),
        }
    }

    /// Records that `actor` did or saw `what`, now.
    pub fn log(&self, actor: impl Into<String>, what: impl Into<String>) {
        self.log_at(self.now_ms(), actor, what);
    }

    /// Records that `actor` did or saw `what`, `t_ms` after the origin: for a moment measured
    /// elsewhere and noted afterwards.
    pub fn log_at(&self, t_ms: f64, actor: impl Into<String>, what: impl Into<String>) {
        let event = Event {
            t_ms,
            actor: actor.into(),
            what: what.into(),
        };
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }

    /// Milliseconds since the origin.
    pub fn now_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    /// The events so far, in time order, each actor prefixed with `round` when given.
    pub fn events(&self, round: Option<&str>) -> Vec<Event> {
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        events.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        if let Some(round) = round {
            for e in &mut events {
                e.actor = format!("{round}: {}", e.actor);
            }
        }
        events
    }
}

impl Default for Timeline {
    fn default() -> Timeline {
        Timeline::new()
    }
}
