//! `batched`: purchases of one product are queued for at most a few milliseconds (the batch
//! window, or until the batch is full) and committed together, in one transaction: one
//! conditional `UPDATE products SET stock = stock - total … WHERE stock >= total` and the
//! orders in one multi-row `INSERT`. The hot row is locked once per batch instead of once per
//! buyer — group commit, the way a database amortises its log flush.
//!
//! **Safe, across instances.** A batch takes the sum of its purchases with the conditional
//! `UPDATE`, which decides and writes under the row's exclusive lock in one statement. When
//! not everything fits, it reads the stock under that same lock (`SELECT … FOR UPDATE`),
//! decides in arrival order which purchases fit, and takes their sum: two batches (of one
//! instance or of several) serialise on the row exactly like two `conditional` buyers, so the
//! stock cannot go below zero whatever the timing.
//!
//! **One batch at a time per product and instance.** Each product with purchases waiting has
//! a line, drained by one task: while a batch commits, the next one gathers, and it closes as
//! soon as the commit is done if its window has passed by then. Under load a batch is
//! therefore everything that arrived during the previous commit (up to the maximum), and the
//! row sees one transaction per instance at a time instead of many small ones queueing for
//! its lock.
//!
//! **What a batch answers.**
//! * *Less stock than the batch asks*: the purchases are served in arrival order as long as
//!   they fit, and each that does not fit answers `sold_out` — a later, smaller one may still
//!   fit, so the tail is never undersold.
//! * *A buyer at the product's per-user limit* is refused (`limit_reached`) without stopping
//!   the others: the batch locks the rows of its buyers' counts (`purchase_quota`) first, in
//!   one statement and in a fixed order, and counts a buyer's earlier purchases in the same
//!   batch, so a buyer's clicks spread over batches and instances never add up to more.
//! * *A duplicate purchase* does not fail the others: purchases (buyer and request id, byte
//!   for byte, as the database's unique key compares them) that already have an order are
//!   looked up first and answered [`PurchaseError::Duplicate`] (the handler replays the
//!   original); a second copy inside the batch shares the first copy's fate; and a purchase
//!   inserted by a concurrent transaction meanwhile fails the `INSERT`, which rolls the batch
//!   back and runs it again, where the look-up now finds it. The look-up and the key compare
//!   alike: were the look-up to fold case where the key does not (or the other way round), a
//!   twin would fail every run of its batch, and every buyer in it.
//! * *A failed transaction* answers every purchase of the batch with 503 and records none:
//!   [`PurchaseError::OutcomeUnknown`] when the `COMMIT` itself failed (the server may have
//!   committed; the handler looks the request id up), else the database failure.
//!
//! **Cancellation.** The batch runs in its line's task, so a caller that goes away cannot
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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

mod allocate;

use super::{
    AtOnce, Deps, Placed, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy,
    limits_buyers,
};
use crate::db::engine::{Conn, Db};
use crate::db::errors::{DbFailure, classify};
use crate::db::orders::{self, NewOrder};
use crate::db::{products, quota};
use crate::metrics::Stage;
use allocate::{Decision, Holding, Wanted, allocate};

/// Runs of a batch that lost a race on a request id to a concurrent transaction, before its
/// purchases answer `busy`.
const DUPLICATE_RETRIES: usize = 3;

/// How long a product's line waits for a purchase before its task ends.
const LINE_IDLE: Duration = Duration::from_secs(1);

pub struct Batched {
    queue: Arc<Queue>,
    /// At least a whole batch (`--batch-max`) and [`AtOnce::DEFAULT`]'s least; its limit not
    /// adaptive: a purchase's time inside is its batch's round trip, as long for few as for
    /// many, so admitting fewer would only make the batches smaller. Its queue's bound
    /// (`--batch-queue`, refused at the door) is what holds its time inside.
    at_once: AtOnce,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    let max = usize::try_from(deps.batch_max).unwrap_or(1).max(1);
    Arc::new(Batched {
        at_once: AtOnce {
            least: deps.batch_max.max(AtOnce::DEFAULT.least),
            most: None,
            adaptive: false,
        },
        queue: Arc::new(Queue {
            pool: deps.pool.clone(),
            window: deps.batch_window,
            max,
            capacity: match deps.batch_queue {
                0 => max * 4,
                n => usize::try_from(n).unwrap_or(usize::MAX),
            },
            lines: Mutex::new(HashMap::new()),
        }),
    })
}

