//! The statements of an order's life after its insert: paying, ending (expiry or cancellation)
//! and giving the units back to a home in this database (the sweep's look-ups are in
//! [`super::due`]).
//!
//! **Each transition is one conditional `UPDATE`.** The row's current state is in its `WHERE`
//! (`state = 'reserved'`, and for a payment `pay_by > NOW(6)`), so of two transitions racing
//! on one order — a payment and an expiry, a cancellation and an expiry, two cancellations —
//! InnoDB's row lock lets one change the row and the other find 0 rows to change, whatever the
//! timing: the second learns it lost and changes nothing. The clock is the database's
//! (`NOW(6)`), one clock for every instance.
//!
//! The checked-then-written variants ([`read_state`] then [`force_state`]) exist for the fault
//! scenarios only: a read and a write with time between them, which two racers both pass.

use std::collections::BTreeMap;

use sqlx::{Connection, MySql, MySqlConnection, MySqlPool, QueryBuilder};

use super::orders::{OrderState, PurchaseKey};
use super::quota;

/// `reserved` → `paid`, if the order is reserved and its deadline has not passed: whether it
/// changed.
pub async fn pay(pool: &MySqlPool, order_id: u64) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE orders SET state = 'paid', ended_at = NOW(6) \
         WHERE id = ? AND state = 'reserved' AND pay_by > NOW(6)",
    )
    .bind(order_id)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// `reserved` → `to`, in `conn`'s transaction; `due_only`: only if its deadline has passed
/// (an expiry). Whether it changed.
pub async fn end(
    conn: &mut MySqlConnection,
    order_id: u64,
    to: OrderState,
    due_only: bool,
) -> Result<bool, sqlx::Error> {
    let returned = returned_at(to);
    let due = match due_only {
        true => " AND pay_by <= NOW(6)",
        false => "",
    };
    let sql = format!(
        "UPDATE orders SET state = ?, ended_at = NOW(6), returned_at = {returned} \
         WHERE id = ? AND state = 'reserved'{due}"
    );
    let done = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(to.name())
        .bind(order_id)
        .execute(conn)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The order's state, read without a lock (the unchecked variants' "check").
pub async fn read_state(
    conn: &mut MySqlConnection,
    order_id: u64,
) -> Result<Option<OrderState>, sqlx::Error> {
    let state: Option<String> = sqlx::query_scalar("SELECT state FROM orders WHERE id = ?")
        .bind(order_id)
        .fetch_optional(conn)
        .await?;
    Ok(state.map(|s| OrderState::of(&s)))
}

