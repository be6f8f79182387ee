//! How a batch decides, in arrival order, which of its purchases it sells: each fits the
//! stock left and its buyer's per-user limit (counting the buyer's earlier purchases in the
//! same batch), or is refused for the one it does not fit.

use std::collections::{HashMap, HashSet};

/// What happened to one purchase of a committed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Bought; the order id (0 until the order is written).
    Placed(u64),
    SoldOut,
    /// Its buyer would hold more than the product's per-user limit.
    LimitReached,
    /// Its purchase already had an order.
    Duplicate,
    UnknownProduct,
}

/// One purchase as the allocation sees it.
pub(super) struct Wanted<'a> {
    pub user_id: &'a str,
    pub request_id: &'a str,
    pub quantity: u32,
}

/// What the batch decides against.
pub(super) struct Holding<'a> {
    /// Units left (`None`: no such product).
    pub stock: Option<i64>,
    /// Purchases (buyer, request id) that have an order already.
    pub existing: &'a HashSet<(String, String)>,
    /// Units each buyer holds already.
    pub held: &'a HashMap<String, i64>,
    /// The product's per-user limit.
    pub limit: i64,
}

/// Decides each purchase of `batch` in arrival order: those with an order already are
/// duplicates; the others are bought as long as they fit the stock and their buyer's limit,
/// and one that does not fit is refused without stopping a later, smaller one.
pub(super) fn allocate(batch: &[Wanted<'_>], holding: &Holding<'_>) -> Vec<Decision> {
    let mut left = holding.stock.unwrap_or(0);
    let mut held: HashMap<&str, i64> = HashMap::new();
    batch
        .iter()
        .map(|w| {
            let quantity = i64::from(w.quantity);
            let buyer = held
                .entry(w.user_id)
                .or_insert_with(|| holding.held.get(w.user_id).copied().unwrap_or(0));
            let key = (w.user_id.to_string(), w.request_id.to_string());
            if holding.existing.contains(&key) {
                Decision::Duplicate
            } else if holding.stock.is_none() {
                Decision::UnknownProduct
            } else if quantity > left {
                Decision::SoldOut
            } else if *buyer + quantity > holding.limit {
                Decision::LimitReached
            } else {
                left -= quantity;
                *buyer += quantity;
                Decision::Placed(0)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(user_id: &'static str, request_id: &'static str, quantity: u32) -> Wanted<'static> {
        Wanted {
            user_id,
            request_id,
            quantity,
        }
    }

    fn holding<'a>(
        stock: Option<i64>,
        existing: &'a HashSet<(String, String)>,
        held: &'a HashMap<String, i64>,
        limit: i64,
    ) -> Holding<'a> {
        Holding {
            stock,
            existing,
            held,
            limit,
        }
    }

    #[test]
    fn a_batch_larger_than_the_stock_serves_in_arrival_order_what_fits() {
        let batch = [
            wanted("u1", "a", 2),
            wanted("u2", "b", 3),
            wanted("u3", "c", 1),
            wanted("u4", "d", 2),
        ];
        let (existing, held) = (HashSet::new(), HashMap::new());
        use Decision::*;
        assert_eq!(
            allocate(&batch, &holding(Some(4), &existing, &held, 10)),
            [Placed(0), SoldOut, Placed(0), SoldOut]
        );
    }

    #[test]
    fn an_existing_purchase_is_a_duplicate_and_takes_no_stock() {
        let batch = [wanted("u", "a", 1), wanted("u", "b", 1)];
        let existing = HashSet::from([("u".to_string(), "a".to_string())]);
        let held = HashMap::new();
        use Decision::*;
        assert_eq!(
            allocate(&batch, &holding(Some(1), &existing, &held, 10)),
            [Duplicate, Placed(0)]
        );
        assert_eq!(
            allocate(&batch, &holding(None, &HashSet::new(), &held, 10)),
            [UnknownProduct, UnknownProduct]
        );
    }

    #[test]
    fn a_buyer_gets_no_more_than_the_limit_over_the_batch_and_earlier_purchases() {
        let batch = [
            wanted("alice", "a", 1),
            wanted("alice", "b", 1),
            wanted("bob", "c", 2),
            wanted("carol", "d", 1),
        ];
        let existing = HashSet::new();
        let held = HashMap::from([("bob".to_string(), 1)]);
        use Decision::*;
        assert_eq!(
            allocate(&batch, &holding(Some(100), &existing, &held, 2)),
            [Placed(0), Placed(0), LimitReached, Placed(0)]
        );
    }
}
