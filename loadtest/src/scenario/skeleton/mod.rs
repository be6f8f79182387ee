//! What every scenario is played on: the [`Stage`] (the app binary, the timeline), the
//! [`Judgement`] of one row; the rows of the two crash-and-reconcile scenarios ([`Moment`]);
//! and the play the two leader-loss scenarios share.

pub mod leader_loss;
mod timeline;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};

pub use timeline::Timeline;

pub use crate::analyse::history::Checked;

use crate::live::Feed;
use crate::rig::fleet::AppBinary;
use crate::schema::Event;
use crate::schema::world::Distance;

/// A `redis-lua` crash and its repair, one row each: the figures right after the crash, and
/// after `reconcile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    AfterTheCrash,
    AfterReconcile,
}

impl Moment {
    /// The figures of one crash and its repair, under both rows (each row judges its part).
    pub fn both<F: Copy>(figures: F) -> Vec<(Moment, F)> {
        vec![
            (Moment::AfterTheCrash, figures),
            (Moment::AfterReconcile, figures),
        ]
    }
}

impl std::fmt::Display for Moment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Moment::AfterTheCrash => "redis-lua, after the crash",
            Moment::AfterReconcile => "redis-lua, after reconcile",
        })
    }
}

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

/// Where a scenario plays: the app binary it may start and how far its instances stand from
/// their servers, and the timeline its rounds write.
pub struct Stage {
    name: String,
    app_binary: Option<PathBuf>,
    /// The round trip to add between the app instances and their servers (`--rtt`).
    rtt: Option<Duration>,
    /// Whether an instance was started at that distance.
    apart: AtomicBool,
    rounds: Mutex<Vec<Timeline>>,
    live: Feed,
}

impl Stage {
    pub(super) fn new(
        name: String,
        app_binary: Option<PathBuf>,
        rtt: Option<Duration>,
        live: Feed,
    ) -> Stage {
        Stage {
            name,
            app_binary,
            rtt,
            apart: AtomicBool::new(false),
            rounds: Mutex::new(Vec::new()),
            live,
        }
    }

    /// The `seckill-app` binary, for the scenarios that start the app, with the round trip
    /// its instances' servers are to stand at (the fleet puts relays in front of them).
    pub fn app_binary(&self) -> Result<AppBinary<'_>> {
        let path = self.app_path()?;
        if self.rtt.is_some() {
            self.apart.store(true, Ordering::Relaxed);
        }
        Ok(AppBinary {
            path,
            rtt: self.rtt,
        })
    }

    /// The binary alone, for a scenario whose instances reach their servers over loopback
    /// whatever `--rtt` says: it sets its own distances, or its servers' members announce
    /// their own addresses, which a relay cannot stand in for.
    pub fn app_path(&self) -> Result<&Path> {
        self.app_binary
            .as_deref()
            .with_context(|| format!("{} runs seckill-app: its binary is needed", self.name))
    }

    /// What stood between the app instances and their servers: the round trip asked for if
    /// an instance was started at it, else loopback.
    pub(super) fn servers(&self) -> Distance {
        match self.apart.load(Ordering::Relaxed) {
            true => Distance::of(self.rtt),
            false => Distance::Local,
        }
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
