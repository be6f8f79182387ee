//! A lock-history checker: record what every client saw, then check the record, the way Jepsen
//! checks a lock service.
//!
//! A test cannot observe "two holders at once" directly: each client only knows what its
//! backend told it, and the interesting failures (a leader lost while a lock is held, a
//! partition that expires a session on one side only, a failover to a replica that never saw
//! the lock) happen between the clients. So every client writes down, in one shared
//! [`History`], each step it takes, with the time it took it: an attempt, a grant with its
//! fencing token, a loss notice ([`crate::Guard::lost`] fired), a release. The fenced resource
//! writes down each write it accepted or refused, with the token it carried. [`check`] then
//! asserts the three properties a lock with fencing tokens promises:
//!
//! 1. **Mutual exclusion, as far as clients can know:** no client is granted the lock while
//!    another holding is open. A holding opens at its grant and closes at the holder's release
//!    or at its loss notice; a grant after the earlier holder *learned* it had lost the lock is
//!    fine, a grant before is not, because until then the old holder still acts as one.
//! 2. **Fencing tokens strictly increase in grant order.**
//! 3. **The fenced store accepts only the newest token:** every accepted write carries the
//!    largest token granted so far at that moment. A stale holder's write that is accepted is
//!    exactly the damage fencing exists to prevent.
//!
//! # Recording discipline
//!
//! The checker trusts the order of the record, so each step must be recorded on the right side
//! of the action it describes:
//!
//! * a **grant** after `acquire` returned (the client holds from then on);
//! * a **release** *before* the client sends the release (it has stopped acting as holder;
//!   recording afterwards would let the next grant appear to overlap);
//! * a **loss notice** when `lost()` fires, before anything else the client does about it;
//! * a **write** by the store itself, under the same mutual exclusion as its accept-or-refuse
//!   decision, so the record shows the store's own order.
//!
//! Each event is timestamped while the history's mutex is held, so the record's order and its
//! times agree. One `History` describes one lock name. Recording costs one mutex and one `Vec`
//! push; it does no I/O.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What one client did or saw, in a [`History`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The client started to acquire the lock.
    Attempt,
    /// The attempt failed (timed out, backend unavailable); the client does not hold the lock.
    Failed { reason: String },
    /// `acquire` returned a guard with this fencing token.
    Grant { token: u64 },
    /// The guard's `lost()` fired: the client knows it no longer holds the lock.
    Lost { token: u64 },
    /// The client stopped acting as holder and is about to release.
    Release { token: u64 },
    /// The fenced store accepted or refused a write carrying `token`.
    Write { token: u64, accepted: bool },
    /// The test injected a fault (killed a leader, cut a link): not checked, but shown, so a
    /// violation's slice tells what happened around it.
    Fault { what: String },
}

/// One recorded step: when (since the history began), who, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at: Duration,
    pub client: String,
    pub op: Op,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = format!("+{:.3}s", self.at.as_secs_f64());
        write!(f, "{at:>10} {:<12} {}", self.client, self.op)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Attempt => write!(f, "attempt"),
            Op::Failed { reason } => write!(f, "attempt failed: {reason}"),
            Op::Grant { token } => write!(f, "granted, token {token}"),
            Op::Lost { token } => write!(f, "loss notice, token {token}"),
            Op::Release { token } => write!(f, "release, token {token}"),
            Op::Fault { what } => write!(f, "FAULT: {what}"),
            Op::Write { token, accepted } => write!(
                f,
                "store {} write with token {token}",
                if *accepted { "ACCEPTED" } else { "refused" }
            ),
        }
    }
}

/// A thread-safe, append-only record of every client's steps on one lock.
#[derive(Debug)]
pub struct History {
    origin: Instant,
    events: Mutex<Vec<Event>>,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> History {
        History {
            origin: Instant::now(),
            events: Mutex::new(Vec::new()),
        }
    }

