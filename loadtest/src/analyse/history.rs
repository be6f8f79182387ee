//! What the lock-history checker ([`locks::history`]) found in a recorded run, counted by the
//! property each rule checks: one holder at a time, fencing tokens in grant order, and only the
//! newest token's writes accepted.

use locks::history::{self, Rule};
use serde::{Deserialize, Serialize};

/// What the checker found, by rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    pub overlaps: usize,
    pub tokens_not_increasing: usize,
    pub stale_writes_accepted: usize,
}

impl Checked {
    pub fn of(events: &[history::Event]) -> Checked {
        Checked::from_violations(&history::check_events(events))
    }

    pub fn from_violations(violations: &[history::Violation]) -> Checked {
        let mut checked = Checked::default();
        for violation in violations {
            *match &violation.rule {
                Rule::Overlap { .. } => &mut checked.overlaps,
                Rule::TokenNotIncreasing { .. } => &mut checked.tokens_not_increasing,
                Rule::StaleWriteAccepted { .. } => &mut checked.stale_writes_accepted,
            } += 1;
        }
        checked
    }

    /// Violations of "tokens in grant order, only the newest written".
    pub fn tokens_out_of_order(&self) -> usize {
        self.tokens_not_increasing + self.stale_writes_accepted
    }

    pub fn total(&self) -> usize {
        self.overlaps + self.tokens_out_of_order()
    }
}
