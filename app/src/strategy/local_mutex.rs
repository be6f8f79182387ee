//! `local-mutex`: `naive`, serialised per product by an async mutex in this process.
//!
//! **Unsafe with more than one instance.** Inside one process the mutex makes the read and
//! the write of `naive` one critical section, so there are no lost updates — with a single
//! instance this strategy is correct. But the mutex lives in *this process's memory*: a second
//! instance of the service (a second pod behind the load balancer) has its own mutex, and the
//! two read-modify-write the same row concurrently again, exactly as `naive` does. This is the
//! "synchronized works on my machine" bug, and the reason distributed locks exist.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use sqlx::MySqlPool;

use super::{Deps, Placed, Purchase, PurchaseError, StockStrategy, naive};

pub struct LocalMutex {
    pool: MySqlPool,
    /// One async mutex per product id (never shrinks: product ids are few).
    mutexes: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(LocalMutex {
        pool: deps.pool.clone(),
        mutexes: Mutex::new(HashMap::new()),
    })
}

impl LocalMutex {
    fn mutex_for(&self, product_id: u64) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self
            .mutexes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.entry(product_id).or_default().clone()
    }
}

impl StockStrategy for LocalMutex {
    fn purchase<'a>(
        &'a self,
        purchase: &'a Purchase,
    ) -> BoxFuture<'a, Result<Placed, PurchaseError>> {
        Box::pin(async move {
            let mutex = self.mutex_for(purchase.product_id);
            let started = std::time::Instant::now();
            let _held = mutex.lock().await;
            purchase.stats.set_lock_wait(started.elapsed());
            naive::read_compute_write(&self.pool, purchase).await
        })
    }
}
