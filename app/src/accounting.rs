//! What a sale really did, defined once for the whole workspace: the benchmark, the fault
//! scenarios and the tests all judge a sale with [`Accounting::of`], read from the database
//! ([`crate::inventory::ledger`]) rather than from the HTTP answers, which can be wrong in
//! both directions (a 201 whose order was never written, an order whose answer was lost).
//!
//! With S the initial stock:
//!
//! * **sold** = the units the product's orders hold: Σ `orders.quantity` of its `reserved` and
//!   `paid` orders (an expired or cancelled order gave its units back; a voided purchase never
//!   held any). **oversell** = max(0, sold − S): paid and reserved units beyond the stock.
//!   At every settled read, S = final stock + reserved + paid (+ pending): the one invariant.
//! * **lost updates** (phantom inventory) = sold − (S − final stock) when positive: units that
//!   left the shelf in orders but never left the stock counter, the signature of a
//!   read-modify-write race (two buyers read 5, both write 4) — or units that came back to the
//!   stock more often than they left it (an order's units returned twice: a cancellation and an
//!   expiry that both gave them back).
//! * **returned** = units of expired and cancelled orders; those of them not yet back in the
//!   home (**returning**) are stranded below until they arrive.
//! * **negative stock** = −final stock when below zero: an unguarded `stock = stock − q`.
//! * **stranded** = units that left the stock counter without an order and are not on their
//!   way to one: (S − final stock) − sold − pending when positive, where pending counts the
//!   units of accepted orders still queued (a stream strategy). The "less-sell" of stock kept
//!   outside the order's transaction (a Redis counter, see [`crate::api::Home`]): a process
//!   killed between the deduction and the order insert, a consumer that acknowledged an entry
//!   it never placed, a process killed between an order's expiry and the give-back of its
//!   units to the counter (returned units that never reached the home). Read after the sale has settled: a purchase in flight between its
//!   deduction and its insert counts here until its order commits.
//! * **undersell** = units still in stock although demand exceeded supply (a strategy that
//!   gives up too early, e.g. optimistic retries running out), plus the stranded units: units
//!   buyers wanted and did not get.
//!
//! The final stock is read from the product's home: the `stock` column, or the Redis counter.

use serde::{Deserialize, Serialize};

/// The rows of one product after a sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub initial_stock: i64,
    pub final_stock: i64,
    /// Σ quantity over the product's orders.
    pub units_in_orders: i64,
    /// Number of order rows.
    pub orders: i64,
    /// Units of accepted orders still queued on their way to the database.
    #[serde(default)]
    pub pending: i64,
    /// Units of reserved orders (part of `units_in_orders`).
    #[serde(default)]
    pub reserved: i64,
    /// Units of paid orders (part of `units_in_orders`).
    #[serde(default)]
    pub paid: i64,
    /// Units of expired and cancelled orders: given back, or on their way.
    #[serde(default)]
    pub returned: i64,
    /// Units of expired and cancelled orders not yet back in the home.
    #[serde(default)]
    pub returning: i64,
}

impl Ledger {
    /// The ledger of a product as `GET /api/products/{id}/accounting` shows it (stock read from its home).
    pub fn of(view: crate::api::ProductView) -> Ledger {
        Ledger {
            initial_stock: view.initial_stock,
            final_stock: view.stock,
            units_in_orders: view.sold,
            orders: view.orders,
            pending: view.pending,
            reserved: view.reserved,
            paid: view.paid,
            returned: view.expired + view.cancelled,
            returning: view.returning,
        }
    }
}

/// The correctness figures of one sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accounting {
    pub initial_stock: i64,
    pub final_stock: i64,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
    pub lost_updates: i64,
    pub negative_stock: i64,
    /// Units taken from the stock without an order, not queued either.
    #[serde(default)]
    pub stranded: i64,
    pub undersell: i64,
    /// Units of expired and cancelled orders (given back, or on their way).
    #[serde(default)]
    pub returned: i64,
    /// Demand (units requested) exceeded the initial stock.
    pub demand_exceeded_supply: bool,
}

