//! What keeps an instance's memory of its products bounded by the products that exist and are
//! asked for, whatever ids its clients name.
//!
//! Any client names any product id, so the memory keeps no product for an id that has none:
//! such an id is remembered apart, in a set of at most [`MOST`](super::absent::MOST) ids that
//! forgets each after the memory's lifetime ([`absent`](super::absent)), and past that bound is
//! asked of the database each time, as any read of a product is — at the buyers' and
//! addresses' rates, where they are set (`--rate-per-user`, `--rate-per-address`, which every
//! buyer route counts against). A product nobody asked about for a whole lifetime
//! after its memory aged is dropped by a sweep every lifetime (at least every second, at most
//! every minute), so the memory holds the products of the last moments, not every product ever
//! read. Dropping one costs its next request a read, and a sold-out one its first click's trip
//! to its strategy, as after a restart.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::{Entry, ProductMemory, change_shard};

/// The sweep that drops products nobody asks about runs every lifetime, but at least this
/// often (a memory of a few milliseconds is not swept that often)...
const SWEEP_AT_MOST: Duration = Duration::from_secs(1);
/// ...and at most this seldom (a memory of an hour is).
const SWEEP_AT_LEAST: Duration = Duration::from_secs(60);

impl ProductMemory {
    /// Remembers that product `id` has none, unless it was forgotten since its entry was at
    /// `epoch` (a reset may have made it since); its entry, if any, goes.
    pub(super) fn remember_absent(&self, id: u64, epoch: Option<u64>) {
        self.change(id, |entries| {
            if entries.get(&id).map(|e| e.epoch) != epoch {
                return None;
            }
            self.absent().insert(id, self.lifetime);
            entries.contains_key(&id).then(|| {
                let mut changed = entries.clone();
                changed.remove(&id);
                changed
            })
        });
    }

    /// Drops the products nobody asked about for a whole lifetime after their memory aged (none
    /// being read meanwhile), and the absent ids past their lifetime.
    pub fn forget_idle(&self) {
        let idle = self.lifetime.saturating_mul(2);
        let is_idle = |e: &Entry| e.loaded.elapsed() >= idle && !e.learning && !e.renewing;
        for shard in self.shards.iter() {
            if !shard.entries.load().values().any(|e| is_idle(e)) {
                continue;
            }
            change_shard(shard, |entries| {
                let loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
                let kept = entries
                    .iter()
                    .filter(|(id, e)| !is_idle(e) || loading.contains_key(id))
                    .map(|(&id, e)| (id, Arc::clone(e)))
                    .collect();
                Some(kept)
            });
        }
        self.absent().forget_aged(self.lifetime);
    }

    /// Runs [`ProductMemory::forget_idle`] every lifetime (within [`SWEEP_AT_MOST`] and
    /// [`SWEEP_AT_LEAST`]), as long as the instance lives.
    pub async fn forget_idle_products(self: Arc<ProductMemory>) {
        let every = self.lifetime.clamp(SWEEP_AT_MOST, SWEEP_AT_LEAST);
        loop {
            tokio::time::sleep(every).await;
            self.forget_idle();
        }
    }

    /// Products and absent ids remembered now.
    pub fn remembered_now(&self) -> usize {
        let products: usize = self.shards.iter().map(|s| s.entries.load().len()).sum();
        products + self.absent().len()
    }

    /// What the memory holds and what it read, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP seckill_products_remembered Products, and ids found to have none, this instance remembers.\n");
        out.push_str("# TYPE seckill_products_remembered gauge\n");
        let _ = writeln!(out, "seckill_products_remembered {}", self.remembered_now());
        out.push_str("# HELP seckill_winners_read_total Purchases read to learn or renew sold-out products' winners.\n");
        out.push_str("# TYPE seckill_winners_read_total counter\n");
        let read = self.winners_read.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_winners_read_total {read}");
        out
    }
}
