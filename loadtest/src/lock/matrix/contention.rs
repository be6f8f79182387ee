//! The cells read from the row's run of the lock benchmark ([`crate::lock::bench`] with the
//! history check): W workers over W clients contend for one lock, each probing a Redis counter
//! with a GET and a SET inside it; and what the run broke of what the lock claims.

use locks::Backend;

use super::{Availability, duration, grouped};
use crate::lock::LockReport;

/// Two holders at once, as the history checker saw them among the grants, and the probe
/// counter's lost increments, if any.
pub fn one_holder(r: &LockReport) -> String {
    let mut text = match r.history_by_rule {
        Some(found) => format!(
            "{} overlapping holders in {} grants",
            found.overlaps,
            grouped(r.acquisitions)
        ),
        None => "unchecked".to_string(),
    };
    if r.violations != 0 {
        text.push_str(&format!("; counter lost {}", r.violations));
    }
    text
}

/// Fencing tokens that went backwards, and stale writes a fenced resource accepted.
pub fn tokens_in_order(r: &LockReport) -> String {
    match r.history_by_rule {
        Some(found) => format!(
            "{} tokens out of order, {} stale writes accepted in {} grants",
            found.tokens_not_increasing,
            found.stale_writes_accepted,
            grouped(r.acquisitions)
        ),
        None => "unchecked".to_string(),
    }
}

pub fn performance(r: &LockReport) -> String {
    format!(
        "{} grants/s, p99 {} ({} workers)",
        grouped(r.acquisitions_per_sec.round() as u64),
        duration(r.acquire_p99_us as f64 / 1000.0),
        r.workers
    )
}

pub fn fairness(r: &LockReport) -> String {
    match (r.fairness_index, r.oldest_waiter_served) {
        (Some(jain), Some(oldest)) => format!(
            "Jain {jain:.3}, oldest waiter served {oldest:.2} ({} clients)",
            r.clients
        ),
        _ => "no grants".to_string(),
    }
}

/// What a grant cost: the clients' requests, and on Redis the server's commands.
pub fn herd(r: &LockReport) -> String {
    let Some(requests) = r.client_requests_per_grant else {
        return "no grants".to_string();
    };
    let mut text = format!("{requests:.1} requests per grant");
    if let Some(commands) = r.server_commands_per_grant {
        text.push_str(&format!(", {commands:.1} server commands"));
    }
    text.push_str(&format!(" ({} clients)", r.clients));
    text
}

/// What a row's runs broke of the two properties every lock of `locks` claims (its contract:
/// one holder while the lease holds, fencing tokens strictly increasing per lock), in words; a
/// broken variant claims neither. `None` when the lock kept both.
pub fn broken_claims(
    backend: Backend,
    r: &LockReport,
    availability: &Availability,
) -> Option<String> {
    if backend.is_broken() {
        return None;
    }
    let found = r.history_by_rule.unwrap_or_default();
    let mut broken = Vec::new();
    if found.overlaps > 0 || r.violations != 0 {
        broken.push(format!(
            "two holders at once {} time(s) in {} grants under contention (each with a lease \
             far longer than its critical section), so the lock is not exclusive even while \
             its leases hold",
            found.overlaps.max(r.violations.unsigned_abs() as usize),
            grouped(r.acquisitions)
        ));
    }
    if found.tokens_out_of_order() > 0 {
        broken.push(format!(
            "{} fencing token(s) out of grant order and {} stale write(s) accepted in {} grants, \
             so a resource fenced on its tokens can refuse a legitimate holder or take a stale \
             one's write",
            found.tokens_not_increasing,
            found.stale_writes_accepted,
            grouped(r.acquisitions)
        ));
    }
    if let Availability::Cluster { violations, .. } = availability
        && *violations > 0
    {
        broken.push(format!(
            "{violations} history violation(s) while its cluster's leader was killed"
        ));
    }
    if broken.is_empty() {
        return None;
    }
    let mut text = format!(
        "**`{backend}` broke a property it claims**: {}.",
        broken.join("; ")
    );
    if let Some(first) = r.history_slices.first() {
        text.push_str(&format!(" The first, as the checker recorded it: {first}"));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::history::Checked;

    fn run(found: Checked) -> LockReport {
        LockReport {
            backend: Backend::DbLock,
            workers: 16,
            seconds: 5.0,
            acquisitions: 349,
            acquisitions_per_sec: 70.0,
            acquire_p50_us: 1,
            acquire_p99_us: 1,
            acquire_max_us: 1,
            violations: 0,
            clients: 16,
            grants_per_worker: Vec::new(),
            fairness_index: None,
            longest_wait_us: 0,
            oldest_waiter_served: None,
            client_requests_per_grant: None,
            server_commands_per_grant: None,
            handoff_p50_us: None,
            handoff_p99_us: None,
            history_violations: Some(found.total()),
            history_by_rule: Some(found),
            history_slices: vec!["granted 2889 after 2890".into()],
            round_trip_added_us: None,
        }
    }

    #[test]
    fn a_lock_run_says_how_far_its_servers_were() {
        let mut report = run(Checked::default());
        assert!(report.to_string().starts_with(
            "backend db-lock: 16 workers over 16 clients, 5.0 s, servers reached directly\n"
        ));
        report.round_trip_added_us = Some(500);
        assert!(
            report
                .to_string()
                .contains("5.0 s, every server 0.5 ms away (relays)\n"),
            "{report}"
        );
    }

    const UP: Availability = Availability::SingleServer {
        failed_after_ms: 1.0,
        answer: "unavailable",
        granted_after_restart: true,
    };

    #[test]
    fn a_token_out_of_order_is_named_in_its_own_column_and_said_in_words() {
        let r = run(Checked {
            tokens_not_increasing: 1,
            ..Checked::default()
        });
        assert!(
            one_holder(&r).starts_with("0 overlapping holders"),
            "{}",
            one_holder(&r)
        );
        assert!(tokens_in_order(&r).starts_with("1 tokens out of order"));
        let text = broken_claims(Backend::DbLock, &r, &UP).expect("a claim broken");
        assert!(
            text.contains("**`db-lock` broke a property it claims**"),
            "{text}"
        );
        assert!(
            text.contains("1 fencing token(s) out of grant order"),
            "{text}"
        );
        assert!(text.contains("granted 2889 after 2890"), "{text}");
        assert!(!text.contains("two holders"), "{text}");
    }

    #[test]
    fn a_clean_run_or_a_broken_variant_claims_nothing_broken() {
        assert_eq!(
            broken_claims(Backend::DbLock, &run(Checked::default()), &UP),
            None
        );
        let overlaps = run(Checked {
            overlaps: 3,
            ..Checked::default()
        });
        assert_eq!(
            broken_claims(Backend::RedisGetThenSet, &overlaps, &UP),
            None
        );
        let text = broken_claims(Backend::Redis, &overlaps, &UP).unwrap();
        assert!(text.contains("two holders at once 3 time(s)"), "{text}");
    }
}
