//! Who did what when, during a scenario or one of its rounds.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::live::Feed;
use crate::schema::Event;

/// A shared, clonable event log with one time origin.
#[derive(Clone)]
pub struct Timeline {
    start: Instant,
    /// Shown before every actor.
    round: Option<String>,
    events: Arc<Mutex<Vec<Event>>>,
    /// The scenario's name, for the live page.
    scenario: Arc<str>,
    /// Told of each event as it is logged (and, in teaching mode, holds it until "Next").
    live: Feed,
}

impl Timeline {
    pub(super) fn new(round: Option<String>, scenario: &str, live: &Feed) -> Timeline {
        Timeline {
            start: Instant::now(),
            round,
            events: Arc::default(),
            scenario: scenario.into(),
            live: live.clone(),
        }
    }

    /// Records that `actor` did or saw `what`, now.
    pub fn log(&self, actor: impl Into<String>, what: impl Into<String>) {
        self.log_at(self.now_ms(), actor, what);
    }

    /// Records that `actor` did or saw `what`, `t_ms` after the origin: for a moment measured
    /// elsewhere and noted afterwards.
    pub fn log_at(&self, t_ms: f64, actor: impl Into<String>, what: impl Into<String>) {
        let actor = actor.into();
        let event = Event {
            t_ms,
            actor: match &self.round {
                Some(round) => format!("{round}: {actor}"),
                None => actor,
            },
            what: what.into(),
        };
        self.lock().push(event.clone());
        self.live.timeline(&self.scenario, &event);
    }

    /// Notes every step of a recorded lock history, at the times it recorded.
    pub fn history(&self, events: &[locks::history::Event]) {
        for e in events {
            self.log_at(e.at.as_secs_f64() * 1000.0, &e.client, e.op.to_string());
        }
    }

    /// Milliseconds since the origin.
    pub fn now_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    /// The events so far, in time order.
    pub fn events(&self) -> Vec<Event> {
        let mut events = self.lock().clone();
        events.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        events
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }
}
