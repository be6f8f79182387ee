//! Per-user limits of products whose stock is in the database (the row or the buckets): the
//! units each buyer holds, in `purchase_quota`, claimed by a purchase in its own transaction
//! before it touches the stock.
//!
//! **Why this is atomic with the deduction.** The claim is one statement on the buyer's own row
//! (`INSERT … ON DUPLICATE KEY UPDATE units = units + q RETURNING units`): it locks that row
//! until the purchase's transaction ends, so a buyer's concurrent clicks queue on it one after
//! the other, and each sees the units of those committed before. A claim past the limit, or a
//! purchase that fails later (sold out, a duplicate), rolls back with the transaction and leaves
//! the buyer's count as it was. Buyers never wait on each other: each has a row of their own.
//! Claiming first and taking stock second keeps the hot row's lock out of the claim's round
//! trip.

use std::collections::{BTreeMap, HashMap};

use super::engine::{Conn, Sql, each_engine, signed, sql};
use super::orders::PurchaseKey;

/// Whether the buyer may hold the claimed units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Within the limit.
    Within,
    /// The buyer would hold `units`, more than `limit`.
    Beyond { units: i64, limit: i64 },
}

/// Adds `quantity` units to the buyer's count of the product, in `conn`'s transaction, and
/// says whether the buyer now holds more than `limit`. The limit comes from the caller (the
/// product's rules): read in this statement, it would take a shared lock on the product row,
/// and two buyers' stock writes would then wait on each other's — a deadlock.
pub async fn claim(
    conn: Conn<'_>,
    key: PurchaseKey<'_>,
    quantity: u32,
    limit: i64,
) -> Result<Claim, sqlx::Error> {
    const CLAIM: Sql = sql!(
        mysql: "INSERT INTO purchase_quota (product_id, user_id, units) VALUES (?, ?, ?) \
                ON DUPLICATE KEY UPDATE units = units + VALUES(units) RETURNING units",
        postgres: "INSERT INTO purchase_quota (product_id, user_id, units) VALUES (?, ?, ?) \
                   ON CONFLICT (product_id, user_id) \
                   DO UPDATE SET units = purchase_quota.units + EXCLUDED.units RETURNING units",
    );
    let units: i64 = each_engine!(conn, |c, e| sqlx::query_scalar(e.sql(CLAIM))
        .bind(signed(key.product_id))
        .bind(key.user_id)
        .bind(i64::from(quantity))
        .fetch_one(c)
        .await)?;
    Ok(match units > limit {
        true => Claim::Beyond { units, limit },
        false => Claim::Within,
    })
}

/// The units each of `users` holds of the product, their rows locked (created at 0 where
/// missing) until `conn`'s transaction ends. The rows are locked in one statement, each by
/// its key (an insert's duplicate check: no scan, so no other buyer's row and no gap), in byte
/// order of the user ids, so that two batches sharing buyers cannot lock them in opposite
/// orders.
pub async fn lock_buyers(
    conn: Conn<'_>,
    product_id: u64,
    users: &[&str],
) -> Result<HashMap<String, i64>, sqlx::Error> {
    let mut users = users.to_vec();
    users.sort_unstable();
    users.dedup();
    if users.is_empty() {
        return Ok(HashMap::new());
    }
    // An upsert that updates an existing row locks it exclusively at once; `INSERT IGNORE` (or
    // `ON CONFLICT DO NOTHING`) would not lock it, or on MariaDB take a shared lock first, and
    // two batches upgrading theirs would deadlock.
    const LOCK: Sql = Sql {
        mysql: " ON DUPLICATE KEY UPDATE units = units RETURNING user_id, units",
        postgres: " ON CONFLICT (product_id, user_id) DO UPDATE SET units = purchase_quota.units \
                   RETURNING user_id, units",
    };
    let held: Vec<(String, i64)> = each_engine!(conn, |c, e| {
        let mut upsert = e.builder("INSERT INTO purchase_quota (product_id, user_id, units) ");
        upsert.push_values(&users, |mut row, user| {
            row.push_bind(signed(product_id))
                .push_bind(*user)
                .push_bind(0_i64);
        });
        upsert.push(e.sql(LOCK));
        upsert.build_query_as().fetch_all(c).await
    })?;
    Ok(held.into_iter().collect())
}

/// Adds units to buyers' counts of the product (rows locked by [`lock_buyers`]).
pub async fn add(
    conn: Conn<'_>,
    product_id: u64,
    units: &HashMap<&str, i64>,
) -> Result<(), sqlx::Error> {
    const ADD: Sql = Sql {
        mysql: " ON DUPLICATE KEY UPDATE units = units + VALUES(units)",
        postgres: " ON CONFLICT (product_id, user_id) \
                   DO UPDATE SET units = purchase_quota.units + EXCLUDED.units",
    };
    let units: Vec<(&str, i64)> = units.iter().map(|(user, units)| (*user, *units)).collect();
    upsert(conn, product_id, &units, ADD).await
}

/// Gives each buyer of `units` that many units of the product back (never below 0), in `conn`'s
/// transaction, whose [`lock_buyers`] locked (or created) their rows: one statement, and each
/// row reached by its key. A `WHERE user_id IN (…)` would leave the way to the optimizer, which
/// may scan every count of the product instead — under `REPEATABLE READ` locking each, and the
/// gaps between them, where every new buyer of the product inserts theirs.
pub async fn give_back(
    conn: Conn<'_>,
    product_id: u64,
    units: &BTreeMap<&str, i64>,
) -> Result<(), sqlx::Error> {
    const BACK: Sql = Sql {
        mysql: " ON DUPLICATE KEY UPDATE units = GREATEST(units - VALUES(units), 0)",
        postgres: " ON CONFLICT (product_id, user_id) \
                   DO UPDATE SET units = GREATEST(purchase_quota.units - EXCLUDED.units, 0)",
    };
    let units: Vec<(&str, i64)> = units.iter().map(|(user, units)| (*user, *units)).collect();
    upsert(conn, product_id, &units, BACK).await
}

/// Writes each buyer's units of `units` into their count of the product as `update` says (the
/// rows exist: [`lock_buyers`] made them), in one statement.
async fn upsert(
    conn: Conn<'_>,
    product_id: u64,
    units: &[(&str, i64)],
    update: Sql,
) -> Result<(), sqlx::Error> {
    if units.is_empty() {
        return Ok(());
    }
    each_engine!(conn, |c, e| {
        let mut upsert = e.builder("INSERT INTO purchase_quota (product_id, user_id, units) ");
        upsert.push_values(units, |mut row, (user, units)| {
            row.push_bind(signed(product_id))
                .push_bind(*user)
                .push_bind(*units);
        });
        upsert.push(e.sql(update));
        upsert.build().execute(c).await.map(|_| ())
    })
}
