//! A fault scenario's outcome: expected against observed per row, the figures behind each
//! verdict, the timeline, and why.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::schema::world::Distance;

/// One scenario's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioReport {
    /// The scenario's name, as on the command line.
    pub scenario: String,
    /// The fault that was injected, in one sentence.
    pub fault: String,
    /// What lay between the scenario's app instances and their servers (`--rtt`): local when
    /// they reached them over loopback, or when the scenario's clients reach its servers
    /// themselves, or it sets its own distances (absent from reports written before a
    /// scenario could be played at a distance: local).
    #[serde(
        default = "Distance::local",
        skip_serializing_if = "Distance::is_local"
    )]
    pub servers: Distance,
    pub rows: Vec<Row>,
    pub timeline: Vec<Event>,
    /// Why the rows came out as they did, generated from the figures.
    pub why: String,
}

impl ScenarioReport {
    /// A scenario that could not be played to its end: one failed row that says why, so that
    /// a run keeps its other measurements and the failure is read in its report.
    pub fn unplayed(scenario: &str, why: String) -> ScenarioReport {
        ScenarioReport {
            scenario: scenario.to_owned(),
            fault: String::new(),
            servers: Distance::Local,
            rows: vec![Row {
                subject: "the scenario".to_owned(),
                expected: "played to its end".to_owned(),
                observed: format!("could not be played: {why}"),
                verdict: Verdict::Fail,
                figures: Map::new(),
            }],
            timeline: Vec::new(),
            why: String::new(),
        }
    }

    /// The row about `subject`.
    pub fn row(&self, subject: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.subject == subject)
    }

    /// Whether every row's observation matched its expectation.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.verdict == Verdict::Pass)
    }
}

/// One strategy, backend or mode under the fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Strategy or lock backend (and variant, e.g. `redis + WAIT 1`).
    pub subject: String,
    pub expected: String,
    pub observed: String,
    pub verdict: Verdict,
    /// What was measured: the scenario's own figures type, as an object.
    pub figures: Map<String, Value>,
}

impl Row {
    /// The figures as the scenario's type `F`.
    pub fn figures<F: DeserializeOwned>(&self) -> serde_json::Result<F> {
        serde_json::from_value(Value::Object(self.figures.clone()))
    }
}

/// Whether the observation matched the expectation (for a broken variant, "pass" means the
/// failure it exists to show did happen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub t_ms: f64,
    pub actor: String,
    pub what: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_that_could_not_be_played_is_a_failed_row_that_says_why() {
        let r = ScenarioReport::unplayed("cancel-expiry-race", "409 sold_out".to_owned());
        assert!(!r.passed());
        assert_eq!(r.rows.len(), 1);
        assert!(
            r.rows[0].observed.contains("409 sold_out"),
            "{:?}",
            r.rows[0]
        );
    }
}
