//! `batched`: purchases of one product are queued for at most a few milliseconds (the batch
//! window, or until the batch is full) and committed together, in one transaction: one
//! conditional `UPDATE products SET stock = stock - total … WHERE stock >= total` and the
//! orders in one multi-row `INSERT`. The hot row is locked once per batch instead of once per
//! buyer — group commit, the way a database amortises its log flush.
//!
//! **Safe, across instances.** A batch reads the stock under the row's exclusive lock
//! (`SELECT … FOR UPDATE`), decides in arrival order which purchases fit, and writes their sum
//! with the conditional `UPDATE` under that same lock: two batches (of one instance or of
//! several) serialise on the row exactly like two `conditional` buyers, so the stock cannot go
//! below zero whatever the timing.
//!
//! **What a batch answers.**
//! * *Less stock than the batch asks*: the purchases are served in arrival order as long as
//!   they fit, and each that does not fit answers `sold_out` — a later, smaller one may still
//!   fit, so the tail is never undersold.
//! * *A duplicate request id* does not fail the others: ids that already have an order are
//!   looked up first and answered [`PurchaseError::Duplicate`] (the handler replays the
//!   original); a second copy inside the batch shares the first copy's fate; and an id
//!   inserted by a concurrent transaction meanwhile fails the `INSERT`, which rolls the batch
//!   back and runs it again, where the look-up now finds it.
//! * *A failed transaction* answers every purchase of the batch with 503 and records none:
//!   [`PurchaseError::OutcomeUnknown`] when the `COMMIT` itself failed (the server may have
//!   committed; the handler looks the request id up), else the database failure.
//!
//! **Cancellation.** The batch runs in a task of its own, so a caller that goes away cannot
//! break it for the others. A caller that went away before its batch started buys nothing (it
//! is dropped from the batch); one that goes away later may still buy, like a client that
//! disconnects after `conditional`'s commit.
//!
//! **Fault injection.** The batch pauses once, for the longest hold any of its purchases asked
//! for, after its orders are written and before the `COMMIT`: the row lock is held and nothing
//! is committed yet.
//!
//! The cost is latency: every purchase waits up to the window for its batch to close.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::MySqlPool;
use tokio::sync::oneshot;

use super::{Deps, Placed, Purchase, PurchaseError, Purchased, StockStrategy};
use crate::db::errors::{DbFailure, classify};
use crate::db::orders::{self, NewOrder};

/// Runs of a batch that lost a race on a request id to a concurrent transaction, before its
/// purchases answer `busy`.
const DUPLICATE_RETRIES: usize = 3;

pub struct Batched {
    queue: Arc<Queue>,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(Batched {
        queue: Arc::new(Queue {
            pool: deps.pool.clone(),
            window: deps.batch_window,
            max: usize::try_from(deps.batch_max).unwrap_or(1).max(1),
            open: Mutex::new(HashMap::new()),
            next_batch: AtomicU64::new(0),
        }),
    })
}

impl StockStrategy for Batched {
    fn purchase<'a>(
        &'a self,
        purchase: &'a Purchase,
    ) -> BoxFuture<'a, Result<Purchased, PurchaseError>> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            let entry = Entry {
                user_id: purchase.user_id.clone(),
                quantity: purchase.quantity,
                request_id: purchase.request_id.clone(),
                strategy: purchase.strategy.name(),
                hold: purchase.hold,
                reply,
            };
            Queue::enqueue(&self.queue, purchase.product_id, entry);
            answer
                .await
                .unwrap_or_else(|_| {
                    Err(PurchaseError::Internal(
                        "the batch ended without answering".into(),
                    ))
                })
                .map(Purchased::from)
        })
    }
}

/// The open batches of one instance, one per product at most.
struct Queue {
    pool: MySqlPool,
    window: Duration,
    max: usize,
    open: Mutex<HashMap<u64, Open>>,
    next_batch: AtomicU64,
}

/// A batch still taking purchases.
struct Open {
    id: u64,
    entries: Vec<Entry>,
    /// Hands the entries to the batch's task when the batch fills up before its window ends.
    full: oneshot::Sender<Vec<Entry>>,
}

/// One queued purchase.
struct Entry {
    user_id: String,
    quantity: u32,
    request_id: String,
    strategy: &'static str,
    hold: Option<Duration>,
    reply: oneshot::Sender<Result<Placed, PurchaseError>>,
}

