//! What the page is told: the feed's updates folded into messages. Answers are counted into
//! the second of the run they arrived in (by code, with a latency histogram); when the next
//! second's first answer comes, or the phase changes, the second is closed and sent: its
//! answers by code, its percentiles, the phase's totals so far. Everything else is passed on
//! as it comes. Every message is kept (up to [`KEPT`]) for a page that connects late.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{Value, json};
use testkit::Answer;

use super::Update;

/// Messages kept for a page that connects late.
pub const KEPT: usize = 20_000;

/// One server-sent event: its name and its JSON data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub event: &'static str,
    pub data: Value,
}

/// The answers of one second.
struct Second {
    index: u64,
    /// When the second's counting began (its start, or the phase's if later).
    from: Instant,
    counts: BTreeMap<String, u64>,
    latencies: Histogram<u64>,
}

/// The run as the page is told it.
pub struct Board {
    started: Instant,
    phase_started: Instant,
    second: Option<Second>,
    /// The current phase's answers by code.
    phase_counts: BTreeMap<String, u64>,
    /// Every answer of the run.
    answers: u64,
    missed: u64,
    pub kept: Vec<Message>,
}

/// How an answer is named on the page: `created`, an error code, `no answer`, …
pub fn label(answer: &Answer) -> String {
    match answer {
        Answer::Created { .. } => "created".into(),
        Answer::Replayed { .. } => "replayed".into(),
        Answer::Refused { code, .. } => code.name().into(),
        Answer::Served { .. } => "served".into(),
        Answer::Unexpected { status } => format!("HTTP {status}"),
        Answer::Transport => "no answer".into(),
    }
}

impl Board {
    pub fn new(started: Instant) -> Board {
        Board {
            started,
            phase_started: started,
            second: None,
            phase_counts: BTreeMap::new(),
            answers: 0,
            missed: 0,
            kept: Vec::new(),
        }
    }

    /// Folds in one update received at `now`; returns the messages to send.
    pub fn apply(&mut self, update: Update, now: Instant) -> Vec<Message> {
        let mut out = Vec::new();
        match update {
            Update::Answer { answer, latency_us } => {
                let index = now.duration_since(self.started).as_secs();
                if self.second.as_ref().is_some_and(|s| s.index != index) {
                    out.extend(self.close(now));
                }
                let (started, phase_started) = (self.started, self.phase_started);
                let second = self.second.get_or_insert_with(|| Second {
                    index,
                    from: (started + Duration::from_secs(index)).max(phase_started),
                    counts: BTreeMap::new(),
                    latencies: Histogram::new_with_bounds(1, 60_000_000, 3)
                        .expect("valid histogram bounds"),
                });
                *second.counts.entry(label(&answer)).or_default() += 1;
                second.latencies.saturating_record(latency_us.clamp(1, 60_000_000));
                *self.phase_counts.entry(label(&answer)).or_default() += 1;
                self.answers += 1;
            }
            Update::Phase { subject, what } => {
                out.extend(self.close(now));
                self.phase_counts.clear();
                self.phase_started = now;
                out.push(message("phase", json!({ "subject": subject, "what": what })));
            }
            Update::Sale {
                strategy,
                stock,
                requests,
            } => out.push(message(
                "sale",
                json!({ "strategy": strategy, "stock": stock, "requests": requests }),
            )),
            Update::SaleDone {
                strategy,
                accounting,
                outcomes,
            } => {
                out.extend(self.close(now));
                out.push(message(
                    "sale-done",
                    json!({ "strategy": strategy, "accounting": accounting, "outcomes": outcomes }),
                ));
            }
            Update::Timeline { scenario, event } => out.push(message(
                "event",
                json!({ "scenario": scenario, "t_ms": event.t_ms, "actor": event.actor, "what": event.what }),
            )),
            Update::Paused(waiting) => out.push(message("paused", json!({ "waiting": waiting }))),
            Update::Closing => {}
            Update::Finished { report } => {
                out.extend(self.close(now));
                out.push(message("finished", json!({ "report": report })));
            }
        }
        self.keep(&out);
        out
    }

    /// The page's server fell `n` updates behind the feed and lost them.
    pub fn missed(&mut self, n: u64) -> Vec<Message> {
        self.missed += n;
        let out = vec![message("missed", json!({ "updates": self.missed }))];
        self.keep(&out);
        out
    }

    /// Closes the current second, if any answer fell in it.
    fn close(&mut self, now: Instant) -> Option<Message> {
        let s = self.second.take()?;
        let end = now.min(self.started + Duration::from_secs(s.index + 1));
        let span = end
            .saturating_duration_since(s.from)
            .as_secs_f64()
            .max(0.001);
        let q = |q: f64| s.latencies.value_at_quantile(q);
        Some(message(
            "second",
            json!({
                "t": s.index,
                "span": span,
                "counts": s.counts,
                "p50_us": q(0.50),
                "p90_us": q(0.90),
                "p99_us": q(0.99),
                "phase_counts": self.phase_counts,
                "answers": self.answers,
            }),
        ))
    }

    fn keep(&mut self, messages: &[Message]) {
        self.kept.extend_from_slice(messages);
        if self.kept.len() > KEPT {
            let extra = self.kept.len() - KEPT;
            self.kept.drain(..extra);
        }
    }
}

fn message(event: &'static str, data: Value) -> Message {
    Message { event, data }
}

#[cfg(test)]
mod tests {
    use app::api::ErrorCode;

    use super::*;

    fn answer(answer: Answer, ms: u64) -> Update {
        Update::Answer {
            answer,
            latency_us: ms * 1000,
        }
    }

    #[test]
    fn answers_are_counted_into_their_second_and_sent_when_it_closes() {
        let t0 = Instant::now();
        let mut board = Board::new(t0);
        let created = Answer::Created {
            fencing_token: None,
        };
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(board.apply(answer(created, 2), at(100)).is_empty());
        assert!(board.apply(answer(Answer::SOLD_OUT, 8), at(600)).is_empty());
        assert!(board.apply(answer(created, 4), at(900)).is_empty());
        let sent = board.apply(answer(created, 1), at(1200));
        assert_eq!(sent.len(), 1);
        let second = &sent[0];
        assert_eq!(second.event, "second");
        assert_eq!(second.data["t"], 0);
        assert_eq!(second.data["counts"]["created"], 2);
        assert_eq!(second.data["counts"][ErrorCode::SoldOut.name()], 1);
        assert_eq!(second.data["answers"], 3);
        // The median of 2, 4 and 8 ms, to the histogram's three significant digits.
        let p50 = second.data["p50_us"].as_u64().unwrap();
        assert!((4000..4010).contains(&p50), "{p50}");
        // A new phase closes the running second (a part of one: its span says how long).
        let sent = board.apply(
            Update::Phase {
                subject: "conditional".into(),
                what: "closed loop".into(),
            },
            at(1500),
        );
        let events: Vec<&str> = sent.iter().map(|m| m.event).collect();
        assert_eq!(events, ["second", "phase"]);
        assert_eq!(sent[0].data["t"], 1);
        assert!((sent[0].data["span"].as_f64().unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(board.kept.len(), 3);
    }
}
