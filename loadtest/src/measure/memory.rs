//! Resident memory of the run's processes, from `/proc/<pid>/status` (`VmRSS`): read once, or
//! watched every few milliseconds for its peak while a load runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

/// How often a [`Watch`] reads the memory.
const EVERY: Duration = Duration::from_millis(50);

/// The `VmRSS` line of a `/proc/<pid>/status` text, in bytes.
pub fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(kib * 1024)
}

/// The resident memory of `pids` together, in bytes, and how many of them could be read (a
/// process that exited cannot).
pub fn rss(pids: &[u32]) -> (u64, usize) {
    pids.iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            parse_rss(&status)
        })
        .fold((0, 0), |(sum, n), bytes| (sum + bytes, n + 1))
}

/// Reads the memory of a set of processes every [`EVERY`] until stopped, keeping the highest
/// sum.
pub struct Watch {
    peak: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Watch {
    pub fn start(pids: Vec<u32>) -> Watch {
        let peak = Arc::new(AtomicU64::new(rss(&pids).0));
        let task = tokio::spawn({
            let peak = peak.clone();
            async move {
                let mut tick = tokio::time::interval(EVERY);
                loop {
                    tick.tick().await;
                    peak.fetch_max(rss(&pids).0, Ordering::Relaxed);
                }
            }
        });
        Watch { peak, task }
    }

    /// The highest sum read so far.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Stops watching; the highest sum read, this last reading included.
    pub fn stop(self, last: u64) -> u64 {
        self.task.abort();
        self.peak().max(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_set_is_read_in_bytes_from_the_status_text() {
        let status =
            "Name:\tseckill-app\nVmPeak:\t  812344 kB\nVmRSS:\t   23512 kB\nRssAnon:\t 1 kB\n";
        assert_eq!(parse_rss(status), Some(23_512 * 1024));
        assert_eq!(
            parse_rss("Name:\tkthreadd\n"),
            None,
            "a kernel thread has none"
        );
        assert_eq!(
            parse_rss("VmRSS:\t12 MB\n"),
            None,
            "another unit is not guessed"
        );
    }

    #[tokio::test]
    async fn this_process_has_resident_memory_and_its_watch_keeps_the_highest() {
        let me = std::process::id();
        let (bytes, read) = rss(&[me, u32::MAX]);
        assert_eq!(read, 1, "a process that does not exist is left out");
        assert!(bytes > 0);
        let watch = Watch::start(vec![me]);
        assert!(watch.peak() > 0);
        assert_eq!(watch.stop(u64::MAX), u64::MAX);
    }
}
