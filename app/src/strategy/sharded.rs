//! `sharded`: the product's stock is split over N rows (`stock_buckets`, N = 8 unless the
//! reset says otherwise); a buyer takes a conditional decrement from one random bucket that
//! holds enough, so concurrent buyers lock different rows instead of queueing on one.
//!
//! **Safe.** Every decrement is `UPDATE … SET stock = stock - q WHERE … AND stock >= q` on one
//! bucket: like `conditional`, the check runs under the bucket's row lock against its latest
//! value, so no bucket goes below zero and the sum — the product's stock — cannot either. The
//! order is inserted in the same transaction.
//!
//! **No undersell from the split.** Buckets drain unevenly (random choice, an uneven reset), so
//! "my bucket is empty" says nothing about the product. A buyer first reads every bucket (one
//! plain read, no locks), picks at random among those holding `q` units, and when another
//! buyer emptied it first (the `UPDATE` matched nothing) rolls back — giving that row lock back
//! at once — and looks again. `sold_out` is answered only when one snapshot of all buckets
//! sums to less than `q`, i.e. when the whole product had fewer than `q` units at that moment.
//!
//! **A quantity no single bucket holds** (but the buckets together do), and a buyer that missed
//! its bucket [`TRIES`] times in a row, take the slow path: lock every non-empty bucket with
//! `SELECT … FOR UPDATE` *in bucket order* and take from them in that order in one
//! transaction. Every such buyer locks in the same order, and the fast path holds one bucket
//! at a time, so neither can deadlock the other; under those locks the stock cannot change,
//! so the slow path always decides.
//!
//! The cost: one extra read per purchase, and near the end of a sale, when few buckets are
//! left, the buyers meet on those rows again — the hot row is split, not gone.
//!
//! **No lock every buyer shares**, so no calls are counted under one
//! ([`super::under_lock`]): a bucket's row lock queues only the buyers of that bucket, and
//! holds on different buckets overlap.

use std::sync::Arc;

use crate::db::engine::{Conn, Db};

use super::outcome::{claim_quota, place};
use super::{Deps, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy};
use crate::db::{buckets, products};

/// Fast-path attempts (read, pick, conditional decrement) before taking the locked slow path.
const TRIES: usize = 4;

pub struct Sharded {
    pool: Db,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(Sharded {
        pool: deps.pool.clone(),
    })
}

impl StockStrategy for Sharded {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let id = purchase.product_id;
            let quantity = i64::from(purchase.quantity);
            let mut conn = self.pool.acquire().await?;
            for _ in 0..TRIES {
                let all = buckets::all(conn.conn(), id).await?;
                let bucket = match pick(&all, quantity) {
                    Pick::One(bucket) => bucket,
                    Pick::Several => break,
                    Pick::TooFew => {
                        return Err(sold_out_or_unknown(conn.conn(), id, all.is_empty()).await?);
                    }
                };
                let mut tx = conn.begin().await?;
                claim_quota(tx.conn(), purchase).await?;
                if buckets::take(tx.conn(), id, bucket, quantity).await? {
                    // The bucket's row lock is held from here to the commit.
                    purchase.hold().await;
                    return place(tx, purchase, None).await.map(Purchased::from);
                }
                tx.rollback().await?;
                purchase.stats.add_retry();
            }
            let mut tx = conn.begin().await?;
            claim_quota(tx.conn(), purchase).await?;
            let locked = buckets::lock_non_empty(tx.conn(), id).await?;
            let Some(takes) = spread(&locked, quantity) else {
                return Err(PurchaseError::SoldOut);
            };
            for (bucket, units) in takes {
                if !buckets::take(tx.conn(), id, bucket, units).await? {
                    return Err(PurchaseError::Internal(
                        format!("bucket {bucket} of product {id} changed under its row lock")
                            .into(),
                    ));
                }
            }
            purchase.hold().await;
            place(tx, purchase, None).await.map(Purchased::from)
        })
    }
}

/// Where a buyer can take its units, as one snapshot of the buckets says.
#[derive(Debug, PartialEq, Eq)]
enum Pick {
    /// This bucket (chosen at random among those that hold the quantity).
    One(u16),
    /// No bucket alone holds the quantity, several together do.
    Several,
    /// All buckets together hold less than the quantity.
    TooFew,
}

fn pick(all: &[(u16, i64)], quantity: i64) -> Pick {
    if all.iter().map(|&(_, stock)| stock).sum::<i64>() < quantity {
        return Pick::TooFew;
    }
    let fitting: Vec<u16> = all
        .iter()
        .filter(|&&(_, stock)| stock >= quantity)
        .map(|&(bucket, _)| bucket)
        .collect();
    match fitting.len() {
        0 => Pick::Several,
        n => Pick::One(fitting[rand::random_range(0..n)]),
    }
}

/// How many units to take from each of the `locked` buckets, in bucket order, to make
/// `quantity`; `None` when they hold fewer in all.
fn spread(locked: &[(u16, i64)], quantity: i64) -> Option<Vec<(u16, i64)>> {
    let mut wanted = quantity;
    let mut takes = Vec::new();
    for &(bucket, stock) in locked {
        if wanted == 0 {
            break;
        }
        let units = stock.min(wanted);
        if units > 0 {
            takes.push((bucket, units));
            wanted -= units;
        }
    }
    (wanted == 0).then_some(takes)
}

/// The answer when the buckets hold too little: sold out, unless the product has no buckets
/// because it does not exist (a product of another home has none either, and is sold out to
/// this strategy).
async fn sold_out_or_unknown(
    conn: Conn<'_>,
    id: u64,
    no_buckets: bool,
) -> Result<PurchaseError, PurchaseError> {
    Ok(match no_buckets && !products::exists(conn, id).await? {
        true => PurchaseError::UnknownProduct,
        false => PurchaseError::SoldOut,
    })
}

#[cfg(test)]
mod tests {
    use super::{Pick, pick, spread};

    #[test]
    fn a_buyer_picks_only_a_bucket_that_holds_the_quantity() {
        let all = [(0, 0), (1, 1), (2, 3), (3, 0)];
        for _ in 0..50 {
            assert_eq!(pick(&all, 2), Pick::One(2));
        }
        assert_eq!(pick(&[(0, 0), (1, 0)], 1), Pick::TooFew);
        assert_eq!(pick(&[], 1), Pick::TooFew);
    }

    #[test]
    fn a_quantity_no_single_bucket_holds_is_taken_from_several_in_bucket_order() {
        let all = [(0, 1), (1, 1), (2, 2)];
        assert_eq!(pick(&all, 3), Pick::Several);
        assert_eq!(spread(&all, 3), Some(vec![(0, 1), (1, 1), (2, 1)]));
        assert_eq!(spread(&all, 4), Some(vec![(0, 1), (1, 1), (2, 2)]));
        assert_eq!(spread(&all, 5), None);
    }
}
