//! What every scenario is played on: the [`Stage`] (the app binary, the timeline) and the
//! [`Judgement`] of one row; and the play the two leader-loss scenarios share.

pub mod leader_loss;
mod timeline;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};

pub use timeline::Timeline;

pub use crate::analyse::history::Checked;

use crate::live::Feed;
use crate::report::schema::Event;

/// What one row's subject was expected to do, what it did, and whether that matched (for a
/// deliberately broken variant, "holds" means the failure it exists to show did happen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub expected: String,
    pub observed: String,
    pub holds: bool,
}

impl Judgement {
    pub fn new(expected: impl Into<String>, observed: impl Into<String>, holds: bool) -> Judgement {
        Judgement {
            expected: expected.into(),
            observed: observed.into(),
            holds,
        }
    }
}

/// Where a scenario plays: the app binary it may start, and the timeline its rounds write.
pub struct Stage {
    name: String,
    app_binary: Option<PathBuf>,
    rounds: Mutex<Vec<Timeline>>,
    live: Feed,
}

impl Stage {
    pub(super) fn new(name: String, app_binary: Option<PathBuf>, live: Feed) -> Stage {
        Stage {
            name,
            app_binary,
            rounds: Mutex::new(Vec::new()),
            live,
        }
    }

    /// The `seckill-app` binary, for the scenarios that start the app.
    pub fn app_binary(&self) -> Result<&Path> {
        self.app_binary
            .as_deref()
            .with_context(|| format!("{} runs seckill-app: its binary is needed", self.name))
    }

    /// A timeline for the whole scenario.
    pub fn timeline(&self) -> Timeline {
        self.add(Timeline::new(None, &self.name, &self.live))
    }

    /// A timeline for one round (a strategy, a backend, a mode): its time starts now, and its
    /// actors are shown as `<round>: <actor>`.
    pub fn round(&self, round: impl Into<String>) -> Timeline {
        self.add(Timeline::new(Some(round.into()), &self.name, &self.live))
    }

    fn add(&self, timeline: Timeline) -> Timeline {
        let mut rounds = self.rounds.lock().unwrap_or_else(|e| e.into_inner());
        rounds.push(timeline.clone());
        timeline
    }

    /// Every event, round after round, each round in time order.
    pub(super) fn events(&self) -> Vec<Event> {
        let rounds = self.rounds.lock().unwrap_or_else(|e| e.into_inner());
        rounds.iter().flat_map(Timeline::events).collect()
    }
}
