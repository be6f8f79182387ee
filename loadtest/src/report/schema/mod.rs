//! The report's schema: the types `report.json` is made of, written and read by the same
//! types.

mod scenario;

pub use scenario::{Event, Row, ScenarioReport, Verdict};
