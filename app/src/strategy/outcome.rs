//! The steps every strategy shares once it has read the stock: decide, pause (fault injection),
//! and record the order in the strategy's own transaction. Each strategy file keeps only the
//! lines that differ — how it reads and how it writes.

use sqlx::{MySql, Transaction};

use super::{Placed, Purchase, PurchaseError};
use crate::db::orders;

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
/// `Ok`. A duplicate request id rolls everything back ([`PurchaseError::Duplicate`]); a failed
/// `COMMIT` is [`PurchaseError::OutcomeUnknown`], because the server may have committed before
/// the connection broke.
pub(crate) async fn place(
    mut tx: Transaction<'_, MySql>,
    purchase: &Purchase,
    fencing_token: Option<u64>,
) -> Result<Placed, PurchaseError> {
    let order_id = orders::insert(&mut tx, &purchase.new_order(fencing_token)).await?;
    tx.commit()
        .await
        .map_err(|e| PurchaseError::OutcomeUnknown(Box::new(e)))?;
    Ok(Placed {
        order_id,
        fencing_token,
    })
}
