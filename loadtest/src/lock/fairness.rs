//! Fairness of a lock benchmark's grants: how evenly they went to the workers (Jain's index over
//! per-worker counts), and how often the worker that had waited longest was the one served
//! (first come, first served).

use std::sync::Mutex;

use tokio::time::Instant;

/// Jain's fairness index of `counts`, `(Σx)² / (n·Σx²)`: 1 when every worker got the same, `1/n`
/// when one got everything. `None` without any grant (or any worker).
pub fn jain_index(counts: &[u64]) -> Option<f64> {
    let sum: f64 = counts.iter().map(|&x| x as f64).sum();
    let squares: f64 = counts.iter().map(|&x| (x as f64).powi(2)).sum();
    (squares > 0.0).then(|| sum * sum / (counts.len() as f64 * squares))
}

/// Who waits since when, shared by the workers of one run: each grant is checked against it.
#[derive(Debug)]
pub struct Queue {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Per worker: since when it has wanted the lock, while it does.
    waiting_since: Vec<Option<Instant>>,
    grants: u64,
    /// Grants that went to the worker waiting longest at that moment.
    oldest_served: u64,
}

impl Queue {
    pub fn new(workers: usize) -> Queue {
        Queue {
            state: Mutex::new(State {
                waiting_since: vec![None; workers],
                grants: 0,
                oldest_served: 0,
            }),
        }
    }

    /// Worker `w` starts wanting the lock (a retry after a timed-out acquire is no new start).
    pub fn wants(&self, w: usize, now: Instant) {
        self.lock().waiting_since[w].get_or_insert(now);
    }

    /// Worker `w` was granted the lock; returns how long it waited for it.
    pub fn granted(&self, w: usize, now: Instant) -> std::time::Duration {
        let mut state = self.lock();
        let since = state.waiting_since[w].take().unwrap_or(now);
        let oldest = state.waiting_since.iter().flatten().all(|&o| since <= o);
        state.grants += 1;
        state.oldest_served += u64::from(oldest);
        now - since
    }

    /// The share of grants that went to the worker that had waited longest; `None` without
    /// grants.
    pub fn oldest_served_share(&self) -> Option<f64> {
        let state = self.lock();
        (state.grants > 0).then(|| state.oldest_served as f64 / state.grants as f64)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn equal_counts_are_perfectly_fair() {
        assert_eq!(jain_index(&[7, 7, 7, 7]), Some(1.0));
    }

    #[test]
    fn one_worker_taking_everything_scores_one_over_n() {
        let index = jain_index(&[0, 0, 12, 0, 0]).unwrap();
        assert!((index - 0.2).abs() < 1e-12, "{index}");
    }

    #[test]
    fn half_the_workers_sharing_everything_score_one_half() {
        let index = jain_index(&[5, 5, 0, 0]).unwrap();
        assert!((index - 0.5).abs() < 1e-12, "{index}");
    }

    #[test]
    fn no_grants_have_no_index() {
        assert_eq!(jain_index(&[0, 0]), None);
        assert_eq!(jain_index(&[]), None);
    }

    #[test]
    fn serving_the_longest_waiter_counts_and_serving_a_newcomer_does_not() {
        let queue = Queue::new(3);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        queue.wants(0, t0);
        queue.wants(1, t0 + ms(1));
        queue.wants(2, t0 + ms(2));
        // A retry does not reset the wait.
        queue.wants(0, t0 + ms(3));
        assert_eq!(queue.granted(0, t0 + ms(10)), ms(10));
        assert_eq!(queue.granted(2, t0 + ms(11)), ms(9));
        assert_eq!(queue.granted(1, t0 + ms(12)), ms(11));
        let share = queue.oldest_served_share().unwrap();
        assert!((share - 2.0 / 3.0).abs() < 1e-12, "{share}");
    }
}
