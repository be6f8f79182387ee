//! How many connections an instance holds at once. Each is a file the process has open, and a
//! process may open only so many (`ulimit -n`, often 1,024): past it, it can accept nothing —
//! not a buyer, not a health check, not an operator come to see why — and fails on every file
//! it opens besides, its database and Redis connections included. So the connections are
//! bounded below that limit, and the last few of the bound are kept for the operators: once
//! buyers hold their share, a new connection is served the operators' routes only (health,
//! metrics, the admin routes), one request, then closed; past the whole bound a new connection
//! is closed as soon as it is accepted — left unaccepted in the kernel's queue instead, it
//! would keep the health check waiting behind it. A buyer's request on an operator's
//! connection is answered `503 overloaded` at once, so a crowd of buyers frees those
//! connections as fast as it takes them; a client that sends its headers slowly holds one up to
//! the header deadline.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Files the process keeps for what is not a client's connection: its database and Redis
/// pools, the lock services, logs.
const OTHER_FILES: u64 = 256;

/// The connections an instance may hold, by door.
#[derive(Debug)]
pub struct Connections {
    buyers: Arc<Semaphore>,
    operators: Arc<Semaphore>,
    max_buyers: usize,
    max_operators: usize,
    refused: AtomicU64,
}

/// A connection held, given back when dropped.
#[derive(Debug)]
pub struct Held {
    _permit: OwnedSemaphorePermit,
    operators_only: bool,
}

impl Held {
    /// Whether the connection came in past the buyers' share: only the operators' routes, one
    /// request.
    pub fn operators_only(&self) -> bool {
        self.operators_only
    }
}

impl Connections {
    /// At most `max` connections at once (at least 2), the last `operators` of them (at most all
    /// but one) for the operators.
    pub fn new(max: u32, operators: u32) -> Connections {
        let max = usize::try_from(max.max(2)).unwrap_or(usize::MAX);
        let max_operators = usize::try_from(operators)
            .unwrap_or(usize::MAX)
            .min(max - 1);
        let max_buyers = (max - max_operators).min(Semaphore::MAX_PERMITS);
        Connections {
            buyers: Arc::new(Semaphore::new(max_buyers)),
            operators: Arc::new(Semaphore::new(max_operators)),
            max_buyers,
            max_operators,
            refused: AtomicU64::new(0),
        }
    }

    /// A place for a new connection: a buyer's while there is one, else an operator's; `None`
    /// (counted) when every one is taken.
    pub fn open(&self) -> Option<Held> {
        let held = |permit, operators_only| Held {
            _permit: permit,
            operators_only,
        };
        if let Ok(permit) = Arc::clone(&self.buyers).try_acquire_owned() {
            return Some(held(permit, false));
        }
        if let Ok(permit) = Arc::clone(&self.operators).try_acquire_owned() {
            return Some(held(permit, true));
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// The connections held and refused, in the Prometheus text format.
    pub fn render(&self) -> String {
        let held = |door: &Semaphore, max: usize| max.saturating_sub(door.available_permits());
        let mut out = String::from(
            "# HELP seckill_connections Connections this instance holds, by door: buyers (every route) or operators (health, metrics, admin; past the buyers' share).\n\
             # TYPE seckill_connections gauge\n",
        );
        let _ = writeln!(
            out,
            "seckill_connections{{door=\"buyers\"}} {}",
            held(&self.buyers, self.max_buyers)
        );
        let _ = writeln!(
            out,
            "seckill_connections{{door=\"operators\"}} {}",
            held(&self.operators, self.max_operators)
        );
        let _ = write!(
            out,
            "# HELP seckill_connections_refused_total Connections closed as soon as accepted: every door was taken.\n\
             # TYPE seckill_connections_refused_total counter\n\
             seckill_connections_refused_total {}\n",
            self.refused.load(Ordering::Relaxed)
        );
        out
    }
}

/// `max`, or fewer if the process may not open that many files besides [`OTHER_FILES`] (its
/// soft `RLIMIT_NOFILE`; never below half of it).
pub fn within_open_files(max: u32) -> u32 {
    let Ok((soft, _)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    else {
        return max;
    };
    let allowed = soft.saturating_sub(OTHER_FILES).max(soft / 2);
    match u64::from(max) > allowed {
        true => {
            let lowered = u32::try_from(allowed).unwrap_or(u32::MAX);
            tracing::warn!(
                max_connections = max,
                open_files = soft,
                lowered,
                "the process may not open as many files as --max-connections asks for beside \
                 its pools; holding fewer (raise `ulimit -n` to hold more)"
            );
            lowered
        }
        false => max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_buyers_share_connections_are_the_operators_and_past_the_bound_none() {
        let connections = Connections::new(5, 2);
        let buyers: Vec<_> = (0..3)
            .map(|_| connections.open().expect("a buyer's"))
            .collect();
        assert!(buyers.iter().all(|held| !held.operators_only()));
        let operators: Vec<_> = (0..2)
            .map(|_| connections.open().expect("an operator's"))
            .collect();
        assert!(operators.iter().all(Held::operators_only));
        assert!(connections.open().is_none(), "a sixth");
        assert!(
            connections
                .render()
                .contains("seckill_connections_refused_total 1")
        );
        drop(buyers);
        assert!(!connections.open().expect("one given back").operators_only());
    }

    #[test]
    fn a_bound_keeps_a_buyers_connection_whatever_the_operators_ask() {
        let connections = Connections::new(4, 10);
        let buyer = connections.open().expect("a buyer's");
        assert!(!buyer.operators_only());
        let operators: Vec<_> = (0..3)
            .map(|_| connections.open().expect("an operator's"))
            .collect();
        assert!(operators.iter().all(Held::operators_only));
        assert!(connections.open().is_none(), "a fifth");
    }
}
