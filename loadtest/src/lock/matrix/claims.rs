//! What the seed articles claim for the database locks they build, set beside what those
//! locks' rows measured: a claim that did not hold is said in words, with the figure that
//! refutes it.
//!
//! The row-lock article claims its lock (`db-row-lock`, and the blocking insert built the same
//! way, `db-blocking-insert`) meets every requirement of its list: mutual exclusion, expiry (the
//! database ends a dead client's transaction), a non-blocking try, no thundering herd (InnoDB
//! wakes only the next waiter), fairness (waiters served in arrival order) and reentrancy. The
//! unique-key lock made reentrant (`db-lock-reentrant`) claims reentrancy. The cost another
//! article names — a connection per holder and per waiter — is the `connection-cost` scenario's.

use std::fmt::Write as _;

use locks::Backend;

use super::reentry::Reentry;
use super::waiting::POLLING;
use super::{Matrix, Row, duration, grouped};
use crate::report::section::Section;

/// Share of the grants that must go to the longest waiter for "arrival order" to hold: a
/// first-come-first-served queue gives it every grant; a lock that ignores arrival, about one in
/// the number of waiters.
const IN_ORDER: f64 = 0.9;

/// One claim, and whether the row bore it out.
struct Claim {
    what: &'static str,
    measured: String,
    holds: bool,
}

/// The section of `matrix.md`, or nothing if the run had none of the articles' locks.
pub fn section(m: &Matrix) -> Section {
    let rows: Vec<&Row> = (m.rows.iter())
        .filter(|r| claims(r).next().is_some())
        .collect();
    let mut section = Section::default();
    if rows.is_empty() {
        return section;
    }
    section.heading(2, "The seed articles' claims for their database locks");
    for row in rows {
        let mut out = format!("`{}`:\n\n", row.backend);
        let mut refuted = Vec::new();
        for claim in claims(row) {
            let verdict = if claim.holds {
                "holds"
            } else {
                "**does not hold**"
            };
            let _ = writeln!(out, "- {}: {verdict} — {}", claim.what, claim.measured);
            if !claim.holds {
                refuted.push(claim.what);
            }
        }
        if !refuted.is_empty() {
            let _ = writeln!(
                out,
                "\nAs measured here, `{}` does not keep what the article claims for it: {}.",
                row.backend,
                refuted.join("; ")
            );
        }
        section.prose(out);
    }
    section
}

fn claims(row: &Row) -> Box<dyn Iterator<Item = Claim> + '_> {
    match row.backend {
        Backend::DbRowLock | Backend::DbBlockingInsert => Box::new(
            [
                exclusion(row),
                expiry(row),
                try_once(row),
                herd(row),
                arrival_order(row),
                reentry(row),
            ]
            .into_iter(),
        ),
        Backend::DbLockReentrant => Box::new([exclusion(row), reentry(row)].into_iter()),
        _ => Box::new(std::iter::empty()),
    }
}

fn exclusion(row: &Row) -> Claim {
    let c = &row.contention;
    let overlaps = c.history_by_rule.unwrap_or_default().overlaps;
    Claim {
        what: "mutual exclusion",
        measured: format!(
            "{overlaps} overlapping holdings in {} history-checked grants",
            grouped(c.acquisitions)
        ),
        holds: overlaps == 0 && c.violations == 0 && c.history_violations.is_some(),
    }
}

fn expiry(row: &Row) -> Claim {
    let e = &row.expiry;
    Claim {
        what: "the database frees a dead holder's lock",
        measured: match e.freed_after_ms {
            Some(ms) => format!("granted to another client {} after SIGKILL", duration(ms)),
            None => format!("still held {} after SIGKILL", duration(e.bound_ms as f64)),
        },
        holds: e.held_before_kill && e.freed_after_ms.is_some(),
    }
}

fn try_once(row: &Row) -> Claim {
    let t = &row.try_once;
    Claim {
        what: "a non-blocking try",
        measured: format!(
            "{} of {} tries against the held lock answered busy{}",
            t.busy,
            t.tries,
            t.median_ms
                .map(|ms| format!(", median {}", duration(ms)))
                .unwrap_or_default()
        ),
        holds: t.busy == t.tries,
    }
}

fn herd(row: &Row) -> Claim {
    let w = &row.waiting;
    let per_grant = row.contention.client_requests_per_grant;
    Claim {
        what: "no thundering herd (only the next waiter wakes)",
        measured: format!(
            "{} waiters sent {:.1} requests/s each while the lock was held{}",
            w.waiters,
            w.requests_per_waiter_per_sec,
            per_grant
                .map(|r| format!(", {r:.1} requests per grant under contention"))
                .unwrap_or_default()
        ),
        holds: w.requests_per_waiter_per_sec < POLLING,
    }
}

fn arrival_order(row: &Row) -> Claim {
    let c = &row.contention;
    Claim {
        what: "waiters served in arrival order",
        measured: match c.oldest_waiter_served {
            Some(share) => format!(
                "the longest waiter got {share:.2} of the grants among {} workers (Jain {})",
                c.workers,
                c.fairness_index
                    .map_or_else(|| "–".to_string(), |j| format!("{j:.3}"))
            ),
            None => "not measured".to_string(),
        },
        holds: c
            .oldest_waiter_served
            .is_some_and(|share| share >= IN_ORDER),
    }
}

fn reentry(row: &Row) -> Claim {
    Claim {
        what: "reentrancy",
        measured: row.reentry.cell(),
        holds: matches!(
            row.reentry,
            Reentry::Reentered {
                held_after_inner_release: true,
                free_after_outer_release: true,
            }
        ),
    }
}