impl StockStrategy for Batched {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            let arrived = Instant::now();
            let entry = Entry {
                user_id: purchase.user_id.clone(),
                quantity: purchase.quantity,
                per_user_limit: purchase.per_user_limit,
                pay_within: purchase.pay_within,
                request_id: purchase.request_id.clone(),
                strategy: purchase.strategy.name(),
                hold: purchase.hold,
                arrived,
                reply,
            };
            Queue::enqueue(&self.queue, purchase.product_id, entry)?;
            let Ok(Answered {
                committing,
                parts,
                answer,
            }) = answer.await
            else {
                return Err(PurchaseError::Internal(
                    "the batch ended without answering".into(),
                ));
            };
            purchase
                .stats
                .time(Stage::Queued, committing.saturating_duration_since(arrived));
            purchase.stats.time(Stage::Batch, committing.elapsed());
            for (stage, took) in parts.timed() {
                purchase.stats.time(stage, took);
            }
            answer.map(Purchased::from)
        })
    }

    /// Never fewer than a whole batch at once. A batch takes one round trip whatever its
    /// size, so admitting fewer shortens no purchase's wait; it only makes the batches, and
    /// what the strategy sells, smaller.
    fn at_once(&self) -> AtOnce {
        self.at_once
    }
}

/// The purchase lines of one instance: one per product with purchases waiting, each drained
/// by a task of its own that commits one batch at a time.
struct Queue {
    pool: Db,
    window: Duration,
    max: usize,
    /// Purchases a line holds waiting; one more is refused at once.
    capacity: usize,
    lines: Mutex<HashMap<u64, mpsc::Sender<Entry>>>,
}

/// One queued purchase.
struct Entry {
    user_id: String,
    quantity: u32,
    per_user_limit: i64,
    /// The product's payment window.
    pay_within: Duration,
    request_id: String,
    strategy: &'static str,
    hold: Option<Duration>,
    arrived: Instant,
    /// What its batch answers it.
    reply: oneshot::Sender<Answered>,
}

/// A batch's answer to one of its purchases.
struct Answered {
    /// When the batch began to commit.
    committing: Instant,
    /// The parts of its transaction the batch timed.
    parts: Parts,
    answer: Result<Placed, PurchaseError>,
}

/// How long the statements of a batch's transaction took, where it sent them: the look-up of
/// its purchases that already have an order, the stock's conditional `UPDATE` (with the
/// `SELECT … FOR UPDATE` before the second one, when not all fitted), which waits for the
/// product's row while another batch holds it, the orders' `INSERT` and the `COMMIT`.
#[derive(Debug, Clone, Copy, Default)]
struct Parts {
    lookup: Option<Duration>,
    update: Option<Duration>,
    insert: Option<Duration>,
    commit: Option<Duration>,
}

impl Parts {
    /// Each part timed, with its stage.
    fn timed(self) -> impl Iterator<Item = (Stage, Duration)> {
        [
            (Stage::Lookup, self.lookup),
            (Stage::StockUpdate, self.update),
            (Stage::OrderInsert, self.insert),
            (Stage::Commit, self.commit),
        ]
        .into_iter()
        .filter_map(|(stage, took)| Some((stage, took?)))
    }
}

impl Entry {
    /// Its purchase within the product: buyer and request id, compared byte for byte as the
    /// database's `orders_purchase` compares them.
    fn purchase(&self) -> (&str, &str) {
        (&self.user_id, &self.request_id)
    }
}