impl Queue {
    /// Adds `entry` to the product's open batch, or opens one (and starts its task).
    fn enqueue(queue: &Arc<Queue>, product_id: u64, entry: Entry) {
        let mut open = queue.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(batch) = open.get_mut(&product_id) {
            batch.entries.push(entry);
            if batch.entries.len() >= queue.max
                && let Some(batch) = open.remove(&product_id)
            {
                // The task may have closed the batch by its window meanwhile; then it is gone.
                let _ = batch.full.send(batch.entries);
            }
            return;
        }
        let id = queue.next_batch.fetch_add(1, Ordering::Relaxed);
        let (full, filled) = oneshot::channel();
        let batch = Open {
            id,
            entries: vec![entry],
            full,
        };
        if queue.max == 1 {
            let _ = batch.full.send(batch.entries);
        } else {
            open.insert(product_id, batch);
        }
        drop(open);
        let queue = Arc::clone(queue);
        tokio::spawn(async move {
            let entries = queue.collect(product_id, id, filled).await;
            queue.commit(product_id, entries).await;
        });
    }

    /// Waits until batch `id` is full or its window ends, and takes its entries.
    async fn collect(
        &self,
        product_id: u64,
        id: u64,
        mut filled: oneshot::Receiver<Vec<Entry>>,
    ) -> Vec<Entry> {
        tokio::select! {
            entries = &mut filled => return entries.unwrap_or_default(),
            () = tokio::time::sleep(self.window) => {}
        }
        {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            if open.get(&product_id).is_some_and(|batch| batch.id == id) {
                return open
                    .remove(&product_id)
                    .map(|batch| batch.entries)
                    .unwrap_or_default();
            }
        }
        // It filled up while the window ended: the entries are on their way.
        filled.await.unwrap_or_default()
    }

    /// Runs the batch and answers each of its purchases.
    async fn commit(&self, product_id: u64, mut entries: Vec<Entry>) {
        entries.retain(|entry| !entry.reply.is_closed());
        if entries.is_empty() {
            return;
        }
        // The first copy of each request id is bought; later copies share its fate.
        let mut first = HashMap::new();
        let copy_of: Vec<usize> = (0..entries.len())
            .map(|i| *first.entry(entries[i].request_id.as_str()).or_insert(i))
            .collect();
        let buyers: Vec<usize> = (0..entries.len()).filter(|&i| copy_of[i] == i).collect();
        let buying: Vec<&Entry> = buyers.iter().map(|&i| &entries[i]).collect();

        let mut outcome = self.run(product_id, &buying).await;
        for _ in 1..DUPLICATE_RETRIES {
            match &outcome {
                Err(Failure::Db(e)) if classify(e) == DbFailure::Duplicate => {
                    outcome = self.run(product_id, &buying).await;
                }
                _ => break,
            }
        }
        let decisions: HashMap<usize, Decision> = match outcome {
            Ok(decisions) => buyers.iter().copied().zip(decisions).collect(),
            Err(failure) => {
                for entry in entries {
                    let _ = entry.reply.send(Err(failure.answer()));
                }
                return;
            }
        };
        for (i, entry) in entries.into_iter().enumerate() {
            let decision = decisions[&copy_of[i]];
            let answer = match (decision, copy_of[i] == i) {
                (Decision::Placed(order_id), true) => Ok(Placed {
                    order_id,
                    fencing_token: None,
                }),
                (Decision::Placed(_) | Decision::Duplicate, _) => Err(PurchaseError::Duplicate),
                (Decision::SoldOut, _) => Err(PurchaseError::SoldOut),
                (Decision::UnknownProduct, _) => Err(PurchaseError::UnknownProduct),
            };
            let _ = entry.reply.send(answer);
        }
    }