/// Writes the order's state whatever it is now (the unchecked variants' "act").
pub async fn force_state(
    conn: &mut MySqlConnection,
    order_id: u64,
    to: OrderState,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE orders SET state = ?, ended_at = NOW(6) WHERE id = ?")
        .bind(to.name())
        .bind(order_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Gives `units` back to the buyer's per-user count of the product (homes in this database:
/// the count the purchases claim against, see [`super::quota`]).
pub async fn give_back_quota(
    conn: &mut MySqlConnection,
    key: PurchaseKey<'_>,
    units: u32,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE purchase_quota SET units = GREATEST(units - ?, 0) \
         WHERE product_id = ? AND user_id = ?",
    )
    .bind(i64::from(units))
    .bind(key.product_id)
    .bind(key.user_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Puts `units` back in the product row, bumping its version like every stock write (so an
/// `optimistic` or fenced buyer who read before it reads again).
pub async fn give_back_to_row(
    conn: &mut MySqlConnection,
    product_id: u64,
    units: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE products SET stock = stock + ?, version = version + 1 WHERE id = ?")
        .bind(units)
        .bind(product_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Puts `units` back in one of the product's buckets, chosen by the order id (returns spread
/// over the buckets as purchases do; one row locked).
pub async fn give_back_to_bucket(
    conn: &mut MySqlConnection,
    product_id: u64,
    order_id: u64,
    units: u32,
) -> Result<(), sqlx::Error> {
    give_back_to_buckets(conn, product_id, &[(order_id, units)]).await
}

/// Gives each of `orders` (ids and quantities, of product `product_id`, whose stock is in
/// buckets) back to its bucket (its id modulo the product's buckets), in `conn`'s transaction:
/// one write per bucket, in the buckets' order, so that two such writers never wait on each
/// other in a cycle. Then bumps the product row's version, last, so that its lock is held only
/// to the commit: the version tells a sold-out product's memory that units came back and may
/// have sold again (see [`crate::inventory::left_and_mark`]).
async fn give_back_to_buckets(
    conn: &mut MySqlConnection,
    product_id: u64,
    orders: &[(u64, u32)],
) -> Result<(), sqlx::Error> {
    let buckets: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM stock_buckets WHERE product_id = ?")
            .bind(product_id)
            .fetch_one(&mut *conn)
            .await?;
    let buckets = u64::try_from(buckets.max(1)).unwrap_or(1);
    let mut units: BTreeMap<u64, i64> = BTreeMap::new();
    for (order_id, quantity) in orders {
        *units.entry(order_id % buckets).or_default() += i64::from(*quantity);
    }
    for (bucket, units) in units {
        sqlx::query(
            "UPDATE stock_buckets SET stock = stock + ? WHERE product_id = ? AND bucket = ?",
        )
        .bind(units)
        .bind(product_id)
        .bind(bucket)
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query("UPDATE products SET version = version + 1 WHERE id = ?")
        .bind(product_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// [`expire_from_row`] for a product whose stock is in buckets: those of `orders` still
/// reserved and due expire, their buyers' counts come back, and each one's units go back to
/// its bucket, one write per bucket touched, last. How many orders it expired.
pub async fn expire_from_buckets(
    conn: &mut MySqlConnection,
    product_id: u64,
    orders: &[(u64, &str)],
) -> Result<u64, sqlx::Error> {
    let expired = end_due_with_quota(&mut *conn, product_id, orders, OrderState::Expired).await?;
    if !expired.is_empty() {
        give_back_to_buckets(conn, product_id, &expired).await?;
    }
    Ok(expired.len() as u64)
}

/// Begins on `conn` the transaction of a batch of expiries ([`expire_from_row`],
/// [`start_expiring`]), at `READ COMMITTED`: its locking reads lock the rows they find and no
/// gap. At InnoDB's default, `REPEATABLE READ`, the read that locks a batch of a few hundred
/// orders by their ids scans the primary key with next-key locks, up to the end of the table
/// where every purchase inserts its order: every purchase of every product would wait for the
/// batch to commit. The batch decides nothing on rows it has not locked, so the weaker level
/// changes no outcome.
pub async fn begin_batch(
    conn: &mut MySqlConnection,
) -> Result<sqlx::Transaction<'_, MySql>, sqlx::Error> {
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *conn)
        .await?;
    conn.begin().await
}

/// Expires, in `conn`'s transaction (see [`begin_batch`]), those of `orders` (all of product
/// `product_id`, whose stock is its row) that are still reserved and due, and gives their
/// units back to the row in one write and to their buyers' counts: how many orders it expired.
///
/// The stock row is the one every purchase of the product queues on, so it is written last,
/// just before the commit: the batch holds it for one statement, not for the five it takes to
/// lock, end and count its orders (held from the first, as a purchase holds it, the batch
/// stalled the product's whole queue for as long as it worked). No wait can close a cycle:
/// the buyers' count rows come first, by their keys ([`quota::lock_buyers`]), as a purchase's
/// and a cancellation's do, so a purchase, cancellation or other batch that ends one of these
/// orders, or buys for one of these buyers, queues there before either holds anything the
/// other wants; the orders' locks are by primary key at `READ COMMITTED`, record locks only,
/// which a purchase's insert of its own order does not wait on. The orders' locks decide which
/// are still due, so a payment that got to one first leaves it out, and one that comes later
/// finds it expired.
pub async fn expire_from_row(
    conn: &mut MySqlConnection,
    product_id: u64,
    orders: &[(u64, &str)],
) -> Result<u64, sqlx::Error> {
    let expired = end_due_with_quota(&mut *conn, product_id, orders, OrderState::Expired).await?;
    let units: i64 = expired.iter().map(|(_, q)| i64::from(*q)).sum();
    if units > 0 {
        give_back_to_row(conn, product_id, units).await?;
    }
    Ok(expired.len() as u64)
}

/// The first step of a return in two (see [`arrive`]): moves those of `orders` (all
/// of product `product_id`, whose stock is its row) that are still reserved and due to
/// `expiring` and gives their buyers' counts back, in `conn`'s transaction (see
/// [`begin_batch`]), locked as [`expire_from_row`] locks them; the row is not touched. Their
/// ids and quantities.
pub async fn start_expiring_in_row(
    conn: &mut MySqlConnection,
    product_id: u64,
    orders: &[(u64, &str)],
) -> Result<Vec<(u64, u32)>, sqlx::Error> {
    end_due_with_quota(conn, product_id, orders, OrderState::Expiring).await
}

/// Ends those of `orders` still reserved and due in `to`, and gives their buyers' counts back:
/// their ids and quantities.
async fn end_due_with_quota(
    conn: &mut MySqlConnection,
    product_id: u64,
    orders: &[(u64, &str)],
    to: OrderState,
) -> Result<Vec<(u64, u32)>, sqlx::Error> {
    if orders.is_empty() {
        return Ok(Vec::new());
    }
    let users: Vec<&str> = orders.iter().map(|(_, user)| *user).collect();
    quota::lock_buyers(&mut *conn, product_id, &users).await?;
    let due = lock_still_due(&mut *conn, orders.iter().map(|(id, _)| *id)).await?;
    if due.is_empty() {
        return Ok(Vec::new());
    }
    end_all(&mut *conn, due.iter().map(|(id, _, _)| *id), to).await?;
    let mut per_user: BTreeMap<&str, i64> = BTreeMap::new();
    for (_, user, quantity) in &due {
        *per_user.entry(user).or_default() += i64::from(*quantity);
    }
    quota::give_back(&mut *conn, product_id, &per_user).await?;
    Ok(due.into_iter().map(|(id, _, q)| (id, q)).collect())
}

/// The orders' half of a return's last step: those of `orders` (ids and quantities) still
/// `on_the_way` move to where it ends (`expiring` to `expired`, `cancelling` to `cancelled`),
/// on `conn` (in its
/// transaction, if it is in one: see [`begin_batch`]). How many orders arrived, and their
/// units: fewer than `orders` when another sweep finished some first. A home in this database
/// (the row) is given those units in the same transaction before it commits
/// ([`give_back_to_row`]); a home outside it (the Redis counter) has them back already, and
/// this records that they arrived.
///
/// The `state = on_the_way` in each `UPDATE` is the once-only token: of two finishers, InnoDB's row
/// locks let one move an order and the other find it moved, and each gives back only the units
/// of the orders it moved, counted per quantity from the rows each statement changed.
pub async fn arrive(
    conn: &mut MySqlConnection,
    orders: &[(u64, u32)],
    on_the_way: OrderState,
) -> Result<(u64, i64), sqlx::Error> {
    let mut by_quantity: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (id, quantity) in orders {
        by_quantity.entry(*quantity).or_default().push(*id);
    }
    let (mut arrived, mut units) = (0, 0);
    for (quantity, ids) in by_quantity {
        let mut moved = QueryBuilder::<MySql>::new("UPDATE orders SET state = ");
        moved
            .push_bind(arrival(on_the_way).name())
            .push(", returned_at = NOW(6) WHERE state = ")
            .push_bind(on_the_way.name())
            .push(" AND quantity = ")
            .push_bind(quantity)
            .push(" AND id ");
        push_in(&mut moved, ids);
        let changed = moved.build().execute(&mut *conn).await?.rows_affected();
        arrived += changed;
        units += i64::try_from(changed).unwrap_or(i64::MAX) * i64::from(quantity);
    }
    Ok((arrived, units))
}

/// The state an order on its way (`expiring`, `cancelling`) ends in once its units are home.
fn arrival(on_the_way: OrderState) -> OrderState {
    match on_the_way {
        OrderState::Cancelling => OrderState::Cancelled,
        _ => OrderState::Expired,
    }
}

/// Moves those of `orders` that are still reserved and due to `expiring`, in `conn`'s
/// transaction (see [`begin_batch`]), and says which: the first step of a batch of expiries
/// whose units go back to a home outside this database (the Redis counter). The orders' locks
/// decide, as for [`expire_from_row`]: a payment or cancellation that got to one first leaves
/// it out, one that comes later finds it `expiring`.
pub async fn start_expiring(
    conn: &mut MySqlConnection,
    orders: &[u64],
) -> Result<Vec<u64>, sqlx::Error> {
    if orders.is_empty() {
        return Ok(Vec::new());
    }
    let due: Vec<u64> = (lock_still_due(&mut *conn, orders.iter().copied())
        .await?
        .into_iter())
    .map(|(id, _, _)| id)
    .collect();
    if !due.is_empty() {
        end_all(conn, due.iter().copied(), OrderState::Expiring).await?;
    }
    Ok(due)
}

/// Locks those of `orders` that are still reserved and due, in `conn`'s transaction: their
/// ids, buyers and quantities. By the primary key: the orders' other indexes are where
/// purchases insert theirs.
async fn lock_still_due(
    conn: &mut MySqlConnection,
    orders: impl IntoIterator<Item = u64>,
) -> Result<Vec<(u64, String, u32)>, sqlx::Error> {
    let mut still_due = QueryBuilder::<MySql>::new(
        "SELECT id, user_id, quantity FROM orders FORCE INDEX (PRIMARY) \
         WHERE state = 'reserved' AND pay_by <= NOW(6) AND id ",
    );
    push_in(&mut still_due, orders);
    still_due.push(" FOR UPDATE");
    still_due.build_query_as().fetch_all(conn).await
}

/// `orders` (locked by this transaction, reserved) → `to`, as [`end`] moves one.
async fn end_all(
    conn: &mut MySqlConnection,
    orders: impl IntoIterator<Item = u64>,
    to: OrderState,
) -> Result<(), sqlx::Error> {
    let mut end = QueryBuilder::<MySql>::new("UPDATE orders SET state = ");
    end.push_bind(to.name())
        .push(", ended_at = NOW(6), returned_at = ")
        .push(returned_at(to))
        .push(" WHERE id ");
    push_in(&mut end, orders);
    end.build().execute(conn).await?;
    Ok(())
}

/// What an order's `returned_at` becomes when it ends in `to`: now if its units are home with
/// the change, else not yet.
fn returned_at(to: OrderState) -> &'static str {
    match to {
        OrderState::Expired | OrderState::Cancelled => "NOW(6)",
        _ => "NULL",
    }
}

/// Appends `IN (?, ?, …)` binding each of `values`.
fn push_in<'t, T>(query: &mut QueryBuilder<MySql>, values: impl IntoIterator<Item = T>)
where
    T: sqlx::Encode<'t, MySql> + sqlx::Type<MySql>,
{
    query.push("IN (");
    let mut list = query.separated(", ");
    for value in values {
        list.push_bind(value);
    }
    query.push(")");
}
