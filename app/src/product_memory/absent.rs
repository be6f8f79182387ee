//! Product ids found to have no product, remembered apart from the products: so that a client
//! asking for an id again and again is answered `404` from memory, while one naming a new id
//! each time leaves at most [`MOST`] of them behind, not one entry per id ever asked for.
//!
//! Only requests for an id the memory holds no product for come here, so its lock is no
//! product's refusals' concern; and each id is forgotten once past the memory's lifetime,
//! as a product is, so that a product made since is found within that time.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The most ids remembered at once; past it, an id is asked of the database each time until
/// older ones are forgotten.
pub const MOST: usize = 1_024;

/// The ids, each with when it was found absent.
#[derive(Debug, Default)]
pub struct Absent {
    since: HashMap<u64, Instant>,
    /// The same, oldest first (an id forgotten or found again meanwhile may still be here: it
    /// is skipped when its time differs from the map's).
    order: VecDeque<(u64, Instant)>,
}

impl Absent {
    /// Whether `id` was found absent less than `lifetime` ago.
    pub fn holds(&self, id: u64, lifetime: Duration) -> bool {
        self.since
            .get(&id)
            .is_some_and(|found| found.elapsed() < lifetime)
    }

    /// Remembers `id` as absent from now, if there is room once the ids past `lifetime` are
    /// forgotten.
    pub fn insert(&mut self, id: u64, lifetime: Duration) {
        self.forget_aged(lifetime);
        if self.since.len() >= MOST {
            return;
        }
        let now = Instant::now();
        self.since.insert(id, now);
        self.order.push_back((id, now));
    }

    /// Forgets `id`: a product was made with it.
    pub fn remove(&mut self, id: u64) {
        self.since.remove(&id);
    }

    /// Forgets the ids found absent `lifetime` ago or longer.
    pub fn forget_aged(&mut self, lifetime: Duration) {
        while let Some(&(id, found)) = self.order.front() {
            if found.elapsed() < lifetime && self.order.len() <= 2 * MOST {
                break;
            }
            self.order.pop_front();
            if self.since.get(&id) == Some(&found) {
                self.since.remove(&id);
            }
        }
    }

    /// Ids remembered now.
    pub fn len(&self) -> usize {
        self.since.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn new_ids_past_the_bound_are_not_remembered_and_the_old_ones_stay() {
        let mut absent = Absent::default();
        for id in 0..(MOST as u64) * 3 {
            absent.insert(id, HOUR);
        }
        assert_eq!(absent.len(), MOST);
        assert!(absent.holds(0, HOUR));
        assert!(!absent.holds(MOST as u64, HOUR));
    }

    #[test]
    fn ids_past_their_lifetime_are_forgotten_and_make_room() {
        let mut absent = Absent::default();
        for id in 0..MOST as u64 {
            absent.insert(id, HOUR);
        }
        assert!(!absent.holds(1, Duration::ZERO), "held past its lifetime");
        absent.insert(MOST as u64, Duration::ZERO);
        assert_eq!(absent.len(), 1, "the aged ids were not forgotten");
        absent.forget_aged(Duration::ZERO);
        assert_eq!(absent.len(), 0);
    }

    #[test]
    fn an_id_made_a_product_is_forgotten_and_may_be_found_absent_again() {
        let mut absent = Absent::default();
        absent.insert(7, HOUR);
        absent.remove(7);
        assert!(!absent.holds(7, HOUR));
        absent.insert(7, HOUR);
        assert!(absent.holds(7, HOUR));
        assert_eq!(absent.len(), 1);
    }
}
