//! The live page: `seckill-bench run --live` and `scenario --live` serve one page on loopback
//! that shows the sale while it runs — the strategy under test, the stock against the orders,
//! the answers per second by code, the latency percentiles over time, a scenario's timeline
//! event by event — and, with `scenario --step`, holds the scenario after every timeline event
//! until the page's "Next" button (or Enter on the terminal) lets it go on: a class can follow a
//! failure one step at a time.
//!
//! Nothing is measured twice. The places that already measure send what they measured into one
//! [`Feed`] (a broadcast channel): the load loops and the flash sale's crowd each answer they
//! count, the run its phases and each sale's ledger as the report stores it, a scenario's
//! timeline each event as it is logged. The page's server ([`server`]) folds that stream into
//! seconds ([`board`]) and pushes every change to the page with server-sent events; the page
//! asks nothing after it loads. Without `--live` the feed is off and costs a branch per answer.

pub mod board;
pub mod page;
pub mod server;

use std::sync::{Arc, Condvar, Mutex};

use app::accounting::Accounting;
use app::api::Strategy;
use testkit::{Answer, Outcomes};
use tokio::sync::broadcast;

use crate::schema::Event;

/// Something that happened during a run, as the code that measured it saw it.
#[derive(Debug, Clone)]
pub enum Update {
    /// A new phase of the run: what is measured now, of what.
    Phase { subject: String, what: String },
    /// A flash sale starts: `requests` purchase requests for `stock` units.
    Sale {
        strategy: Strategy,
        stock: i64,
        requests: u64,
    },
    /// One answer a load counted, and its latency as the load measured it.
    Answer { answer: Answer, latency_us: u64 },
    /// A flash sale ended and its ledger was read: the figures the report stores.
    SaleDone {
        strategy: Strategy,
        accounting: Accounting,
        /// Boxed: the answers by code are large beside the other updates.
        outcomes: Box<Outcomes>,
    },
    /// A scenario's timeline recorded an event.
    Timeline { scenario: String, event: Event },
    /// The scenario waits for "Next" (`true`), or goes on (`false`).
    Paused(bool),
    /// The run is over; `report` is where its report was written, if it wrote one.
    Finished { report: Option<String> },
    /// The page's server is stopping ([`server::Live`] sends it when dropped): the pages get
    /// everything sent before it, then their streams end.
    Closing,
}

/// Where measuring code sends its updates: a broadcast channel, or nothing (off). Cloning a
/// feed gives another handle on the same channel.
#[derive(Clone, Default)]
pub struct Feed {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    sender: broadcast::Sender<Update>,
    step: Option<Arc<Step>>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (&self.inner, self.step()) {
            (None, _) => "Feed(off)",
            (Some(_), None) => "Feed(on)",
            (Some(_), Some(_)) => "Feed(on, step by step)",
        })
    }
}

/// Answers can come by the ten thousand per second; the page's server reads them as they come,
/// and a slower reader is told how many it missed.
const CAPACITY: usize = 1 << 16;

impl Feed {
    /// No page: every send is a no-op.
    pub fn off() -> Feed {
        Feed::default()
    }

    /// A feed with a channel, and a gate that holds every timeline event when `step` is set.
    pub fn new(step: bool) -> Feed {
        let (sender, _) = broadcast::channel(CAPACITY);
        Feed {
            inner: Some(Arc::new(Inner {
                sender,
                step: step.then(|| Arc::new(Step::default())),
            })),
        }
    }

    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// A receiver of every update sent from now on (`None` when off).
    pub fn subscribe(&self) -> Option<broadcast::Receiver<Update>> {
        Some(self.inner.as_ref()?.sender.subscribe())
    }

    pub fn send(&self, update: Update) {
        if let Some(inner) = &self.inner {
            // No receiver yet (the page's server subscribes first): nothing to tell.
            let _ = inner.sender.send(update);
        }
    }

    /// A counted answer and its latency.
    pub fn answer(&self, answer: &Answer, latency: std::time::Duration) {
        if self.inner.is_some() {
            let latency_us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
            self.send(Update::Answer {
                answer: *answer,
                latency_us,
            });
        }
    }

    pub fn phase(&self, subject: impl Into<String>, what: impl Into<String>) {
        if self.inner.is_some() {
            self.send(Update::Phase {
                subject: subject.into(),
                what: what.into(),
            });
        }
    }

    /// The step gate, in teaching mode.
    pub fn step(&self) -> Option<&Arc<Step>> {
        self.inner.as_ref()?.step.as_ref()
    }

    /// A scenario's timeline event: sent, then, in teaching mode, held until "Next".
    pub fn timeline(&self, scenario: &str, event: &Event) {
        if self.inner.is_none() {
            return;
        }
        self.send(Update::Timeline {
            scenario: scenario.to_string(),
            event: event.clone(),
        });
        if let Some(step) = self.step() {
            eprintln!(
                "{scenario}: {:.0} ms  {}: {}   — Next on the page, or Enter, to go on",
                event.t_ms, event.actor, event.what
            );
            self.send(Update::Paused(true));
            step.wait();
            self.send(Update::Paused(false));
        }
    }
}

/// The teaching mode's gate: each "Next" lets one waiting event go on.
#[derive(Default)]
pub struct Step {
    permits: Mutex<u64>,
    next: Condvar,
}

impl Step {
    /// Lets the next (or the waiting) event go on.
    pub fn next(&self) {
        *self.permits.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.next.notify_one();
    }

    /// Blocks until "Next". On a multi-threaded Tokio runtime the worker hands its other tasks
    /// to the other workers first, so the rest of the scenario (leases, watchdogs, crowds) runs
    /// on while this step waits.
    pub fn wait(&self) {
        let wait = || {
            let mut permits = self.permits.lock().unwrap_or_else(|e| e.into_inner());
            while *permits == 0 {
                permits = self.next.wait(permits).unwrap_or_else(|e| e.into_inner());
            }
            *permits -= 1;
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            _ => wait(),
        }
    }

    /// Reads standard input on a thread of its own: every line (Enter) is a "Next". Ends at
    /// the end of input.
    pub fn from_stdin(self: &Arc<Step>) {
        let step = self.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                step.next();
                line.clear();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_off_feed_sends_nothing_and_never_waits() {
        let feed = Feed::off();
        assert!(feed.subscribe().is_none());
        feed.timeline(
            "s",
            &Event {
                t_ms: 1.0,
                actor: "A".into(),
                what: "x".into(),
            },
        );
        feed.answer(&Answer::SOLD_OUT, Duration::from_millis(1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_teaching_mode_a_timeline_event_waits_for_next() {
        let feed = Feed::new(true);
        let mut updates = feed.subscribe().unwrap();
        let logging = {
            let feed = feed.clone();
            tokio::spawn(async move {
                let event = Event {
                    t_ms: 5.0,
                    actor: "A".into(),
                    what: "acquires".into(),
                };
                feed.timeline("lease-expiry", &event);
                "went on"
            })
        };
        assert!(matches!(updates.recv().await, Ok(Update::Timeline { .. })));
        assert!(matches!(updates.recv().await, Ok(Update::Paused(true))));
        assert!(!logging.is_finished(), "it went on before Next");
        feed.step().unwrap().next();
        assert!(matches!(updates.recv().await, Ok(Update::Paused(false))));
        assert_eq!(logging.await.unwrap(), "went on");
    }
}
