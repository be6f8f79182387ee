//! Lock-based strategies: take the distributed lock `product:{id}` (after the configured
//! prefix), then read-modify-write the
//! stock inside it. One generic strategy serves every lock backend (the database lock table,
//! Redis, Redlock, ZooKeeper, etcd); the backend is what differs.
//!
//! **Safe while the lock holds — and only then.** The stock is read with a plain non-locking
//! read and written back as an absolute value, exactly like `naive`: nothing in the database
//! protects it, so the lock alone must guarantee that one buyer at a time runs the critical
//! section. A lock is a lease: if the holder stalls past it (a GC-like pause, the injected
//! `X-Seckill-Hold-Ms`, a frozen process), the lock service hands the lock to the next buyer
//! while the first is still about to write, and the two read-modify-writes interleave into a
//! lost update. Renewal (a watchdog) shrinks that window but cannot close it: a frozen process
//! renews nothing and notices nothing.
//!
//! **Fencing closes it.** With `fenced`, every grant's fencing token (strictly increasing per
//! lock name) is handed to the database, which remembers the highest one per product in
//! `products.fence`:
//!
//! 1. *claim*: `UPDATE products SET fence = token WHERE id = ? AND fence < token` — refused
//!    (0 rows) if a newer holder has already claimed the product;
//! 2. read the stock (after the claim, so it sees every write a previous holder committed);
//! 3. *fenced write*: `UPDATE … SET stock = ? WHERE id = ? AND fence = token` — refused if a
//!    newer holder claimed the product in between.
//!
//! A refused claim or write rolls back and answers `409 {"error": "lock_lost"}`: the purchase
//! did not happen, the stale holder could not overwrite the newer one. Checking the token only
//! at the write (`AND fence < token`) would leave a hole: a newer holder that *read* before the
//! stale holder wrote would still be allowed to write its stale computation. Claiming first
//! makes "my token is the product's fence" hold from my read to my write.
//!
//! **Other strategies on the same product.** The strategy is chosen per request, so a buyer
//! through `conditional` or `pessimistic` may sell the product while a fenced holder is between
//! its read and its write. They take no lock and do not touch the fence, but every stock write
//! bumps `version`, and the fenced write also requires the version it read: a mismatch with the
//! claim still ours means "someone outside the lock sold", and the holder reads again (bounded)
//! instead of overwriting that sale. Tokens of different lock services are not comparable
//! (a ZooKeeper czxid dwarfs a Redis counter), so mixing fenced strategies of two services can
//! refuse buyers (`lock_lost`) but never oversells. The unfenced locked strategies have no such
//! check — "safe while leases hold" also means "while every writer of the product takes the
//! same lock". So the units of an order they sold go back (expiry, cancellation) under the
//! same lock ([`StockStrategy::lock_for_return`]): a return between a holder's read and its
//! absolute write would be written over, and the units would vanish.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::db::engine::{Db, Sql, Whole, each_engine, execute, signed, sql};
use futures::future::BoxFuture;
use locks::{AcquireOptions, DistributedLock, LockError};

use super::held_lock::HeldLock;
use super::outcome::{claim_quota, decide, place_in_doubt};
use super::{
    Deps, Fencing, Placed, Purchase, PurchaseError, Purchased, Purchasing, ReturnLock,
    StockStrategy, under_lock,
};
use crate::db::products;

pub struct Locked {
    pool: Db,
    lock: Option<Arc<dyn DistributedLock>>,
    fencing: Fencing,
    options: AcquireOptions,
    prefix: String,
}

impl Locked {
    /// A strategy over `lock` (`None`: every purchase answers `backend_unavailable`).
    pub fn new(deps: &Deps, lock: Option<Arc<dyn DistributedLock>>, fencing: Fencing) -> Locked {
        Locked {
            pool: deps.pool.clone(),
            lock,
            fencing,
            options: AcquireOptions::new(deps.lock_lease).wait(deps.lock_wait),
            prefix: deps.lock_prefix.clone(),
        }
    }

