//! The cells read from the row's run of the lock benchmark ([`crate::lock::bench`] with the
//! history check): W workers over W clients contend for one lock, each probing a Redis counter
//! with a GET and a SET inside it.

use super::{duration, grouped};
use crate::lock::LockReport;

/// The history checker's violations (two holders at once, a token going backwards, a stale
/// write accepted) among the grants; the probe counter's lost increments, if any.
pub fn exclusion(r: &LockReport) -> String {
    let found = r
        .history_violations
        .map_or_else(|| "unchecked".to_string(), |n| n.to_string());
    let mut text = format!(
        "{found} violations in {} grants (history checker)",
        grouped(r.acquisitions)
    );
    if r.violations != 0 {
        text.push_str(&format!("; counter lost {}", r.violations));
    }
    text
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