    /// Appends one step, timestamped now.
    pub fn record(&self, client: &str, op: Op) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.push(Event {
            at: self.origin.elapsed(),
            client: client.to_string(),
            op,
        });
    }

    pub fn attempt(&self, client: &str) {
        self.record(client, Op::Attempt);
    }

    pub fn failed(&self, client: &str, reason: impl fmt::Display) {
        let reason = reason.to_string();
        self.record(client, Op::Failed { reason });
    }

    pub fn grant(&self, client: &str, token: u64) {
        self.record(client, Op::Grant { token });
    }

    pub fn lost(&self, client: &str, token: u64) {
        self.record(client, Op::Lost { token });
    }

    pub fn release(&self, client: &str, token: u64) {
        self.record(client, Op::Release { token });
    }

    pub fn write(&self, client: &str, token: u64, accepted: bool) {
        self.record(client, Op::Write { token, accepted });
    }

    pub fn fault(&self, client: &str, what: impl fmt::Display) {
        let what = what.to_string();
        self.record(client, Op::Fault { what });
    }

    /// A copy of the record so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Which property a [`Violation`] breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// `later` was granted while `earlier`'s holding was open (no release, no loss notice).
    Overlap {
        earlier: (String, u64),
        later: (String, u64),
    },
    /// A grant's token is not larger than every token granted before it.
    TokenNotIncreasing { newest_before: u64, token: u64 },
    /// The store accepted a write whose token is not the newest granted so far.
    StaleWriteAccepted { token: u64, newest: Option<u64> },
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Overlap { earlier, later } => write!(
                f,
                "two holders: {} was granted token {} while {} still held token {} \
                 (no release and no loss notice in between)",
                later.0, later.1, earlier.0, earlier.1
            ),
            Rule::TokenNotIncreasing {
                newest_before,
                token,
            } => write!(
                f,
                "fencing token went backwards: granted {token} after {newest_before} had been granted"
            ),
            Rule::StaleWriteAccepted { token, newest } => match newest {
                Some(n) => write!(
                    f,
                    "stale write accepted: the store took token {token} when {n} was the newest grant"
                ),
                None => write!(
                    f,
                    "write accepted with token {token} before any grant at all"
                ),
            },
        }
    }
}

/// A broken property and the slice of history that shows it (indices into the record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    pub slice: Vec<(usize, Event)>,
}

/// How many events of a slice [`Violation`]'s `Display` shows at each end before eliding.
const SHOWN_AT_EACH_END: usize = 12;

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.rule)?;
        let n = self.slice.len();
        for (i, (index, event)) in self.slice.iter().enumerate() {
            if n > 2 * SHOWN_AT_EACH_END && i == SHOWN_AT_EACH_END {
                writeln!(f, "    … {} events …", n - 2 * SHOWN_AT_EACH_END)?;
            }
            if n > 2 * SHOWN_AT_EACH_END && (SHOWN_AT_EACH_END..n - SHOWN_AT_EACH_END).contains(&i)
            {
                continue;
            }
            writeln!(f, "  #{index:<5} {event}")?;
        }
        Ok(())
    }
}

/// Every violation found in one history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the lock history breaks {} rule(s):", self.0.len())?;
        for v in &self.0 {
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}

/// Checks the three properties of the module docs over everything recorded so far.
pub fn check(history: &History) -> Result<(), Violations> {
    let violations = check_events(&history.events());
    if violations.is_empty() {
        Ok(())
    } else {
        Err(Violations(violations))
    }
}