impl Accounting {
    /// Applies the definitions of the module docs to `ledger`, given the units the buyers
    /// asked for in all.
    pub fn of(ledger: Ledger, demand_units: i64) -> Accounting {
        let (initial, sold, left) = (
            ledger.initial_stock,
            ledger.units_in_orders,
            ledger.final_stock,
        );
        let exceeded = demand_units > initial;
        let stranded = ((initial - left) - sold - ledger.pending).max(0);
        Accounting {
            initial_stock: initial,
            final_stock: left,
            units_sold: sold,
            orders: ledger.orders,
            oversell: (sold - initial).max(0),
            lost_updates: (sold - (initial - left)).max(0),
            negative_stock: (-left).max(0),
            stranded,
            undersell: if exceeded { left.max(0) } else { 0 } + stranded,
            returned: ledger.returned,
            demand_exceeded_supply: exceeded,
        }
    }

    /// Whether the sale broke an invariant (oversell, lost updates or negative stock).
    pub fn is_incorrect(&self) -> bool {
        self.oversell > 0 || self.lost_updates > 0 || self.negative_stock > 0
    }

    /// Units in orders that the stock counter does not account for, in either direction:
    /// 0 for every sale that kept stock and orders consistent.
    pub fn unaccounted(&self) -> i64 {
        self.units_sold - (self.initial_stock - self.final_stock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(final_stock: i64, units: i64) -> Ledger {
        Ledger {
            initial_stock: 100,
            final_stock,
            units_in_orders: units,
            orders: units,
            pending: 0,
            reserved: 0,
            paid: units,
            returned: 0,
            returning: 0,
        }
    }

    #[test]
    fn a_correct_sale_has_no_anomaly() {
        let a = Accounting::of(ledger(0, 100), 500);
        assert!(!a.is_incorrect());
        assert_eq!(
            (a.oversell, a.lost_updates, a.negative_stock, a.undersell),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn lost_updates_show_as_phantom_inventory_and_oversell() {
        // 130 units ordered, the counter only went down by 100.
        let a = Accounting::of(ledger(0, 130), 500);
        assert_eq!((a.oversell, a.lost_updates, a.negative_stock), (30, 30, 0));
        assert_eq!(a.unaccounted(), 30);
    }

    #[test]
    fn an_unguarded_decrement_shows_negative_stock_without_lost_updates() {
        let a = Accounting::of(ledger(-12, 112), 500);
        assert_eq!((a.oversell, a.negative_stock, a.lost_updates), (12, 12, 0));
    }

    #[test]
    fn units_taken_from_the_counter_without_an_order_are_undersell() {
        // The counter went down by 100, only 97 units are in orders.
        let a = Accounting::of(ledger(0, 97), 500);
        assert_eq!((a.undersell, a.oversell, a.lost_updates), (3, 0, 0));
        assert_eq!(a.stranded, 3);
        assert!(!a.is_incorrect());
        assert_eq!(a.unaccounted(), -3);
    }

    #[test]
    fn units_of_queued_orders_are_not_stranded() {
        let queued = Ledger {
            pending: 3,
            ..ledger(0, 97)
        };
        let a = Accounting::of(queued, 500);
        assert_eq!((a.stranded, a.undersell), (0, 0));
    }

    #[test]
    fn units_returned_twice_show_as_phantom_inventory() {
        // One unit of an order came back twice: 101 units on the shelf, none in orders.
        let a = Accounting::of(ledger(101, 0), 0);
        assert_eq!((a.lost_updates, a.oversell), (1, 0));
        // ... and sold again: one more unit than existed.
        let a = Accounting::of(ledger(0, 101), 500);
        assert_eq!((a.oversell, a.lost_updates), (1, 1));
    }

    #[test]
    fn a_return_that_never_reached_the_home_is_stranded() {
        // Two units expired and left their orders; the counter never got them back.
        let returning = Ledger {
            returned: 2,
            returning: 2,
            ..ledger(0, 98)
        };
        let a = Accounting::of(returning, 500);
        assert_eq!((a.stranded, a.undersell, a.oversell), (2, 2, 0));
    }

    #[test]
    fn units_left_count_as_undersell_only_when_demand_exceeded_supply() {
        assert_eq!(Accounting::of(ledger(7, 93), 500).undersell, 7);
        assert_eq!(Accounting::of(ledger(50, 50), 50).undersell, 0);
    }
}
