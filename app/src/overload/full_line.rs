//! A line found full, remembered for a moment, so the crowd behind it is refused at the door.
//!
//! A bounded line that only a round trip can see — `redis-lua-stream`'s stream, whose length
//! its script checks — refuses a purchase past its bound only after the purchase has been
//! admitted, run in a task of its own and sent to Redis. Under a crowd three times what the
//! consumers place, nine in ten purchases went that way to learn what the one before had just
//! learnt, and those round trips were most of what the service did: the refusals queued behind
//! each other, and the consumers that empty the line waited for a core behind them. Once the
//! line is found full, the next purchases of the strategy are refused at the door for a moment
//! (`--full-line-memory-ms`, 1 ms by default) instead, as the door refuses past the admission
//! limit; after it, one purchase runs the script and either finds room (and the line is open
//! again) or finds it full again. The moment is far shorter than the consumers take to place
//! what the line holds (a thousand entries take them tens of milliseconds at their fastest), so
//! the line is topped up long before it runs dry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::micros;

/// Until when a line is believed full.
#[derive(Debug)]
pub struct FullLine {
    memory_us: u64,
    epoch: Instant,
    /// Microseconds after `epoch` until which the line is believed full (0: not believed so).
    until_us: AtomicU64,
}

impl FullLine {
    /// A line believed full for `memory` each time it is found full (zero: never believed so).
    pub fn new(memory: Duration) -> FullLine {
        FullLine {
            memory_us: micros(memory),
            epoch: Instant::now(),
            until_us: AtomicU64::new(0),
        }
    }

    /// The line was just found full.
    pub fn found_full(&self) {
        if self.memory_us > 0 {
            // One microsecond more: `now_us` rounds down, and the belief must last its whole
            // memory from the moment it was found.
            let until = self.now_us().saturating_add(self.memory_us + 1);
            self.until_us.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// Whether the line is believed full now. Reads only: the crowd's refusals write nothing
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
    fn a_line_found_full_is_believed_full() {
        let line = FullLine::new(Duration::from_secs(3600));
        assert!(!line.is_full(), "never found full");
        line.found_full();
        assert!(line.is_full());
    }

    #[test]
    fn a_line_is_believed_full_for_its_memory_and_no_longer() {
        let memory = Duration::from_millis(1);
        let line = FullLine::new(memory);
        let found = Instant::now();
        line.found_full();
        // Waits for the belief to pass, not for a deadline a loaded machine could miss.
        while line.is_full() {
            std::thread::yield_now();
        }
        assert!(found.elapsed() >= memory, "believed full throughout");
    }

    #[test]
    fn a_line_without_memory_is_never_believed_full() {
        let line = FullLine::new(Duration::ZERO);
        line.found_full();
        assert!(!line.is_full());
    }
}
