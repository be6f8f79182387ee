//! One product as an instance remembers it, and how a read of it replaces what stood meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Epoch, Known, Recalled, Winners};
use crate::api::Home;
use crate::db::orders::PurchaseKey;

/// A product as the instance remembers it.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// `None`: forgotten (read again at the next request).
    pub(super) known: Option<Known>,
    pub(super) loaded: Instant,
    /// Changed each time the product is forgotten while its entry is being filled.
    pub(super) epoch: u64,
    pub(super) winners: Option<Arc<Winners>>,
    /// A request is loading the winners.
    pub(super) learning: bool,
    /// A read in the background is renewing the entry.
    pub(super) renewing: bool,
    /// Where the product's stock lived when it was last read, kept when the rest is forgotten:
    /// the store the next read asks first. A product dropped as idle ([`super::bounds`]) is read as
    /// one not read yet.
    pub(super) last_home: Option<Home>,
}

impl Entry {
    /// Whether the entry answers for the product: read, and no older than `lifetime`.
    pub(super) fn fresh(&self, lifetime: Duration) -> bool {
        self.known.is_some() && self.loaded.elapsed() < lifetime
    }

    pub(super) fn recalled(&self, purchase: Option<PurchaseKey<'_>>) -> Recalled {
        let refused = purchase
            .zip(self.winners.as_deref())
            .is_some_and(|(p, winners)| !winners.holds(p.user_id, p.request_id));
        Recalled {
            known: self.known,
            epoch: Epoch(self.epoch),
            refused,
        }
    }

    /// This entry, read while `current` stood (of the same epoch: nothing came back
    /// meanwhile), as it is to replace it; `looked` is whether the read asked about the
    /// winners. A read that did not (the product was not known sold out when it began) keeps
    /// the winners learnt while it was under way, and leaves a learning under way to finish:
    /// else a renewal begun just before a sell-out would drop what the sell-out taught, and
    /// the next refusal would read every winner again.
    pub(super) fn replacing(mut self, current: &Entry, looked: bool) -> Entry {
        if !looked {
            self.winners = self.winners.or_else(|| current.winners.clone());
        }
        self.learning = current.learning;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SaleRules;

    fn entry(winners: Option<Arc<Winners>>, learning: bool) -> Entry {
        Entry {
            known: Some(Known {
                home: Home::Redis,
                rules: SaleRules::default(),
                redis_epoch: 1,
                redis_parts: 0,
            }),
            loaded: Instant::now(),
            epoch: 7,
            winners,
            learning,
            renewing: false,
            last_home: Some(Home::Redis),
        }
    }

    fn winners(requests: &[&str]) -> Arc<Winners> {
        let purchases = requests.iter().map(|r| ("u".to_string(), r.to_string()));
        Arc::new(Winners::of(Home::Redis, 3, purchases.collect()))
    }

    #[test]
    fn a_renewal_begun_before_a_sell_out_keeps_the_winners_learnt_while_it_read() {
        let learnt = winners(&["w-1"]);
        let renewed = entry(None, false).replacing(&entry(Some(Arc::clone(&learnt)), false), false);
        let kept = renewed.winners.expect("the winners learnt meanwhile");
        assert!(Arc::ptr_eq(&kept, &learnt), "{kept:?}");
    }

    #[test]
    fn a_renewal_begun_before_a_sell_out_leaves_the_learning_under_way_to_finish() {
        let renewed = entry(None, false).replacing(&entry(None, true), false);
        assert!(
            renewed.learning,
            "a second learning would read every winner again"
        );
    }

    #[test]
    fn a_read_that_asked_about_the_winners_keeps_its_own_answer() {
        let stood = entry(Some(winners(&["w-1"])), false);
        // It found units back: the winners that stood are no longer the product's.
        assert!(entry(None, false).replacing(&stood, true).winners.is_none());
        let read = winners(&["w-1", "w-2"]);
        let renewed = entry(Some(Arc::clone(&read)), false).replacing(&stood, true);
        assert!(Arc::ptr_eq(&renewed.winners.expect("its winners"), &read));
    }
}
