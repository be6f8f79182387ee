//! A history-checked contention run, written once for any lock: clients take one lock in turn
//! and write to a fenced store inside it, and the history checker judges what they did.

use std::sync::Arc;
use std::time::{Duration, Instant};

use locks::history::{self, History};
use locks::recorded::FencedStore;
use locks::{AcquireOptions, DistributedLock, conformance};

/// Grants per client.
const GRANTS: usize = 20;

/// Each of `clients` takes the lock [`GRANTS`] times (waiting as `options` say), writing to a
/// fenced store twice inside; the history checker finds no overlap, no token out of order, no
/// stale write accepted.
pub async fn history_shows_no_violation(
    clients: Vec<Arc<dyn DistributedLock>>,
    options: AcquireOptions,
) {
    let count = clients.len();
    let key = conformance::unique_key("history");
    let history = Arc::new(History::new());
    let store = Arc::new(FencedStore::new(Arc::clone(&history)));
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for (c, lock) in clients.into_iter().enumerate() {
        let (key, store) = (key.clone(), Arc::clone(&store));
        running.spawn(async move {
            let name = format!("client-{c}");
            let history = store.history();
            for _ in 0..GRANTS {
                history.attempt(&name);
                let guard = lock.acquire(&key, options).await.expect("acquire");
                let token = guard.fencing_token();
                history.grant(&name, token);
                for _ in 0..2 {
                    store.write(&name, token);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                history.release(&name, token);
                assert!(guard.release().await.expect("release"));
            }
        });
    }
    running.join_all().await;
    eprintln!(
        "{} grants to {count} clients in {:?}",
        count * GRANTS,
        started.elapsed()
    );
    if let Err(violations) = history::check(&history) {
        panic!("{violations}");
    }
}
