//! One read of a product at a time, its failure shared with those who waited for it.
//!
//! A flood's first clicks all find the memory empty at once: one of them asks the backend and
//! the others wait for its turn to end, then find the product it read in memory. When the read
//! could not reach the database, there is nothing in memory to find, and each waiter would ask
//! in turn — each as long as the first (the pool's acquire timeout, behind a database that is
//! gone), so the k-th of a crowd would be answered after k of them. A waiter behind a read
//! that failed so is answered as that read was, at once.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::db::errors::{DbFailure, classify};

/// The turn of one product's reads, and how many of them could not reach the database.
#[derive(Default)]
pub(super) struct Gate {
    turn: tokio::sync::Mutex<()>,
    unreachable: AtomicU64,
}

impl Gate {
    /// Runs `read` in its turn, or, when a read that could not reach the database ended while
    /// this one waited, answers as it did without reading.
    pub async fn read<T>(
        &self,
        id: u64,
        read: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        let failed_before = self.unreachable.load(Ordering::SeqCst);
        let _turn = self.turn.lock().await;
        if self.unreachable.load(Ordering::SeqCst) != failed_before {
            return Err(sqlx::Error::Io(std::io::Error::other(format!(
                "the read of product {id} this request waited for could not reach the database"
            ))));
        }
        let read = read.await;
        if let Err(e) = &read
            && classify(e) == DbFailure::Unavailable
        {
            self.unreachable.fetch_add(1, Ordering::SeqCst);
        }
        read
    }
}