impl Queue {
    /// Puts `entry` in its product's line, or opens the line (and starts its task); a full
    /// line refuses it at once (`overloaded`): waiting behind more than a few batches would only
    /// make the buyer's wait longer than a retry's.
    fn enqueue(queue: &Arc<Queue>, product_id: u64, entry: Entry) -> Result<(), PurchaseError> {
        let mut lines = queue.lines.lock().unwrap_or_else(PoisonError::into_inner);
        // A line's task closes it only under this lock, so a line found here takes the entry.
        let entry = match lines.get(&product_id) {
            Some(line) => match line.try_send(entry) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => return Err(PurchaseError::Overloaded),
                Err(mpsc::error::TrySendError::Closed(entry)) => entry,
            },
            None => entry,
        };
        let (line, waiting) = mpsc::channel(queue.capacity.max(1));
        let _ = line.try_send(entry);
        lines.insert(product_id, line);
        drop(lines);
        tokio::spawn(Arc::clone(queue).drain(product_id, waiting));
        Ok(())
    }

    /// Commits the product's line batch by batch until it stays empty for [`LINE_IDLE`]. While
    /// one batch commits, the next one gathers: under load every batch is as large as the
    /// purchases that arrived during the previous commit (up to the maximum).
    async fn drain(self: Arc<Self>, product_id: u64, mut waiting: mpsc::Receiver<Entry>) {
        loop {
            let first = match tokio::time::timeout(LINE_IDLE, waiting.recv()).await {
                Ok(Some(entry)) => entry,
                _ => {
                    let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
                    match waiting.try_recv() {
                        Ok(entry) => entry,
                        Err(_) => {
                            lines.remove(&product_id);
                            return;
                        }
                    }
                }
            };
            let batch = self.gather(first, &mut waiting).await;
            self.commit(product_id, batch).await;
        }
    }

    /// The batch `first` opens: what is waiting already, then what comes until the window
    /// since `first` arrived ends or the batch is full.
    async fn gather(&self, first: Entry, waiting: &mut mpsc::Receiver<Entry>) -> Vec<Entry> {
        let closes = first.arrived + self.window;
        let mut batch = vec![first];
        while batch.len() < self.max {
            match waiting.try_recv() {
                Ok(entry) => batch.push(entry),
                Err(_) => match tokio::time::timeout_at(closes.into(), waiting.recv()).await {
                    Ok(Some(entry)) => batch.push(entry),
                    _ => break,
                },
            }
        }
        batch
    }

    /// Runs the batch and answers each of its purchases.
    async fn commit(&self, product_id: u64, mut entries: Vec<Entry>) {
        let committing = Instant::now();
        entries.retain(|entry| !entry.reply.is_closed());
        if entries.is_empty() {
            return;
        }
        // The first copy of each purchase (buyer and request id) is bought; later copies share
        // its fate.
        let mut first = HashMap::new();
        let copy_of: Vec<usize> = (0..entries.len())
            .map(|i| *first.entry(entries[i].purchase()).or_insert(i))
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
        let (decisions, parts): (HashMap<usize, Decision>, _) = match outcome {
            Ok(Ran { decisions, parts }) => {
                (buyers.iter().copied().zip(decisions).collect(), parts)
            }
            Err(failure) => {
                for entry in entries {
                    let _ = entry.reply.send(Answered {
                        committing,
                        parts: Parts::default(),
                        answer: Err(failure.answer()),
                    });
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
                (Decision::LimitReached, _) => Err(PurchaseError::LimitReached),
                (Decision::UnknownProduct, _) => Err(PurchaseError::UnknownProduct),
            };
            let _ = entry.reply.send(Answered {
                committing,
                parts,
                answer,
            });
        }
    }

    /// One transaction for the batch: a decision per entry, in order, or why none was made.
    async fn run(&self, product_id: u64, batch: &[&Entry]) -> Result<Ran, Failure> {
        let mut tx = self.pool.begin().await?;
        let purchases: Vec<(&str, &str)> = batch.iter().map(|e| e.purchase()).collect();
        let lookup_sent = Instant::now();
        let existing: HashSet<(String, String)> =
            orders::existing(tx.conn(), product_id, &purchases)
                .await?
                .into_iter()
                .collect();
        let mut parts = Parts {
            lookup: Some(lookup_sent.elapsed()),
            ..Parts::default()
        };
        // The product's rules as the first purchase's instance knew them.
        let limit = batch.first().map_or(0, |e| e.per_user_limit);
        // The buyers' rows first (as every purchase claims its quota before the stock), so the
        // batch and a buyer's purchase through another strategy lock in the same order; none
        // where no buyer can reach the limit. A batch holds its buyers' rows until it commits,
        // so another instance's batch sharing one of them waits there for that whole commit
        // before it even reaches the stock, and with many buyers per batch nearly every pair
        // of batches shares one.
        let counted = limits_buyers(limit);
        let held = match counted {
            true => {
                let users: Vec<&str> = batch.iter().map(|e| e.user_id.as_str()).collect();
                quota::lock_buyers(tx.conn(), product_id, &users).await?
            }
            false => HashMap::new(),
        };
        let wanted: Vec<Wanted<'_>> = batch
            .iter()
            .map(|e| Wanted {
                user_id: &e.user_id,
                request_id: &e.request_id,
                quantity: e.quantity,
            })
            .collect();
        let mut holding = Holding {
            stock: Some(i64::MAX),
            existing: &existing,
            held: &held,
            limit,
        };
        // The common case first: everything fits, and one conditional UPDATE takes it all.
        let mut decisions = allocate(&wanted, &holding);
        let (update_sent, taken) = (Instant::now(), total_of(batch, &decisions));
        if !take(tx.conn(), product_id, taken).await? {
            // Not all of it fits (or no such product): decide under the row lock, in arrival
            // order (on MariaDB the failed UPDATE took it already; on PostgreSQL, where an
            // UPDATE that changes nothing locks nothing, the locking read takes it).
            holding.stock = products::lock_stock(tx.conn(), product_id).await?;
            decisions = allocate(&wanted, &holding);
            if !take(tx.conn(), product_id, total_of(batch, &decisions)).await? {
                return Err(Failure::Internal(
                    format!("product {product_id} changed under its row lock").into(),
                ));
            }
        }
        // Nothing to take sends no statement.
        if taken > 0 {
            parts.update = Some(update_sent.elapsed());
        }
        let mut claimed: HashMap<&str, i64> = HashMap::new();
        for (entry, decision) in batch.iter().zip(&decisions) {
            if let Decision::Placed(_) = decision {
                *claimed.entry(&entry.user_id).or_default() += i64::from(entry.quantity);
            }
        }
        if counted {
            quota::add(tx.conn(), product_id, &claimed).await?;
        }
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
                pay_within: e.pay_within,
            })
            .collect();
        if taking.is_empty() {
            return Ok(Ran { decisions, parts });
        }
        let insert_sent = Instant::now();
        let placed: HashMap<(String, String), u64> = orders::insert_all(tx.conn(), &taking)
            .await?
            .into_iter()
            .map(|(order_id, user_id, request_id)| ((user_id, request_id), order_id))
            .collect();
        parts.insert = Some(insert_sent.elapsed());
        for (entry, decision) in batch.iter().zip(decisions.iter_mut()) {
            if let Decision::Placed(order_id) = decision {
                let key = (entry.user_id.clone(), entry.request_id.clone());
                *order_id = placed.get(&key).copied().ok_or_else(|| {
                    Failure::Internal(format!("no order id for `{}`", entry.request_id).into())
                })?;
            }
        }
        // The row lock is held and nothing is committed: the critical section.
        if let Some(pause) = batch.iter().filter_map(|e| e.hold).max() {
            tokio::time::sleep(pause).await;
        }
        let commit_sent = Instant::now();
        tx.commit().await.map_err(|e| {
            match crate::db::errors::rolled_back_at_commit(&e) {
                // Answered with a rollback (a Galera certification failure): nothing happened.
                true => Failure::Db(Arc::new(e)),
                false => Failure::Commit(Arc::new(e)),
            }
        })?;
        parts.commit = Some(commit_sent.elapsed());
        Ok(Ran { decisions, parts })
    }
}