    /// One transaction for the batch: a decision per entry, in order, or why none was made.
    async fn run(&self, product_id: u64, batch: &[&Entry]) -> Result<Vec<Decision>, Failure> {
        let mut tx = self.pool.begin().await?;
        let ids: Vec<&str> = batch.iter().map(|e| e.request_id.as_str()).collect();
        let existing: HashSet<String> =
            orders::existing(&mut tx, &ids).await?.into_iter().collect();
        let stock: Option<i64> =
            sqlx::query_scalar("SELECT stock FROM products WHERE id = ? FOR UPDATE")
                .bind(product_id)
                .fetch_optional(&mut *tx)
                .await?;
        let mut decisions = allocate(stock, batch, &existing);
        let taking: Vec<NewOrder<'_>> = batch
            .iter()
            .zip(&decisions)
            .filter(|(_, d)| **d == Decision::Placed(0))
            .map(|(e, _)| NewOrder {
                product_id,
                user_id: &e.user_id,
                quantity: e.quantity,
                strategy: e.strategy,
                request_id: &e.request_id,
                fencing_token: None,
            })
            .collect();
        if taking.is_empty() {
            return Ok(decisions);
        }
        let total: i64 = taking.iter().map(|o| i64::from(o.quantity)).sum();
        let done = sqlx::query(
            "UPDATE products SET stock = stock - ?, version = version + 1 \
             WHERE id = ? AND stock >= ?",
        )
        .bind(total)
        .bind(product_id)
        .bind(total)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(Failure::Internal(
                format!("product {product_id} changed under its row lock").into(),
            ));
        }
        let placed: HashMap<String, u64> = orders::insert_all(&mut tx, &taking)
            .await?
            .into_iter()
            .map(|(order_id, request_id)| (request_id, order_id))
            .collect();
        for (entry, decision) in batch.iter().zip(decisions.iter_mut()) {
            if let Decision::Placed(order_id) = decision {
                *order_id = placed.get(&entry.request_id).copied().ok_or_else(|| {
                    Failure::Internal(format!("no order id for `{}`", entry.request_id).into())
                })?;
            }
        }
        // The row lock is held and nothing is committed: the critical section.
        if let Some(pause) = batch.iter().filter_map(|e| e.hold).max() {
            tokio::time::sleep(pause).await;
        }
        tx.commit()
            .await
            .map_err(|e| Failure::Commit(Arc::new(e)))?;
        Ok(decisions)
    }
}

/// What happened to one purchase of a committed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Bought; the order id (0 until the order is written).
    Placed(u64),
    SoldOut,
    /// Its request id already had an order.
    Duplicate,
    UnknownProduct,
}

/// Decides each purchase of `batch` in arrival order against `stock` (`None`: no such
/// product): those whose request id is in `existing` are duplicates; the others are bought as
/// long as they fit, and one that does not fit is sold out without stopping a later, smaller
/// one.
fn allocate(stock: Option<i64>, batch: &[&Entry], existing: &HashSet<String>) -> Vec<Decision> {
    let mut left = stock.unwrap_or(0);
    batch
        .iter()
        .map(|e| {
            let quantity = i64::from(e.quantity);
            if existing.contains(&e.request_id) {
                Decision::Duplicate
            } else if stock.is_none() {
                Decision::UnknownProduct
            } else if quantity <= left {
                left -= quantity;
                Decision::Placed(0)
            } else {
                Decision::SoldOut
            }
        })
        .collect()
}

/// Why a batch made no decision; answered to each of its purchases.
#[derive(Debug, Clone)]
enum Failure {
    /// A statement before the `COMMIT` failed: nothing was written.
    Db(Arc<sqlx::Error>),
    /// The `COMMIT` failed: the server may have committed.
    Commit(Arc<sqlx::Error>),
    Internal(Arc<str>),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Failure {
        Failure::Db(Arc::new(e))
    }
}

impl Failure {
    fn answer(&self) -> PurchaseError {
        match self {
            Failure::Db(e) => match classify(e) {
                DbFailure::Unavailable => PurchaseError::Unavailable(Box::new(Arc::clone(e))),
                DbFailure::Busy => PurchaseError::Busy(format!("row lock not obtained: {e}")),
                DbFailure::Duplicate => PurchaseError::Busy(
                    "a request id of the batch is being bought concurrently; retry".into(),
                ),
                DbFailure::Other => PurchaseError::Internal(Box::new(Arc::clone(e))),
            },
            Failure::Commit(e) => PurchaseError::OutcomeUnknown(Box::new(Arc::clone(e))),
            Failure::Internal(why) => PurchaseError::Internal(why.to_string().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(request_id: &str, quantity: u32) -> Entry {
        Entry {
            user_id: "u".into(),
            quantity,
            request_id: request_id.into(),
            strategy: "batched",
            hold: None,
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn a_batch_larger_than_the_stock_serves_in_arrival_order_what_fits() {
        let entries = [entry("a", 2), entry("b", 3), entry("c", 1), entry("d", 2)];
        let batch: Vec<&Entry> = entries.iter().collect();
        let decisions = allocate(Some(4), &batch, &HashSet::new());
        use Decision::*;
        assert_eq!(decisions, [Placed(0), SoldOut, Placed(0), SoldOut]);
    }

    #[test]
    fn an_existing_request_id_is_a_duplicate_and_takes_no_stock() {
        let entries = [entry("a", 1), entry("b", 1)];
        let batch: Vec<&Entry> = entries.iter().collect();
        let existing = HashSet::from(["a".to_string()]);
        use Decision::*;
        assert_eq!(allocate(Some(1), &batch, &existing), [Duplicate, Placed(0)]);
        assert_eq!(
            allocate(None, &batch, &HashSet::new()),
            [UnknownProduct, UnknownProduct]
        );
    }
}
