//! What a flash sale really did, read from the database rather than from HTTP answers.
//!
//! HTTP answers can lie in both directions (a 201 whose order was never written, an order
//! whose answer was lost), so every correctness figure comes from the `products` and `orders`
//! rows. The definitions:
//!
//! * **sold** = Σ `orders.quantity` of the product; **oversell** = max(0, sold − S).
//! * **lost updates** (phantom inventory) = sold − (S − final stock) when positive: units that
//!   left the shelf in orders but never left the stock counter, the signature of a
//!   read-modify-write race (two buyers read 5, both write 4).
//! * **negative stock** = −final stock when below zero: an unguarded `stock = stock − q`.
//! * **undersell** = units still in stock although demand exceeded supply (a strategy that
//!   gives up too early, e.g. optimistic retries running out).

use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::MySqlPool;

/// The rows of one product after a sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Ledger {
    pub final_stock: i64,
    /// Σ quantity over the product's orders.
    pub units_in_orders: i64,
    /// Number of order rows.
    pub orders: i64,
}

/// Reads the product's stock and its orders.
pub async fn read_ledger(db: &MySqlPool, product: u64) -> Result<Ledger> {
    let final_stock: i64 =
        sqlx::query_scalar("SELECT CAST(stock AS SIGNED) FROM products WHERE id = ?")
            .bind(product)
            .fetch_one(db)
            .await
            .with_context(|| format!("reading product {product}"))?;
    let (units, orders): (i64, i64) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(quantity), 0) AS SIGNED), CAST(COUNT(*) AS SIGNED) \
         FROM orders WHERE product_id = ?",
    )
    .bind(product)
    .fetch_one(db)
    .await
    .with_context(|| format!("reading the orders of product {product}"))?;
    Ok(Ledger {
        final_stock,
        units_in_orders: units,
        orders,
    })
}

/// The correctness figures of one sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Accounting {
    pub initial_stock: i64,
    pub final_stock: i64,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
    pub lost_updates: i64,
    pub negative_stock: i64,
    pub undersell: i64,
    /// Demand (units requested) exceeded the initial stock.
    pub demand_exceeded_supply: bool,
}

impl Accounting {
    /// Applies the definitions of the module docs.
    pub fn of(initial_stock: i64, demand_units: i64, ledger: Ledger) -> Accounting {
        let sold = ledger.units_in_orders;
        let left = ledger.final_stock;
        let exceeded = demand_units > initial_stock;
        Accounting {
            initial_stock,
            final_stock: left,
            units_sold: sold,
            orders: ledger.orders,
            oversell: (sold - initial_stock).max(0),
            lost_updates: (sold - (initial_stock - left)).max(0),
            negative_stock: (-left).max(0),
            undersell: if exceeded { left.max(0) } else { 0 },
            demand_exceeded_supply: exceeded,
        }
    }

    /// Whether the sale broke an invariant (oversell, lost updates or negative stock).
    pub fn is_incorrect(&self) -> bool {
        self.oversell > 0 || self.lost_updates > 0 || self.negative_stock > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(final_stock: i64, units: i64) -> Ledger {
        Ledger {
            final_stock,
            units_in_orders: units,
            orders: units,
        }
    }

    #[test]
    fn a_correct_sale_has_no_anomaly() {
        let a = Accounting::of(100, 500, ledger(0, 100));
        assert!(!a.is_incorrect());
        assert_eq!(
            (a.oversell, a.lost_updates, a.negative_stock, a.undersell),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn lost_updates_show_as_phantom_inventory_and_oversell() {
        // 130 units ordered, the counter only went down by 100.
        let a = Accounting::of(100, 500, ledger(0, 130));
        assert_eq!(a.oversell, 30);
        assert_eq!(a.lost_updates, 30);
        assert_eq!(a.negative_stock, 0);
    }

    #[test]
    fn an_unguarded_decrement_shows_negative_stock_without_lost_updates() {
        let a = Accounting::of(100, 500, ledger(-12, 112));
        assert_eq!(a.oversell, 12);
        assert_eq!(a.negative_stock, 12);
        assert_eq!(a.lost_updates, 0);
    }

    #[test]
    fn units_left_count_as_undersell_only_when_demand_exceeded_supply() {
        assert_eq!(Accounting::of(100, 500, ledger(7, 93)).undersell, 7);
        assert_eq!(Accounting::of(100, 50, ledger(50, 50)).undersell, 0);
    }
}