/// A batch's transaction, run: a decision per entry, in order, and the parts it timed.
struct Ran {
    decisions: Vec<Decision>,
    parts: Parts,
}

/// The units the purchases decided [`Decision::Placed`] take together.
fn total_of(batch: &[&Entry], decisions: &[Decision]) -> i64 {
    batch
        .iter()
        .zip(decisions)
        .filter(|(_, d)| matches!(d, Decision::Placed(_)))
        .map(|(e, _)| i64::from(e.quantity))
        .sum()
}

/// Takes `total` units of the product if that many are left: the conditional `UPDATE` (which
/// locks the row either way). Taking nothing always succeeds.
async fn take(conn: Conn<'_>, product_id: u64, total: i64) -> Result<bool, Failure> {
    if total == 0 {
        return Ok(true);
    }
    Ok(products::take_if_left(conn, product_id, total).await?)
}

/// Why a batch made no decision; answered to each of its purchases.
#[derive(Debug, Clone)]
enum Failure {
    /// A statement before the `COMMIT` failed, or the server answered the `COMMIT` with a
    /// rollback: nothing was written.
    Db(Arc<sqlx::Error>),
    /// The `COMMIT`'s answer was lost: the server may have committed.
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
                DbFailure::RolledBack => PurchaseError::RolledBack(e.to_string()),
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