    /// The read-modify-write under the lock whose grant carries `token`.
    async fn critical_section(
        &self,
        purchase: &Purchase,
        token: u64,
        in_doubt: &AtomicBool,
    ) -> Result<Placed, PurchaseError> {
        let id = purchase.product_id;
        if self.fencing == Fencing::On {
            const CLAIM: Sql = sql!("UPDATE products SET fence = ? WHERE id = ? AND fence < ?");
            let claimed = execute!(
                self.pool.pool(),
                CLAIM,
                signed(token),
                signed(id),
                signed(token)
            )?;
            if claimed == 0 {
                let mut conn = self.pool.acquire().await?;
                return Err(match products::exists(conn.conn(), id).await? {
                    true => stale(token),
                    false => PurchaseError::UnknownProduct,
                });
            }
        }
        if self.fencing == Fencing::Off {
            let mut tx = self.pool.begin().await?;
            claim_quota(tx.conn(), purchase).await?;
            let left = decide(products::stock(tx.conn(), id).await?, purchase)?;
            purchase.hold().await;
            products::set_stock(tx.conn(), id, left).await?;
            return place_in_doubt(tx, purchase, Some(token), in_doubt).await;
        }
        for attempt in 0..FENCED_WRITE_ATTEMPTS {
            if attempt > 0 {
                purchase.stats.add_retry();
            }
            let mut tx = self.pool.begin().await?;
            claim_quota(tx.conn(), purchase).await?;
            let read = products::stock_and_version(tx.conn(), id).await?;
            let left = decide(read.map(|(stock, _)| stock), purchase)?;
            let version = read.map_or(0, |(_, version)| version);
            if attempt == 0 {
                purchase.hold().await;
            }
            const WRITE: Sql = sql!(
                "UPDATE products SET stock = ?, version = version + 1 \
                 WHERE id = ? AND fence = ? AND version = ?"
            );
            let written = execute!(
                tx.conn(),
                WRITE,
                left,
                signed(id),
                signed(token),
                signed(version)
            )?;
            if written == 1 {
                return place_in_doubt(tx, purchase, Some(token), in_doubt).await;
            }
            drop(tx);
            const FENCE: Sql = sql!("SELECT fence FROM products WHERE id = ?");
            let fence: Option<Whole> =
                each_engine!(self.pool.pool(), |c, e| sqlx::query_scalar(e.sql(FENCE))
                    .bind(signed(id))
                    .fetch_optional(c)
                    .await)?;
            if fence != Some(Whole(signed(token))) {
                return Err(stale(token));
            }
            // Our claim stands, so the version moved under a buyer of another strategy (one
            // that takes no lock, e.g. `conditional`): read again in a fresh snapshot.
        }
        Err(PurchaseError::Busy(format!(
            "the stock changed under each of {FENCED_WRITE_ATTEMPTS} fenced writes (other strategies sell this product too)"
        )))
    }
}

/// Fenced writes refused because a buyer of another strategy wrote in between, before giving up.
const FENCED_WRITE_ATTEMPTS: u32 = 16;

fn stale(token: u64) -> PurchaseError {
    PurchaseError::LockLost(format!(
        "fencing token {token} is older than the product's fence: a newer lock holder wrote it"
    ))
}

impl Locked {
    /// Takes the product's lock.
    async fn take(&self, product_id: u64) -> Result<locks::Guard, PurchaseError> {
        let Some(lock) = &self.lock else {
            return Err(PurchaseError::Unavailable(
                "this strategy's lock backend is not configured or was unreachable at start-up"
                    .into(),
            ));
        };
        let key = format!("{}product:{product_id}", self.prefix);
        lock.acquire(&key, self.options).await.map_err(|e| match e {
            LockError::Timeout { .. } => PurchaseError::Busy(e.to_string()),
            LockError::NoQuorum { .. }
            | LockError::Unreplicated { .. }
            | LockError::Unavailable(_) => PurchaseError::Unavailable(Box::new(e)),
        })
    }
}

impl StockStrategy for Locked {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let started = Instant::now();
            let guard = self.take(purchase.product_id).await?;
            purchase.stats.set_lock_wait(started.elapsed());
            let token = guard.fencing_token();
            let held = HeldLock::new(guard, self.options.lease);
            let section = self.critical_section(purchase, token, &held.in_doubt);
            let outcome = under_lock::counted(&purchase.stats, section).await;
            under_lock::call(&purchase.stats);
            held.finish().await;
            outcome.map(Purchased::from)
        })
    }

    /// Unfenced, the lock is all that keeps a return from falling between a holder's read and
    /// its absolute write; fenced, the write requires the version it read, which a return
    /// bumps, and the holder reads again.
    fn lock_for_return(
        &self,
        product_id: u64,
    ) -> BoxFuture<'_, Result<Option<ReturnLock>, PurchaseError>> {
        Box::pin(async move {
            if self.fencing == Fencing::On {
                return Ok(None);
            }
            let guard = self.take(product_id).await?;
            Ok(Some(ReturnLock::new(HeldLock::new(
                guard,
                self.options.lease,
            ))))
        })
    }
}
