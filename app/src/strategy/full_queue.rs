//! A queue found full, remembered for a moment, so the crowd behind it is refused at the door.
//!
//! A bounded queue that only a round trip can see — `redis-lua-stream`'s stream, whose length
//! its script checks — refuses a purchase past its bound only after the purchase has been
//! admitted, run in a task of its own and sent to Redis. Under a crowd three times what the
//! consumers place, nine in ten purchases went that way to learn what the one before had just
//! learnt, and those round trips were most of what the service did: the refusals queued behind
//! each other, and the consumers that empty the queue waited for a core behind them. Once the
//! queue is found full, the next purchases of the strategy are refused at the door for a moment
//! (`--full-queue-memory-ms`, 1 ms by default) instead, as the door refuses past the admission
//! limit; after it, one purchase runs the script and either finds room (and the queue is open
//! again) or finds it full again. The moment is far shorter than the consumers take to place
//! what the queue holds (a thousand entries take them tens of milliseconds at their fastest), so
//! the queue is topped up long before it runs dry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::micros;

/// Until when a queue is believed full.
#[derive(Debug)]
pub struct FullQueue {
    memory_us: u64,
    epoch: Instant,
    /// Microseconds after `epoch` until which the queue is believed full (0: not believed so).
    until_us: AtomicU64,
}

impl FullQueue {
    /// A queue believed full for `memory` each time it is found full (zero: never believed so).
    pub fn new(memory: Duration) -> FullQueue {
        FullQueue {
            memory_us: micros(memory),
            epoch: Instant::now(),
            until_us: AtomicU64::new(0),
        }
    }

    /// The queue was just found full.
    pub fn found_full(&self) {
        if self.memory_us > 0 {
            // One microsecond more: `now_us` rounds down, and the belief must last its whole
            // memory from the moment it was found.
            let until = self.now_us().saturating_add(self.memory_us + 1);
            self.until_us.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// Whether the queue is believed full now. Reads only: the crowd's refusals write nothing
    /// the other cores read.
    pub fn is_full(&self) -> bool {
        self.now_us() < self.until_us.load(Ordering::Relaxed)
    }

    fn now_us(&self) -> u64 {
        micros(self.epoch.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_found_full_is_believed_full() {
        let queue = FullQueue::new(Duration::from_secs(3600));
        assert!(!queue.is_full(), "never found full");
        queue.found_full();
        assert!(queue.is_full());
    }

    #[test]
    fn a_queue_is_believed_full_for_its_memory_and_no_longer() {
        let memory = Duration::from_millis(1);
        let queue = FullQueue::new(memory);
        let found = Instant::now();
        queue.found_full();
        // Waits for the belief to pass, not for a deadline a loaded machine could miss.
        while queue.is_full() {
            std::thread::yield_now();
        }
        assert!(found.elapsed() >= memory, "believed full throughout");
    }

    #[test]
    fn a_queue_without_memory_is_never_believed_full() {
        let queue = FullQueue::new(Duration::ZERO);
        queue.found_full();
        assert!(!queue.is_full());
    }
}
