//! `local-mutex`: `naive`, serialised per product by an async mutex in this process.
//!
//! **Unsafe with more than one instance.** Inside one process the mutex makes the read and
//! the write of `naive` one critical section, so there are no lost updates — with a single
//! instance this strategy is correct. But the mutex lives in *this process's memory*: a second
//! instance of the service (a second pod behind the load balancer) has its own mutex, and the
//! two read-modify-write the same row concurrently again, exactly as `naive` does. This is the
//! "synchronized works on my machine" bug, and the reason distributed locks exist.
//!
//! The calls counted under a lock ([`super::under_lock`]) are those under the product's row
//! lock, inside `naive`'s write: the mutex is no lock every buyer shares, since each instance
//! holds its own at the same time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::db::Db;

use super::{Deps, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy, naive};

pub struct LocalMutex {
    pool: Db,
    /// How long a purchase waits for its product's mutex before answering `busy`.
    wait: std::time::Duration,
    /// One async mutex per product id *with a purchase in flight*: client input chooses the
    /// ids, so an entry leaves with its last purchase and the map is bounded by concurrency.
    mutexes: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(LocalMutex {
        pool: deps.pool.clone(),
        wait: deps.lock_wait,
        mutexes: Mutex::new(HashMap::new()),
    })
}

impl LocalMutex {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<tokio::sync::Mutex<()>>>> {
        self.mutexes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn mutex_for(&self, product_id: u64) -> InFlight<'_> {
        let mutex = self.map().entry(product_id).or_default().clone();
        InFlight {
            owner: self,
            product_id,
            mutex: Some(mutex),
        }
    }
}

/// A purchase's use of its product's mutex; dropping it (done or cancelled) removes the entry
/// when no other purchase of the product holds it.
struct InFlight<'a> {
    owner: &'a LocalMutex,
    product_id: u64,
    mutex: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Clones are only made under the map's lock, so none can appear between the count and
        // the removal.
        let mut map = self.owner.map();
        self.mutex = None;
        if map
            .get(&self.product_id)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            map.remove(&self.product_id);
        }
    }
}

impl StockStrategy for LocalMutex {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let in_flight = self.mutex_for(purchase.product_id);
            let mutex = Arc::clone(in_flight.mutex.as_ref().expect("set until dropped"));
            let started = std::time::Instant::now();
            // Waiting is bounded like every other lock's: a queue without a deadline holds a
            // flood's buyers (and their connections) for as long as the queue is.
            let _held = tokio::time::timeout(self.wait, mutex.lock())
                .await
                .map_err(|_| {
                    PurchaseError::Busy(format!(
                        "the product's mutex not obtained in {:?}",
                        self.wait
                    ))
                })?;
            purchase.stats.set_lock_wait(started.elapsed());
            naive::read_compute_write(&self.pool, purchase)
                .await
                .map(Purchased::from)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::mysql::MySqlPoolOptions;

    use super::*;
    use crate::api::Strategy;
    use crate::strategy::PurchaseStats;

    #[tokio::test]
    async fn product_ids_sent_by_clients_leave_no_mutex_behind_once_their_purchases_end() {
        // Nothing listens on port 1: every purchase fails fast, as for an unknown product.
        let pool = MySqlPoolOptions::new()
            .acquire_timeout(Duration::from_millis(20))
            .connect_lazy("mysql://root@127.0.0.1:1/none")
            .expect("a lazy pool");
        let strategy = LocalMutex {
            pool: crate::db::Engines::MySql(pool),
            wait: Duration::from_secs(1),
            mutexes: Mutex::new(HashMap::new()),
        };
        for product_id in 0..50 {
            let purchase = Purchase {
                product_id,
                user_id: "u".into(),
                quantity: 1,
                request_id: format!("r-{product_id}"),
                strategy: Strategy::LocalMutex,
                per_user_limit: crate::api::MAX_STOCK,
                pay_within: std::time::Duration::from_millis(
                    crate::api::DEFAULT_PAYMENT_WINDOW_MS as u64,
                ),
                redis_epoch: 0,
                redis_parts: 0,
                hold: None,
                stats: PurchaseStats::default(),
            };
            assert!(strategy.purchase(&purchase).await.is_err());
        }
        let left = strategy
            .mutexes
            .lock()
            .map(|m| m.len())
            .unwrap_or(usize::MAX);
        assert_eq!(left, 0, "one mutex kept per product id ever sent");
    }
}