/// [`check`] over a plain list of events, in record order.
pub fn check_events(events: &[Event]) -> Vec<Violation> {
    let slice = |from: usize, to: usize| -> Vec<(usize, Event)> {
        (from..=to).map(|i| (i, events[i].clone())).collect()
    };
    let mut violations = Vec::new();
    // Open holdings: (client, token, index of the grant).
    let mut open: Vec<(&str, u64, usize)> = Vec::new();
    // The largest token granted so far and the index of its grant.
    let mut newest: Option<(u64, usize)> = None;
    for (i, event) in events.iter().enumerate() {
        let client = event.client.as_str();
        match event.op {
            Op::Grant { token } => {
                for &(holder, held, since) in &open {
                    violations.push(Violation {
                        rule: Rule::Overlap {
                            earlier: (holder.to_string(), held),
                            later: (client.to_string(), token),
                        },
                        slice: slice(since, i),
                    });
                }
                if let Some((before, at)) = newest
                    && token <= before
                {
                    violations.push(Violation {
                        rule: Rule::TokenNotIncreasing {
                            newest_before: before,
                            token,
                        },
                        slice: slice(at, i),
                    });
                }
                if newest.is_none_or(|(before, _)| token > before) {
                    newest = Some((token, i));
                }
                open.push((client, token, i));
            }
            Op::Lost { token } | Op::Release { token } => {
                open.retain(|&(holder, held, _)| !(holder == client && held == token));
            }
            Op::Write {
                token,
                accepted: true,
            } if newest.is_none_or(|(n, _)| token != n) => {
                let from = events[..i]
                    .iter()
                    .position(|e| e.op == Op::Grant { token })
                    .into_iter()
                    .chain(newest.map(|(_, at)| at))
                    .min()
                    .unwrap_or(i);
                violations.push(Violation {
                    rule: Rule::StaleWriteAccepted {
                        token,
                        newest: newest.map(|(n, _)| n),
                    },
                    slice: slice(from, i),
                });
            }
            Op::Attempt | Op::Failed { .. } | Op::Write { .. } | Op::Fault { .. } => {}
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(h: &History) -> Vec<Rule> {
        match check(h) {
            Ok(()) => Vec::new(),
            Err(v) => v.0.into_iter().map(|v| v.rule).collect(),
        }
    }

    #[test]
    fn a_clean_history_of_handovers_passes() {
        let h = History::new();
        h.attempt("a");
        h.attempt("b");
        h.grant("a", 1);
        h.write("a", 1, true);
        h.release("a", 1);
        h.grant("b", 2);
        h.write("b", 2, true);
        h.write("a", 1, false);
        h.release("b", 2);
        h.fault("nemesis", "killed the leader");
        h.attempt("c");
        h.failed("c", "timed out");
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_grant_while_another_client_holds_is_caught_as_an_overlap() {
        let h = History::new();
        h.grant("a", 1);
        h.attempt("c");
        h.grant("b", 2);
        h.release("a", 1);
        let err = check(&h).unwrap_err();
        assert_eq!(
            rules(&h),
            vec![Rule::Overlap {
                earlier: ("a".into(), 1),
                later: ("b".into(), 2)
            }]
        );
        let slice: Vec<usize> = err.0[0].slice.iter().map(|(i, _)| *i).collect();
        assert_eq!(slice, vec![0, 1, 2], "from a's grant to b's grant");
    }

    #[test]
    fn a_grant_after_the_holders_loss_notice_is_not_an_overlap() {
        let h = History::new();
        h.grant("a", 1);
        h.lost("a", 1);
        h.grant("b", 2);
        h.write("b", 2, true);
        h.write("a", 1, false);
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_loss_notice_after_the_later_grant_does_not_excuse_the_overlap() {
        let h = History::new();
        h.grant("a", 1);
        h.grant("b", 2);
        h.lost("a", 1);
        assert!(matches!(rules(&h)[..], [Rule::Overlap { .. }]));
    }

    #[test]
    fn a_second_grant_to_the_same_client_while_it_holds_is_an_overlap() {
        let h = History::new();
        h.grant("a", 1);
        h.grant("a", 2);
        assert!(matches!(rules(&h)[..], [Rule::Overlap { .. }]));
    }

    #[test]
    fn a_fencing_token_going_backwards_is_caught() {
        let h = History::new();
        h.grant("a", 5);
        h.release("a", 5);
        h.grant("b", 3);
        assert_eq!(
            rules(&h),
            vec![Rule::TokenNotIncreasing {
                newest_before: 5,
                token: 3
            }]
        );
    }

    #[test]
    fn a_repeated_fencing_token_is_caught() {
        let h = History::new();
        h.grant("a", 5);
        h.release("a", 5);
        h.grant("b", 5);
        assert_eq!(
            rules(&h),
            vec![Rule::TokenNotIncreasing {
                newest_before: 5,
                token: 5
            }]
        );
    }

    #[test]
    fn an_accepted_stale_write_is_caught() {
        let h = History::new();
        h.grant("a", 1);
        h.lost("a", 1);
        h.grant("b", 2);
        h.write("a", 1, true);
        let err = check(&h).unwrap_err();
        assert_eq!(
            rules(&h),
            vec![Rule::StaleWriteAccepted {
                token: 1,
                newest: Some(2)
            }]
        );
        let text = err.to_string();
        assert!(text.contains("stale write accepted"), "{text}");
        assert!(text.contains("ACCEPTED write with token 1"), "{text}");
    }

    #[test]
    fn an_accepted_write_before_any_grant_is_caught() {
        let h = History::new();
        h.write("a", 7, true);
        assert_eq!(
            rules(&h),
            vec![Rule::StaleWriteAccepted {
                token: 7,
                newest: None
            }]
        );
    }

    #[test]
    fn a_refused_stale_write_is_what_fencing_is_for() {
        let h = History::new();
        h.grant("a", 1);
        h.lost("a", 1);
        h.grant("b", 2);
        h.write("a", 1, false);
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_violation_shows_its_slice_of_history_readably() {
        let h = History::new();
        h.grant("client-1", 6);
        for _ in 0..40 {
            h.attempt("client-3");
        }
        h.grant("client-2", 7);
        let text = check(&h).unwrap_err().to_string();
        assert!(
            text.contains("client-2 was granted token 7 while client-1 still held token 6"),
            "{text}"
        );
        assert!(text.contains("client-1     granted, token 6"), "{text}");
        assert!(text.contains("client-2     granted, token 7"), "{text}");
        assert!(text.contains("… 18 events …"), "{text}");
        assert!(text.lines().count() < 30, "{text}");
    }

    #[test]
    fn events_are_recorded_in_time_order_from_many_threads() {
        let h = History::new();
        std::thread::scope(|s| {
            for t in 0..4 {
                let h = &h;
                s.spawn(move || {
                    for _ in 0..100 {
                        h.attempt(&format!("t{t}"));
                    }
                });
            }
        });
        let events = h.events();
        assert_eq!(events.len(), 400);
        assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
    }
}
