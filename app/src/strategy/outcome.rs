//! The steps every strategy shares once it has read the stock: decide, pause (fault injection),
//! and record the order in the strategy's own transaction. Each strategy file keeps only the
//! lines that differ — how it reads and how it writes.

use std::sync::atomic::AtomicBool;

use crate::db::engine::{Conn, Tx};

use super::held_lock::commit_in_doubt;
use super::{Placed, Purchase, PurchaseError, under_lock};
use crate::db::orders;
use crate::db::quota::{self, Claim};

/// Claims the purchase's units against the buyer's per-user limit, in the purchase's own
/// transaction and before its stock is touched (see [`crate::db::quota`]): beyond the limit,
/// [`PurchaseError::LimitReached`], and the transaction must roll back. A product whose limit
/// no buyer can reach claims nothing ([`Purchase::counts_buyers`]).
pub(crate) async fn claim_quota(tx: Conn<'_>, purchase: &Purchase) -> Result<(), PurchaseError> {
    if !purchase.counts_buyers() {
        return Ok(());
    }
    match quota::claim(
        tx,
        purchase.key(),
        purchase.quantity,
        purchase.per_user_limit,
    )
    .await?
    {
        Claim::Within => Ok(()),
        Claim::Beyond { .. } => Err(PurchaseError::LimitReached),
    }
}

/// Rolls `tx` back before a refusal goes out, and gives the refusal back. A transaction that
/// is only dropped rolls back when its connection is next used or handed back to the pool
/// (sqlx queues the `ROLLBACK`); until then the row locks it took stay taken, and the buyer's
/// next click, sent as soon as this answer arrives, would wait on them — or, under `NOWAIT`,
/// be refused `busy` by a refusal already answered.
pub(crate) async fn roll_back(tx: Tx<'_>, refusal: PurchaseError) -> PurchaseError {
    if let Err(e) = tx.rollback().await {
        tracing::debug!(error = %e, "the rollback of a refused purchase failed; its connection is closed");
    }
    refusal
}

/// The stock after this purchase, or why there is none to take: the product does not exist
/// (`stock` is `None`) or has fewer units than asked.
pub(crate) fn decide(stock: Option<i64>, purchase: &Purchase) -> Result<i64, PurchaseError> {
    let stock = stock.ok_or(PurchaseError::UnknownProduct)?;
    let quantity = i64::from(purchase.quantity);
    if stock < quantity {
        return Err(PurchaseError::SoldOut);
    }
    Ok(stock - quantity)
}

/// Inserts the order into `tx` and commits: the purchase happened exactly when this returns
/// `Ok`. A duplicate request id rolls everything back ([`PurchaseError::Duplicate`]); a `COMMIT`
/// whose answer was lost is [`PurchaseError::OutcomeUnknown`], because the server may have
/// committed before the connection broke; one the server answered with a rollback (a Galera
/// certification failure) is `busy`, its outcome known.
pub(crate) async fn place(
    tx: Tx<'_>,
    purchase: &Purchase,
    fencing_token: Option<u64>,
) -> Result<Placed, PurchaseError> {
    place_in_doubt(tx, purchase, fencing_token, &AtomicBool::new(false)).await
}

/// [`place`] for a purchase whose deduction took the product's row lock: the lock is held
/// until the commit, so the order's insert and the commit are counted as calls under it
/// ([`under_lock`]).
pub(crate) async fn place_under_row_lock(
    tx: Tx<'_>,
    purchase: &Purchase,
) -> Result<Placed, PurchaseError> {
    under_lock::counted(&purchase.stats, place(tx, purchase, None)).await
}

/// [`place`], committing with `in_doubt` set while its outcome is unknown
/// ([`commit_in_doubt`]).
pub(crate) async fn place_in_doubt(
    mut tx: Tx<'_>,
    purchase: &Purchase,
    fencing_token: Option<u64>,
    in_doubt: &AtomicBool,
) -> Result<Placed, PurchaseError> {
    let order_id = orders::insert(tx.conn(), &purchase.new_order(fencing_token)).await?;
    commit_in_doubt(tx, in_doubt).await.map_err(|e| {
        match crate::db::errors::rolled_back_at_commit(&e) {
            // The server answered with a rollback: refused, and known to be (`busy`).
            true => PurchaseError::from(e),
            false => PurchaseError::OutcomeUnknown(Box::new(e)),
        }
    })?;
    Ok(Placed {
        order_id,
        fencing_token,
    })
}
